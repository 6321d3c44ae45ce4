"""What search derives from the store and keeps beside it: one vector per word of the stored turns,
per embedding model, so a query word can reach the words nearest it ("child" reaching "kid")."""

import secrets

from django.db import models


def word_vector_token() -> int:
    return secrets.randbits(62)


class WordVector(models.Model):
    """A word of the stored turns and its vector under one embedding model.

    Derived and append-only: written when turns are embedded (and by the embeddings back-fill), never
    updated. Which words a query may be expanded by is decided at query time from the caller's
    visible turns, so a row here says nothing about who may see the word."""

    # The index's term for the word (its stem): what the expansion looks up in the postings.
    term = models.CharField(max_length=100)
    # The surface form that was embedded (the first seen).
    word = models.CharField(max_length=100)
    embedding_model = models.CharField(max_length=120)
    embedding = models.BinaryField()
    # Random per row: a process holding the vocabulary checks its last row's token, because SQLite
    # hands a rolled-back row's id to the next insert.
    token = models.BigIntegerField(default=word_vector_token, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["embedding_model", "term"], name="word_vector_one_per_term"
            )
        ]

    def __str__(self) -> str:
        return f"{self.word} ({self.embedding_model})"
