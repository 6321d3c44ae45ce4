"""Operations on memories: write, read, list, edit, expire, search, profiles."""

from injection.operations.calls import (
    Caller,
    operation,
    readable_ids,
    readable_or_held_ids,
    require_write,
    scope_for_memory,
)
from injection.operations.fields import (
    WHERE_FIELDS,
    FactIn,
    ListIn,
    MemoryEditIn,
    MemoryExpireIn,
    NarrativeIn,
    ProfilesIn,
    RecallIn,
    SearchIn,
)
from injection.operations.present import memory_as_dict, turn_as_dict
from memory.search import memory_search
from memory.selectors.reads import (
    decision_made,
    memories_page,
    memory_evidence,
    profiles_with_facts,
)
from memory.selectors.visibility import memory_links_hidden, memory_visible
from memory.services import lifecycle
from memory.services.attention import memories_activate
from memory.services.attribution import fact_attribute, text_attribute
from memory.services.audit import audit_context_current
from memory.services.edits import memory_update
from memory.services.facts import FactInput, fact_write
from memory.services.narratives import NarrativeInput, narrative_write

NOT_STORED = WHERE_FIELDS | {"reason"}


def _presented(caller: Caller, memories: list) -> list[dict]:
    hidden = memory_links_hidden(principal=caller.principal, memories=memories)
    return [memory_as_dict(memory, hidden=hidden) for memory in memories]


def _written(caller: Caller, memory, *, why_scope: str = "") -> dict:
    """A written memory, with what the write path decided about it and why, and why it landed
    in its scope."""
    context = audit_context_current()
    hidden = memory_links_hidden(principal=caller.principal, memories=[memory])
    decision = (
        decision_made(request_id=context.request_id, memory=memory, hidden=hidden)
        if context
        else None
    )
    answer = {**memory_as_dict(memory, hidden=hidden), "decision": decision}
    if why_scope:
        answer["scope_chosen"] = {"scope": memory.scope.label, "why": why_scope}
    return answer


@operation
def fact_create(*, caller: Caller, data: FactIn) -> dict:
    """Write a fact about a profile (the user, a person, yourself, a project) under a stable
    predicate key like responds_in or security_status; a new value supersedes the current one.
    Value at most 60 characters."""
    scope, why = scope_for_memory(
        caller=caller,
        where=data,
        attribution=fact_attribute(
            kind=data.kind,
            profile_kind=data.profile_kind,
            predicate=data.predicate,
            value=data.value,
        ),
    )
    fact = fact_write(
        data=FactInput(scope_id=scope.pk, **data.model_dump(exclude=NOT_STORED)),
        actor=caller.principal.actor,
        reason=data.reason,
        writer_sees_secrets=caller.principal.sees_secrets,
    )
    return _written(caller, fact, why_scope=why)


@operation
def narrative_create(*, caller: Caller, data: NarrativeIn) -> dict:
    """Write a narrative memory: gesture (what happened, one sentence with tone), context (the
    backdrop), moment (a verbatim quote), cognition_direction (where the thought was heading),
    importance/emotional/unresolved 1-5, tags, and source_turn_ids linking the raw turns it came
    from. Recurrence and weight are computed."""
    scope, why = scope_for_memory(
        caller=caller, where=data, attribution=text_attribute(text=data.gesture)
    )
    narrative = narrative_write(
        data=NarrativeInput(scope_id=scope.pk, **data.model_dump(exclude=NOT_STORED)),
        actor=caller.principal.actor,
        reason=data.reason,
        writer_sees_secrets=caller.principal.sees_secrets,
    )
    return _written(caller, narrative, why_scope=why)


@operation
def memory_recall(*, caller: Caller, data: RecallIn, source: str) -> dict:
    """Read one memory in full, with the raw conversation turns it was distilled from (its
    evidence), so you can go back from the narrative to the texture."""
    memory = memory_visible(principal=caller.principal, memory_id=data.memory_id)
    evidence = memory_evidence(principal=caller.principal, memory=memory, limit=data.evidence_turns)
    memories_activate(memory_ids=[memory.pk], source=source)
    return {
        **_presented(caller, [memory])[0],
        "evidence": [turn_as_dict(turn) for turn in evidence],
    }


@operation
def memories_list(*, caller: Caller, data: ListIn) -> list[dict]:
    """List the memories visible from here, newest first (status "" lists every status)."""
    rows = memories_page(
        principal=caller.principal,
        scope_ids=readable_ids(caller=caller, where=data),
        memory_type=data.memory_type,
        status=data.status,
        limit=data.limit,
        offset=data.offset,
    )
    return _presented(caller, list(rows))


@operation
def memory_edit(*, caller: Caller, data: MemoryEditIn) -> dict:
    """Change a memory. The edited copy supersedes the old one, which stays in history: facts
    take value/summary/confidence/importance; narratives any narrative field; self-concept takes
    content."""
    require_write(caller=caller)
    memory = memory_visible(principal=caller.principal, memory_id=data.memory_id)
    successor = memory_update(
        memory=memory,
        changes=data.changes.model_dump(exclude_unset=True),
        actor=caller.principal.actor,
        reason=data.reason,
    )
    return _written(caller, successor)


@operation
def memory_expire(*, caller: Caller, data: MemoryExpireIn) -> dict:
    """Expire a memory (Tideline's delete): it stops being recalled but stays in the store and
    the audit log, and the owner can restore it."""
    require_write(caller=caller)
    memory_visible(principal=caller.principal, memory_id=data.memory_id)
    expired = lifecycle.memory_expire(
        memory_id=data.memory_id, actor=caller.principal.actor, reason=data.reason
    )
    return _presented(caller, [expired])[0]


@operation
def memories_search(*, caller: Caller, data: SearchIn, source: str) -> list[dict]:
    """Search memories by keywords and meaning within the scopes visible from here (all the
    key holds when no place is named). Each hit carries its scores and why it matched."""
    scope_ids = readable_or_held_ids(caller=caller, where=data)
    hits = memory_search(
        query=data.q,
        scope_ids=scope_ids,
        limit=data.limit,
        memory_types=[data.memory_type] if data.memory_type else None,
        exclude_secret=not caller.principal.sees_secrets,
        activation_source=source,
    )
    memories = _presented(caller, [hit.memory for hit in hits])
    return [
        {
            "memory": memory,
            "score": hit.score,
            "lexical": hit.lexical,
            "semantic": hit.semantic,
            "why": hit.why,
        }
        for hit, memory in zip(hits, memories, strict=True)
    ]


@operation
def profiles_list(*, caller: Caller, data: ProfilesIn) -> list[dict]:
    """Read profiles and their current facts (all visible, or the one with this name)."""
    pairs = profiles_with_facts(
        principal=caller.principal,
        scope_ids=readable_ids(caller=caller, where=data),
        name=data.name,
    )
    return [
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
                for f in facts
            ],
        }
        for profile, facts in pairs
    ]
