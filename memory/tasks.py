"""Celery tasks: thin wrappers that take ids, never memory content, and call one service."""

from celery import shared_task

from memory.services.embedding import memories_embed, turns_embed


@shared_task(ignore_result=True)
def embed_memories(memory_ids: list[int]) -> int:
    return memories_embed(memory_ids=memory_ids)


@shared_task(ignore_result=True)
def embed_turns(turn_ids: list[int]) -> int:
    return turns_embed(turn_ids=turn_ids)
