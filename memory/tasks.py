"""Celery tasks: thin wrappers that take ids, never memory content, and call one service.

Embedding is idempotent (the same row gets the same vector), so these tasks acknowledge late: a
worker that dies mid-task leaves the message to be redelivered instead of losing it.
"""

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings

from memory.search.postgres import native_queue_drain
from memory.services.embedding import embeddings_pending_drain, memories_embed, turns_embed
from memory.services.inbox import inbox_flush


@shared_task(ignore_result=True, acks_late=True)
def embed_memories(memory_ids: list[int]) -> int:
    return memories_embed(memory_ids=memory_ids)


@shared_task(ignore_result=True, acks_late=True)
def embed_turns(turn_ids: list[int]) -> int:
    return turns_embed(turn_ids=turn_ids)


@shared_task(ignore_result=True, acks_late=True)
def embeddings_sweep(grace_seconds: float | None = None) -> dict:
    """The beat's durable back-fill: rows whose queued task was lost (broker down) or failed."""
    return embeddings_pending_drain(
        grace_seconds=(
            settings.TIDELINE_EMBED_SWEEP_GRACE_SECONDS if grace_seconds is None else grace_seconds
        )
    )


@shared_task(ignore_result=True, acks_late=True)
def inbox_flush_pending() -> int:
    """Judge what capture queued. Each item is claimed exactly once, so a redelivered or doubled
    task finds nothing left to do; the beat runs it too, for items whose task was lost."""
    return inbox_flush(use_llm=settings.TIDELINE_INBOX_USE_LLM).processed


@shared_task(ignore_result=True, acks_late=True)
def search_queue_drain() -> dict:
    """Apply the native search index's queue (PostgreSQL): idempotent, each row is applied from
    the row's current state, so a redelivered task only finds less to do."""
    return native_queue_drain()


@worker_ready.connect
def embeddings_sweep_at_worker_start(sender, **kwargs) -> None:
    """A worker coming up (often: the broker is back) drains what waited, without a beat tick."""
    queue = next(iter(sender.app.amqp.queues.consume_from))
    sender.app.send_task(
        "memory.tasks.embeddings_sweep", kwargs={"grace_seconds": 0}, queue=queue, expires=600
    )
