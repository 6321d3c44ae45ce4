"""Editing a memory: an edit is a supersede, never an overwrite.

One place for every interface — REST, MCP and the owner panel. The edited copy is a new row that
supersedes the old one (which stays, with its history); it is written only while the edited row
is still current, otherwise Conflict names its state. Whatever the edit does not change is kept
exactly as it was (depends_on, pinned, secret, confidence, tags, weights, evidence); text that the
edit changes gets a new summary, search text and embedding unless a summary is given."""

from dataclasses import replace

from memory.models import Fact, MemoryStatus, Narrative, SelfConcept
from memory.services.errors import Conflict, InvalidInput
from memory.services.facts import FactInput, fact_write
from memory.services.lifecycle import memory_set_pinned, memory_set_secret
from memory.services.narratives import NarrativeInput, edit_refused_message, narrative_write
from memory.services.self_concept import self_concept_write

NARRATIVE_FIELDS = (
    "gesture",
    "context",
    "moment",
    "cognition_direction",
    "importance",
    "emotional",
    "unresolved",
    "layer",
    "ntype",
    "tags",
    "entities_role",
    "related_entities",
    "valence",
    "emotion_intensity",
    "summary",
)
COMMON_FIELDS = ("confidence", "depends_on", "pinned", "secret")
FACT_FIELDS = ("value", "summary", "importance", "expires_at", *COMMON_FIELDS)
# Flags change the row itself (audited), not its content: no new version is written for them.
FLAGS = frozenset({"pinned", "secret"})


def _flags_set(*, memory, changes: dict, actor: str, reason: str):
    if memory.status != MemoryStatus.ACTIVE:
        raise Conflict(edit_refused_message(memory))
    if "pinned" in changes and changes["pinned"] != memory.pinned:
        memory_set_pinned(memory_id=memory.pk, pinned=changes["pinned"], actor=actor, reason=reason)
    if "secret" in changes and changes["secret"] != memory.secret:
        memory_set_secret(memory_id=memory.pk, secret=changes["secret"], actor=actor, reason=reason)
    memory.refresh_from_db()
    return memory


def narrative_supersede(
    *, narrative: Narrative, changes: dict, actor: str, reason: str = "", request_id: str = ""
) -> Narrative:
    """Write the edited narrative as a new row that supersedes the old one (narrative_write links
    both ways and audits it as one decision). An edit the gate rejects is stored as rejected and
    leaves the original active."""
    unknown = set(changes) - set(NARRATIVE_FIELDS) - set(COMMON_FIELDS)
    if unknown:
        raise InvalidInput(f"cannot change {sorted(unknown)} on a narrative", field="changes")
    if narrative.status != MemoryStatus.ACTIVE:
        raise Conflict(edit_refused_message(narrative))
    current = NarrativeInput(
        scope_id=narrative.scope_id,
        **{name: getattr(narrative, name) for name in (*NARRATIVE_FIELDS, *COMMON_FIELDS)},
        expires_at=narrative.expires_at,
        # The edit corrects how the event is told, not when it happened.
        valid_from=narrative.valid_from,
        source_turn_ids=list(narrative.evidence.values_list("turn_id", flat=True)),
    )
    texts = {"gesture", "context", "moment", "cognition_direction"}
    if texts & set(changes) and "summary" not in changes:
        changes = {**changes, "summary": ""}
    return narrative_write(
        data=replace(current, **changes, supersedes_id=narrative.pk),
        actor=actor,
        reason=reason or f"edit of narrative #{narrative.pk}",
        request_id=request_id,
    )


def memory_update(*, memory, changes: dict, actor: str, reason: str = "", request_id: str = ""):
    """Change a memory by superseding it with an edited copy: facts by writing the new value under
    the same stable key, self-concept by a new version, narratives by narrative_supersede. Each is
    written only while the edited row is still current; otherwise Conflict names its state."""
    child = memory.child
    if not changes:
        raise InvalidInput("nothing to change", field="changes")
    if set(changes) <= FLAGS:
        return _flags_set(memory=child, changes=changes, actor=actor, reason=reason)
    if isinstance(child, Fact):
        if set(changes) - set(FACT_FIELDS):
            raise InvalidInput(f"a fact's {', '.join(FACT_FIELDS)} can change", field="changes")
        if child.status != MemoryStatus.ACTIVE:
            raise Conflict(edit_refused_message(child))
        value = (changes.get("value", child.value) or "").strip()
        return fact_write(
            data=FactInput(
                scope_id=child.scope_id,
                profile_name=child.profile.name,
                profile_kind=child.profile.kind,
                kind=child.kind,
                predicate=child.predicate,
                value=value,
                # Only a new value earns a new summary: resending the same one keeps the owner's.
                summary=changes.get("summary", child.summary if value == child.value else ""),
                confidence=changes.get("confidence", child.confidence),
                importance=changes.get("importance", child.importance),
                depends_on=changes.get("depends_on", child.depends_on),
                expires_at=changes.get("expires_at", child.expires_at),
                pinned=changes.get("pinned", child.pinned),
                secret=changes.get("secret", child.secret),
                source_turn_ids=list(child.evidence.values_list("turn_id", flat=True)),
                supersedes_id=child.pk,
            ),
            actor=actor,
            reason=reason or f"edit of fact #{child.pk}",
            request_id=request_id,
        )
    if isinstance(child, SelfConcept):
        if set(changes) != {"content"}:
            raise InvalidInput("a self-concept change carries only content", field="changes")
        if child.status != MemoryStatus.ACTIVE:
            raise Conflict(edit_refused_message(child))
        return self_concept_write(
            field=child.field,
            content=changes["content"],
            supersedes_id=child.pk,
            pinned=child.pinned,
            secret=child.secret,
            actor=actor,
            reason=reason,
            request_id=request_id,
        )
    return narrative_supersede(
        narrative=child, changes=changes, actor=actor, reason=reason, request_id=request_id
    )
