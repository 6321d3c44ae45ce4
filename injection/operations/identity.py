"""Operations on who the agent is and where it is heading: self-concept, threads, snapshots."""

from injection.operations.calls import (
    Caller,
    operation,
    readable_ids,
    require_global,
    require_write,
    scope_for_write,
)
from injection.operations.fields import (
    SelfConceptIn,
    SnapshotIn,
    SnapshotQuery,
    ThreadIn,
    ThreadQuery,
    ThreadUpdateIn,
)
from injection.operations.present import memory_as_dict, snapshot_as_dict, thread_as_dict
from memory.models import SelfConceptField
from memory.selectors.reads import (
    self_concept_current,
    snapshots_newest,
    thread_visible,
    threads_page,
)
from memory.selectors.visibility import scope_ids_held
from memory.services.self_concept import self_concept_write
from memory.services.threads import snapshot_write, thread_set_status, thread_write


@operation
def self_concept_read(*, caller: Caller) -> dict:
    """Read the current self-concept: fact, terrain and self_reflection."""
    scope = require_global(caller=caller)
    current = self_concept_current(principal=caller.principal, scope_ids=[scope.pk])
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


@operation
def self_concept_set(*, caller: Caller, data: SelfConceptIn) -> dict:
    """Write a new version of one self-concept field (fact, terrain, self_reflection). The
    previous version is kept as history, never overwritten."""
    require_write(caller=caller)
    require_global(caller=caller)
    version = self_concept_write(
        field=data.field, content=data.content, actor=caller.principal.actor, reason=data.reason
    )
    return memory_as_dict(version)


@operation
def threads_list(*, caller: Caller, data: ThreadQuery) -> list[dict]:
    """Read threads, heaviest first (open ones by default)."""
    rows = threads_page(
        principal=caller.principal,
        scope_ids=readable_ids(caller=caller, where=data),
        status=data.status,
        limit=data.limit,
    )
    return [thread_as_dict(thread) for thread in rows]


@operation
def thread_create(*, caller: Caller, data: ThreadIn) -> dict:
    """Open a thread: a direction of thought to come back to, weighted like a memory."""
    scope = scope_for_write(caller=caller, where=data)
    thread = thread_write(
        scope_id=scope.pk,
        content=data.content,
        importance=data.importance,
        emotional=data.emotional,
        recurrence=data.recurrence,
        unresolved=data.unresolved,
        actor=caller.principal.actor,
    )
    return thread_as_dict(thread)


@operation
def thread_update(*, caller: Caller, data: ThreadUpdateIn) -> dict:
    """Mark a thread explored or abandoned (or open it again)."""
    require_write(caller=caller)
    thread_visible(
        principal=caller.principal,
        scope_ids=scope_ids_held(principal=caller.principal),
        thread_id=data.thread_id,
    )
    updated = thread_set_status(
        thread_id=data.thread_id,
        status=data.status,
        actor=caller.principal.actor,
        reason=data.reason,
    )
    return thread_as_dict(updated)


@operation
def snapshots_list(*, caller: Caller, data: SnapshotQuery) -> list[dict]:
    """Read the newest snapshot(s)."""
    rows = snapshots_newest(
        principal=caller.principal,
        scope_ids=readable_ids(caller=caller, where=data),
        limit=data.limit,
    )
    return [snapshot_as_dict(snapshot) for snapshot in rows]


@operation
def snapshot_create(*, caller: Caller, data: SnapshotIn) -> dict:
    """Save a short picture of where things stand now, shown at the next session start."""
    scope = scope_for_write(caller=caller, where=data)
    snapshot = snapshot_write(scope_id=scope.pk, content=data.content, actor=caller.principal.actor)
    return snapshot_as_dict(snapshot)
