"""Read models shared by REST and MCP: memories as plain dicts, listings, the timeline, stats."""

from datetime import timedelta

from django.db.models import Count, Q
from django.utils import timezone

from memory.models import (
    AttentionEvent,
    ContextTurn,
    EmbeddingStatus,
    Fact,
    Memory,
    MemoryStatus,
    Narrative,
    Profile,
    SelfConcept,
    SelfConceptField,
    Session,
    Snapshot,
    Thread,
)
from memory.services.errors import InvalidInput

LIST_MAX = 200


def memory_as_dict(memory: Memory) -> dict:
    child = memory.child
    data = {
        "id": memory.pk,
        "type": memory.memory_type,
        "scope_id": memory.scope_id,
        "scope": memory.scope.label,
        "status": memory.status,
        "summary": memory.summary,
        "confidence": memory.confidence,
        "importance": memory.importance,
        "pinned": memory.pinned,
        "recorded_at": memory.recorded_at.isoformat(),
        "valid_from": memory.valid_from.isoformat(),
        "valid_to": memory.valid_to.isoformat() if memory.valid_to else None,
        "expired_by": memory.expired_by,
        "supersedes": memory.supersedes_id,
        "superseded_by": memory.superseded_by_id,
        "activation_count": memory.activation_count,
        "embedding_status": memory.embedding_status,
    }
    if isinstance(child, Narrative):
        data.update(
            gesture=child.gesture,
            context=child.context,
            moment=child.moment,
            cognition_direction=child.cognition_direction,
            weight=child.weight,
            emotional=child.emotional,
            recurrence=child.recurrence,
            unresolved=child.unresolved,
            layer=child.layer,
            ntype=child.ntype,
            tags=child.tags,
            entities_role=child.entities_role,
            related_entities=child.related_entities,
            valence=child.valence,
            emotion_intensity=child.emotion_intensity,
        )
    elif isinstance(child, Fact):
        data.update(
            profile=child.profile.name,
            kind=child.kind,
            predicate=child.predicate,
            value=child.value,
        )
    elif isinstance(child, SelfConcept):
        data.update(field=child.field, content=child.content)
    return data


def memories_list(
    *,
    scope_ids: list[int],
    memory_type: str = "",
    status: str = MemoryStatus.ACTIVE,
    limit: int = 50,
    offset: int = 0,
) -> list[dict]:
    if memory_type and memory_type not in {"narrative", "fact", "self_concept"}:
        raise InvalidInput("memory_type must be narrative, fact or self_concept", field="type")
    if status and status not in MemoryStatus.values:
        raise InvalidInput(f"status must be one of {MemoryStatus.values}", field="status")
    rows = Memory.objects.filter(scope_id__in=scope_ids).select_related("scope")
    if memory_type:
        rows = rows.filter(memory_type=memory_type)
    if status:
        rows = rows.filter(status=status)
    limit = max(1, min(LIST_MAX, limit))
    page = rows.order_by("-recorded_at", "-pk")[max(0, offset) : max(0, offset) + limit]
    return [memory_as_dict(memory) for memory in page]


def self_concept_read() -> dict:
    current = {
        concept.field: concept
        for concept in SelfConcept.objects.filter(status=MemoryStatus.ACTIVE).order_by(
            "recorded_at", "pk"
        )
    }
    return {
        name: (
            {
                "id": current[name].pk,
                "content": current[name].content,
                "recorded_at": current[name].recorded_at.isoformat(),
            }
            if name in current
            else None
        )
        for name in SelfConceptField.values
    }


def thread_as_dict(thread: Thread) -> dict:
    return {
        "id": thread.pk,
        "scope_id": thread.scope_id,
        "content": thread.content,
        "status": thread.status,
        "weight": thread.weight,
        "importance": thread.importance,
        "emotional": thread.emotional,
        "recurrence": thread.recurrence,
        "unresolved": thread.unresolved,
        "created_at": thread.created_at.isoformat(),
    }


def threads_list(*, scope_ids: list[int], status: str = "", limit: int = 50) -> list[dict]:
    rows = Thread.objects.filter(scope_id__in=scope_ids)
    if status:
        rows = rows.filter(status=status)
    return [
        thread_as_dict(t) for t in rows.order_by("-weight", "-created_at")[: min(limit, LIST_MAX)]
    ]


def snapshot_as_dict(snapshot: Snapshot) -> dict:
    return {
        "id": snapshot.pk,
        "scope_id": snapshot.scope_id,
        "session_id": snapshot.session_id,
        "content": snapshot.content,
        "created_at": snapshot.created_at.isoformat(),
    }


def snapshots_list(*, scope_ids: list[int], limit: int = 1) -> list[dict]:
    rows = Snapshot.objects.filter(scope_id__in=scope_ids).order_by("-created_at", "-pk")
    return [snapshot_as_dict(s) for s in rows[: max(1, min(limit, LIST_MAX))]]


def profiles_read(*, scope_ids: list[int], name: str = "") -> list[dict]:
    profiles = Profile.objects.filter(scope_id__in=scope_ids).select_related("scope")
    if name:
        profiles = profiles.filter(Q(name__iexact=name) | Q(aliases__icontains=name))
    result = []
    for profile in profiles.order_by("-pinned", "name")[:LIST_MAX]:
        facts = Fact.objects.filter(profile=profile, status=MemoryStatus.ACTIVE, secret=False)
        result.append(
            {
                "id": profile.pk,
                "name": profile.name,
                "kind": profile.kind,
                "scope": profile.scope.label,
                "pinned": profile.pinned,
                "aliases": profile.aliases,
                "description": profile.description,
                "facts": [
                    {"id": f.pk, "kind": f.kind, "predicate": f.predicate, "value": f.value}
                    for f in facts.order_by("predicate")
                ],
            }
        )
    return result


def turn_as_dict(turn: ContextTurn) -> dict:
    return {
        "id": turn.pk,
        "session_id": turn.session_id,
        "seq": turn.seq,
        "role": turn.role,
        "speaker": turn.speaker,
        "content": turn.content,
        "occurred_at": turn.occurred_at.isoformat(),
    }


def timeline_read(
    *,
    scope_ids: list[int],
    session_id: int | None = None,
    around_turn_id: int | None = None,
    limit: int = 20,
) -> list[dict]:
    """A stretch of the raw timeline: a session's newest turns, or the turns around one turn (the
    way back from a memory's evidence to its texture)."""
    limit = max(1, min(limit, LIST_MAX))
    turns = ContextTurn.objects.filter(scope_id__in=scope_ids)
    if around_turn_id is not None:
        anchor = turns.filter(pk=around_turn_id).first()
        if anchor is None:
            raise InvalidInput(f"unknown turn {around_turn_id}", field="turn_id")
        half = limit // 2
        same = turns.filter(session_id=anchor.session_id)
        before = list(same.filter(seq__lt=anchor.seq).order_by("-seq")[:half])
        after = list(same.filter(seq__gte=anchor.seq).order_by("seq")[: limit - len(before)])
        return [turn_as_dict(t) for t in [*reversed(before), *after]]
    if session_id is not None:
        turns = turns.filter(session_id=session_id)
    newest = list(turns.order_by("-occurred_at", "-pk")[:limit])
    return [turn_as_dict(t) for t in reversed(newest)]


def stats_read(*, scope_ids: list[int]) -> dict:
    memories = Memory.objects.filter(scope_id__in=scope_ids)
    by_type_status: dict[str, dict[str, int]] = {}
    for row in memories.values("memory_type", "status").annotate(n=Count("id")):
        by_type_status.setdefault(row["memory_type"], {})[row["status"]] = row["n"]
    week = timezone.now() - timedelta(days=7)
    return {
        "memories": by_type_status,
        "needs_embedding": memories.filter(
            embedding_status__in=[EmbeddingStatus.PENDING, EmbeddingStatus.FAILED]
        ).count(),
        "sessions": Session.objects.filter(scope_id__in=scope_ids).count(),
        "turns": ContextTurn.objects.filter(scope_id__in=scope_ids).count(),
        "threads_open": Thread.objects.filter(scope_id__in=scope_ids, status="open").count(),
        "attention_7d": AttentionEvent.objects.filter(
            memory__scope_id__in=scope_ids, occurred_at__gte=week
        ).count(),
    }
