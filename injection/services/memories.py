"""Editing memories from the outside: an update is a supersede, never an overwrite."""

from dataclasses import replace

from memory.models import Fact, MemoryStatus, Narrative, SelfConcept
from memory.services.errors import Conflict, InvalidInput
from memory.services.facts import FactInput, fact_write
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


def narrative_supersede(
    *, narrative: Narrative, changes: dict, actor: str, reason: str = "", request_id: str = ""
) -> Narrative:
    """Write the edited narrative as a new row that supersedes the old one (narrative_write links
    both ways and audits it as one decision). An edit the gate rejects is stored as rejected and
    leaves the original active."""
    unknown = set(changes) - set(NARRATIVE_FIELDS)
    if unknown:
        raise InvalidInput(f"cannot change {sorted(unknown)} on a narrative", field="changes")
    if narrative.status != MemoryStatus.ACTIVE:
        raise Conflict(edit_refused_message(narrative))
    current = NarrativeInput(
        gesture=narrative.gesture,
        scope_id=narrative.scope_id,
        **{name: getattr(narrative, name) for name in NARRATIVE_FIELDS if name != "gesture"},
        confidence=narrative.confidence,
        depends_on=narrative.depends_on,
        pinned=narrative.pinned,
        secret=narrative.secret,
        source_turn_ids=list(narrative.evidence.values_list("turn_id", flat=True)),
    )
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
    if isinstance(child, Fact):
        if set(changes) - {"value", "summary", "confidence", "importance"}:
            raise InvalidInput("a fact's value, summary, confidence or importance can change")
        if child.status != MemoryStatus.ACTIVE:
            raise Conflict(edit_refused_message(child))
        return fact_write(
            data=FactInput(
                scope_id=child.scope_id,
                profile_name=child.profile.name,
                profile_kind=child.profile.kind,
                kind=child.kind,
                predicate=child.predicate,
                value=changes.get("value", child.value),
                summary=changes.get("summary", ""),
                confidence=changes.get("confidence", child.confidence),
                importance=changes.get("importance", child.importance),
                pinned=child.pinned,
                secret=child.secret,
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
            actor=actor,
            reason=reason,
            request_id=request_id,
        )
    return narrative_supersede(
        narrative=child, changes=changes, actor=actor, reason=reason, request_id=request_id
    )
