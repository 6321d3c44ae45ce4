"""Warm-up: pay at server start what the first agent request would otherwise pay.

The first search in a process loads the embedder's weights, jieba's dictionary and the in-memory
search index — seconds, longer than the Claude Code hook waits — so `./tideline up` does it in the
background as soon as the server process starts. Without a broker (eager Celery) nothing else
back-fills, so the warm-up also embeds rows a crash left pending.
"""

import logging
import threading
import time

from django.conf import settings
from django.db import connections

from injection.services.context import keywords_extract
from memory.search.service import search_index
from memory.search.text import text_terms
from memory.services.embedding import embedder_get, embeddings_pending_drain

logger = logging.getLogger("tideline.warmup")


def server_warm(*, drain_pending: bool = True) -> dict[str, float]:
    """Load the embedder, jieba and both search indexes, and in eager mode (unless told not to)
    embed what is still pending. Returns seconds spent on each part."""
    spent: dict[str, float] = {}

    def timed(name: str, work) -> None:
        started = time.perf_counter()
        work()
        spent[name] = round(time.perf_counter() - started, 3)

    embedder = embedder_get()
    if embedder is not None:
        timed("embedder", lambda: embedder.embed(["warm up"]))
        if drain_pending and settings.CELERY_TASK_ALWAYS_EAGER:
            timed("embeddings_pending", embeddings_pending_drain)
    timed("jieba", lambda: (text_terms("边界条件"), keywords_extract(text="边界条件", limit=1)))
    timed("memory_index", lambda: search_index("memory"))
    timed("turn_index", lambda: search_index("turn"))
    return spent


def server_warm_in_background(*, drain_pending: bool = True) -> threading.Thread:
    def run() -> None:
        try:
            logger.info("warm-up done: %s", server_warm(drain_pending=drain_pending))
        except Exception:
            # A failed warm-up only means the first request is slow; it must not stop the server.
            logger.exception("warm-up failed; the first request will load what it needs")
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name="tideline-warmup", daemon=True)
    thread.start()
    return thread
