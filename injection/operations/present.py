"""How operations hand results back: plain JSON-ready dicts, the same for REST and MCP."""

from memory.models import ContextTurn, Fact, Memory, Narrative, SelfConcept, Snapshot, Thread
from memory.services.timeline import session_external_id_given


def memory_as_dict(memory: Memory, *, hidden: frozenset[int] = frozenset()) -> dict:
    """`hidden`: linked ids the caller may not read (memory_links_hidden), shown as no link."""
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
        "secret": memory.secret,
        "depends_on": memory.depends_on,
        "expires_at": memory.expires_at.isoformat() if memory.expires_at else None,
        "recorded_at": memory.recorded_at.isoformat(),
        "valid_from": memory.valid_from.isoformat(),
        "valid_to": memory.valid_to.isoformat() if memory.valid_to else None,
        "expired_by": memory.expired_by,
        "supersedes": None if memory.supersedes_id in hidden else memory.supersedes_id,
        "superseded_by": None if memory.superseded_by_id in hidden else memory.superseded_by_id,
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
            profile_kind=child.profile.kind,
            kind=child.kind,
            predicate=child.predicate,
            value=child.value,
        )
    elif isinstance(child, SelfConcept):
        data.update(field=child.field, content=child.content)
    return data


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


def snapshot_as_dict(snapshot: Snapshot) -> dict:
    return {
        "id": snapshot.pk,
        "scope_id": snapshot.scope_id,
        "session_id": snapshot.session_id,
        "content": snapshot.content,
        "created_at": snapshot.created_at.isoformat(),
    }


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


def session_as_dict(session) -> dict:
    return {
        "id": session.pk,
        "external_id": session_external_id_given(session),
        "runtime": session.runtime,
        "scope_id": session.scope_id,
        "origin": session.origin,
        "subagent": session.is_subagent,
    }
