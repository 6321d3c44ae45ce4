from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import models
from django.utils import timezone

from memory.models import (
    Actor,
    AuditAction,
    ExpiredBy,
    Memory,
    MemoryStatus,
    MemoryType,
    Narrative,
    NarrativeLayer,
    NarrativeTag,
    Scope,
)
from memory.services.audit import audit_record
from memory.services.bounds import text_storable
from memory.services.consolidation import (
    Decision,
    Embedded,
    Match,
    candidate_embed,
    confidence_combine,
    depends_on_validate,
    is_candidate,
    near_duplicate_find,
    rejection_audit,
    statuses,
)
from memory.services.embedding import embedding_schedule
from memory.services.errors import Conflict, InvalidInput
from memory.services.evidence import evidence_link, evidence_validate
from memory.services.gate import GateVerdict, gate_check
from memory.services.races import atomic_retrying
from memory.services.scopes import scope_validate
from memory.services.weights import (
    NO_TAGS_RECURRENCE,
    inflation_scale,
    recurrence_band,
    weight_compute,
)

LIVE_STATUSES = (MemoryStatus.ACTIVE, MemoryStatus.CANDIDATE)


@dataclass(frozen=True)
class NarrativeInput:
    gesture: str
    scope_id: int
    context: str = ""
    moment: str = ""
    cognition_direction: str = ""
    importance: int | None = None
    emotional: int | None = None
    unresolved: int | None = None
    layer: str = NarrativeLayer.EXPERIENCE
    ntype: str = "general"
    tags: list[str] = field(default_factory=list)
    entities_role: str = ""
    related_entities: list[str] = field(default_factory=list)
    valence: float = 0.0
    emotion_intensity: float = 0.0
    confidence: float = 1.0
    summary: str = ""
    depends_on: list[str] = field(default_factory=list)
    expires_at: datetime | None = None
    valid_from: datetime | None = None
    pinned: bool = False
    secret: bool = False
    source_turn_ids: list[int] = field(default_factory=list)
    # An edit: the new row replaces this active narrative (never merged into it).
    supersedes_id: int | None = None


def _check_dimension(name: str, value: int | None) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 5:
        raise InvalidInput(f"{name} must be an integer from 1 to 5, got {value!r}", field=name)


def narrative_validate(data: NarrativeInput) -> None:
    """Every check that can fail, before anything is written."""
    if not data.gesture or not data.gesture.strip():
        raise InvalidInput("gesture (what happened) must not be empty", field="gesture")
    if len(data.gesture) > 500:
        raise InvalidInput("gesture is longer than 500 characters", field="gesture")
    if len(data.cognition_direction) > 500:
        raise InvalidInput(
            "cognition_direction is longer than 500 characters", field="cognition_direction"
        )
    for name in ("importance", "emotional", "unresolved"):
        _check_dimension(name, getattr(data, name))
    if data.layer not in NarrativeLayer.values:
        raise InvalidInput(f"layer must be one of {NarrativeLayer.values}", field="layer")
    if not -1.0 <= data.valence <= 1.0:
        raise InvalidInput("valence must be between -1 and 1", field="valence")
    if not 0.0 <= data.emotion_intensity <= 10.0:
        raise InvalidInput("emotion_intensity must be between 0 and 10", field="emotion_intensity")
    if not 0.0 <= data.confidence <= 1.0:
        raise InvalidInput("confidence must be between 0 and 1", field="confidence")
    if not all(isinstance(tag, str) and tag.strip() for tag in data.tags):
        raise InvalidInput("tags must be non-empty strings", field="tags")
    if not all(isinstance(entity, str) for entity in data.related_entities):
        raise InvalidInput("related_entities must be strings", field="related_entities")
    if len(data.summary) > 500:
        raise InvalidInput("summary is longer than 500 characters", field="summary")


def tags_normalise(tags: list[str]) -> list[str]:
    return list(dict.fromkeys(tag.strip().lower()[:100] for tag in tags if tag.strip()))


def _live_sharing(
    tags: list[str], *, scope_id: int, exclude_id: int | None
) -> "models.QuerySet[Narrative]":
    """Live narratives of the same scope sharing at least one of `tags`: recurrence is counted
    per scope, so one project's habits never weigh another's memories."""
    return (
        Narrative.objects.filter(
            scope_id=scope_id, status__in=LIVE_STATUSES, tag_rows__tag__in=tags_normalise(tags)
        )
        .exclude(pk=exclude_id)
        .distinct()
    )


def _recurrence_for(tags: list[str], *, scope_id: int, exclude_id: int | None, secret: bool) -> int:
    """The recurrence band of a narrative with `tags`. One an agent may see counts only the
    sharers an agent may see: a secret on the same topic would otherwise move its weight, and so
    tell an agent that such a secret was written. A secret (the owner's alone) counts them all."""
    if not tags_normalise(tags):
        return NO_TAGS_RECURRENCE
    sharing = _live_sharing(tags, scope_id=scope_id, exclude_id=exclude_id)
    if not secret:
        sharing = sharing.filter(secret=False)
    return recurrence_band(sharing.count())


def narrative_recurrence(narrative: Narrative) -> int:
    return _recurrence_for(
        narrative.tags,
        scope_id=narrative.scope_id,
        exclude_id=narrative.pk,
        secret=narrative.secret,
    )


def narrative_reweigh(narrative: Narrative) -> float:
    return weight_compute(
        importance=narrative.importance,
        emotional=narrative.emotional,
        recurrence=narrative.recurrence,
        unresolved=narrative.unresolved,
    )


def narrative_reband(*, narrative: Narrative) -> tuple[dict[int, list[float]], dict[int, float]]:
    """Recompute the recurrence and weight of `narrative` and of every live narrative sharing a
    tag with it, then anti-inflation in its scope: what a change of its secret flag calls for.
    ({narrative id: [recurrence, weight]} re-banded, {narrative id: weight} normalised)."""
    siblings = _live_sharing(narrative.tags, scope_id=narrative.scope_id, exclude_id=narrative.pk)
    changed = _reband([narrative, *siblings])
    return changed, narratives_normalise_inflation(scope_id=narrative.scope_id)


def _reband_siblings(narrative: Narrative) -> dict[int, list[float]]:
    """Recompute recurrence and weight of every live narrative sharing a tag with `narrative`."""
    return _reband(
        _live_sharing(narrative.tags, scope_id=narrative.scope_id, exclude_id=narrative.pk)
    )


def _reband(narratives: Iterable[Narrative]) -> dict[int, list[float]]:
    """Store each narrative's recurrence and weight where its band moved; {id: [band, weight]}."""
    changed: dict[int, list[float]] = {}
    for narrative in narratives:
        recurrence = narrative_recurrence(narrative)
        if recurrence == narrative.recurrence:
            continue
        narrative.recurrence = recurrence
        narrative.weight = narrative_reweigh(narrative) if narrative.weighted else narrative.weight
        Narrative.objects.filter(pk=narrative.pk).update(
            recurrence=recurrence, weight=narrative.weight, updated_at=timezone.now()
        )
        changed[narrative.pk] = [recurrence, narrative.weight]
    return changed


def narratives_normalise_inflation(*, scope_id: int) -> dict[int, float]:
    """Anti-inflation within one scope: if its newest weighted narratives average above the
    ceiling, scale them so they average the target (one project's heavy day never scales down
    another's weights). Secrets neither count nor are scaled: a heavy secret would otherwise scale
    down the weights an agent sees. Returns {narrative id: new weight} for what changed."""
    # The memory_type filter lets the memory_scope_type_recent index give the order: without it
    # every write sorted the scope's narratives (1.5 s per captured utterance at 100k).
    window = list(
        Narrative.objects.filter(
            scope_id=scope_id,
            memory_type=MemoryType.NARRATIVE,
            status__in=LIVE_STATUSES,
            weighted=True,
            secret=False,
        )
        .order_by("-recorded_at", "-pk")
        .values_list("pk", "weight")[: settings.TIDELINE_WEIGHT_INFLATION_WINDOW]
    )
    factor = inflation_scale(
        [weight for _, weight in window],
        minimum=settings.TIDELINE_WEIGHT_INFLATION_MIN,
        ceiling=settings.TIDELINE_WEIGHT_INFLATION_CEILING,
        target=settings.TIDELINE_WEIGHT_INFLATION_TARGET,
    )
    if factor == 1.0:
        return {}
    changed = {}
    now = timezone.now()
    for pk, weight in window:
        new_weight = round(max(0.0, min(1.0, weight * factor)), 6)
        Narrative.objects.filter(pk=pk).update(weight=new_weight, updated_at=now)
        changed[pk] = new_weight
    return changed


@dataclass(frozen=True)
class PreparedNarrative:
    """A narrative checked, judged and embedded outside any transaction, ready for
    narrative_commit."""

    data: NarrativeInput
    scope: Scope
    tags: list[str]
    depends_on: list[str]
    verdict: GateVerdict
    embedded: Embedded | None


def _draft(data: NarrativeInput, *, tags: list[str]) -> Narrative:
    now = timezone.now()
    return Narrative(
        scope_id=data.scope_id,
        confidence=data.confidence,
        importance=data.importance or 3,
        gesture=text_storable(data.gesture.strip()),
        context=text_storable(data.context),
        moment=text_storable(data.moment),
        cognition_direction=text_storable(data.cognition_direction),
        emotional=data.emotional or 3,
        unresolved=data.unresolved or 3,
        layer=data.layer,
        ntype=data.ntype,
        tags=tags,
        entities_role=text_storable(data.entities_role),
        related_entities=data.related_entities,
        valence=data.valence,
        emotion_intensity=data.emotion_intensity,
        summary=text_storable((data.summary or data.gesture).strip())[:500],
        depends_on=data.depends_on,
        expires_at=data.expires_at,
        valid_from=data.valid_from or now,
        recorded_at=now,
        pinned=data.pinned,
        secret=data.secret,
    )


def narrative_prepare(
    *, data: NarrativeInput, use_llm: bool | None = None, writer_sees_secrets: bool = False
) -> PreparedNarrative:
    """Validate (bad input raises InvalidInput, nothing written), run the write gate on the
    gesture, and embed the candidate for near-duplicate search. May call the LLM judge and the
    embedder, so never call it inside a transaction."""
    narrative_validate(data)
    scope = scope_validate(scope_id=data.scope_id)
    evidence_validate(turn_ids=data.source_turn_ids, scope_id=data.scope_id)
    depends_on = depends_on_validate(
        data.depends_on,
        scope_id=data.scope_id,
        writer_sees_secrets=writer_sees_secrets,
        edited_id=data.supersedes_id,
    )
    if data.supersedes_id is not None:
        edited = Narrative.objects.filter(pk=data.supersedes_id, scope_id=scope.pk).first()
        if edited is None:
            raise InvalidInput(
                f"narrative {data.supersedes_id} is not an active narrative in this scope",
                field="supersedes_id",
            )
        if edited.status != MemoryStatus.ACTIVE:
            raise Conflict(edit_refused_message(edited))
    tags = list(dict.fromkeys(tag.strip() for tag in data.tags))
    if use_llm is None:
        use_llm = settings.TIDELINE_GATE_USE_LLM
    verdict = gate_check(
        text=data.gesture,
        # Everything stored is shown to an agent or an LLM somewhere (recall, the graph, DREAM).
        attached=[
            data.cognition_direction,
            data.context,
            data.moment,
            data.summary,
            data.ntype,
            data.entities_role,
            *tags,
            *data.related_entities,
        ],
        use_llm=use_llm and not data.secret,
    )
    embedded = None
    if verdict.passed:
        embedded = candidate_embed(text=_draft(data, tags=tags).compose_search_text())
    return PreparedNarrative(
        data=data,
        scope=scope,
        tags=tags,
        depends_on=depends_on,
        verdict=verdict,
        embedded=embedded,
    )


def edit_refused_message(memory: Memory) -> str:
    """Why an edit of `memory` cannot be written, naming its current state."""
    state = memory.status
    # The editor may not read a secret successor, so the message names only a plain one.
    if memory.superseded_by_id is not None and not memory.superseded_by.secret:
        state += f" by #{memory.superseded_by_id}; edit that version instead"
    elif memory.expired_by:
        state += f" ({memory.expired_by})"
    return f"memory #{memory.pk} is {state}; only the current version can be edited"


def _edit_target_locked(memory_id: int) -> Narrative:
    """The narrative being edited, locked for this transaction and re-checked: a concurrent edit
    that committed first has made it superseded, and this one is refused (Conflict), so an edit
    chain never forks."""
    target = Memory.objects.select_for_update().filter(pk=memory_id).first()
    if target is None or target.status != MemoryStatus.ACTIVE:
        raise Conflict(edit_refused_message(target) if target else f"memory #{memory_id} is gone")
    return Narrative.objects.get(pk=memory_id)


def _merge(*, match: Match, prepared: PreparedNarrative, actor: str, reason: str, request_id: str):
    """The stored near-duplicate absorbs the incoming evidence and confidence; the incoming text
    is kept in the audit row. A candidate whose support crosses the threshold is promoted."""
    data = prepared.data
    target = match.memory
    before = {"status": target.status, "confidence": target.confidence}
    target.confidence = confidence_combine(target.confidence, data.confidence)
    target.importance = max(target.importance, data.importance or 3)
    decision = Decision.MERGE
    if target.status == MemoryStatus.CANDIDATE and not is_candidate(target.confidence):
        target.status = MemoryStatus.ACTIVE
        decision = Decision.PROMOTE
    target.save(update_fields=["confidence", "importance", "status", "updated_at"])
    linked = evidence_link(memory=target, turn_ids=data.source_turn_ids)
    audit_record(
        actor=actor,
        action=AuditAction(decision.value),
        target=target,
        reason=reason
        or (
            f"near-duplicate ({match.how}, similarity {match.similarity:.3f}) of #{target.pk}"
            + (
                f"; promoted at confidence {target.confidence}"
                if decision == Decision.PROMOTE
                else ""
            )
        ),
        before=before,
        after={
            "status": target.status,
            "confidence": target.confidence,
            "statuses": statuses(target),
            "similarity": round(match.similarity, 6),
            "how": match.how,
            "incoming": {
                "gesture": data.gesture,
                "context": data.context,
                "moment": data.moment,
                "confidence": data.confidence,
            },
            "source_turn_ids": linked,
        },
        request_id=request_id,
    )
    if decision == Decision.PROMOTE:
        embedding_schedule(memory_ids=[target.pk])
    return target


def narrative_commit(
    *,
    prepared: PreparedNarrative,
    actor: str = Actor.AGENT,
    reason: str = "",
    request_id: str = "",
    writer_sees_secrets: bool = False,
) -> Narrative:
    """Run the consolidation state machine for one prepared narrative: reject (stored with its
    reason), merge / promote into a near-duplicate, or insert with computed recurrence (siblings
    re-banded), the weight formula, anti-inflation, evidence links and one audit row. The caller
    holds the transaction (narrative_write, or inbox_flush around a whole item)."""
    data, tags = prepared.data, prepared.tags
    # An edit replaces its original; it is never merged into some other memory instead. A write
    # merges only into a memory of its own secrecy that its writer may read: a plain write never
    # vanishes into a secret (nor answers with one), a secret write never hides a plain memory,
    # and a writer who may not read secrets is never told that one like its own is stored.
    comparable = not data.secret or writer_sees_secrets
    if prepared.verdict.passed and data.supersedes_id is None and comparable:
        match = near_duplicate_find(
            memory_type=MemoryType.NARRATIVE,
            scope_id=prepared.scope.pk,
            text=prepared.embedded.text if prepared.embedded else data.gesture,
            embedded=prepared.embedded,
            secret=data.secret,
        )
        if match is not None:
            return _merge(
                match=match, prepared=prepared, actor=actor, reason=reason, request_id=request_id
            )
    narrative = _draft(data, tags=tags)
    narrative.depends_on = prepared.depends_on
    if not prepared.verdict.passed:
        narrative.status = MemoryStatus.REJECTED
    elif is_candidate(data.confidence):
        narrative.status = MemoryStatus.CANDIDATE
    else:
        narrative.status = MemoryStatus.ACTIVE
    live = narrative.status != MemoryStatus.REJECTED
    # The edited row is still live here, but it is this narrative's earlier telling, not a sibling.
    narrative.recurrence = (
        _recurrence_for(
            tags,
            scope_id=narrative.scope_id,
            exclude_id=data.supersedes_id,
            secret=narrative.secret,
        )
        if live
        else NO_TAGS_RECURRENCE
    )
    narrative.weight = narrative_reweigh(narrative)
    old = None
    if data.supersedes_id is not None and live:
        old = _edit_target_locked(data.supersedes_id)
        narrative.supersedes = old
    narrative.save()
    NarrativeTag.objects.bulk_create(
        [NarrativeTag(narrative=narrative, tag=tag) for tag in tags_normalise(tags)]
    )
    linked = evidence_link(memory=narrative, turn_ids=data.source_turn_ids)
    if not live:
        # A refused edit supersedes nothing, so only its audit row says which version it edits:
        # restoring it must not make a second current version of that narrative.
        edit = {} if data.supersedes_id is None else {"edit_of": data.supersedes_id}
        rejection_audit(
            memory=narrative,
            verdict=prepared.verdict,
            actor=actor,
            reason=reason,
            request_id=request_id,
            extra={"source_turn_ids": linked, **edit},
        )
        return narrative
    touched = [narrative]
    if old is not None:
        old.status = MemoryStatus.SUPERSEDED
        old.expired_by = ExpiredBy.SUPERSEDED
        # Held until the new telling was recorded, not until the event it tells (whose valid_from
        # an edit keeps): history as of any moment before the edit still finds the old telling.
        # A telling dated ahead of the edit ends where it began, never before.
        old.valid_to = max(narrative.recorded_at, old.valid_from)
        old.superseded_by = narrative
        old.save(update_fields=["status", "expired_by", "valid_to", "superseded_by", "updated_at"])
        touched.append(old)
    rebanded = _reband_siblings(narrative)
    normalised = narratives_normalise_inflation(scope_id=narrative.scope_id)
    narrative.refresh_from_db(fields=["weight"])
    audit_record(
        actor=actor,
        action=AuditAction.INVALIDATE if old is not None else AuditAction.INSERT,
        target=narrative,
        reason=reason
        or (f"edit of narrative #{old.pk}" if old is not None else "narrative written")
        + ("" if narrative.status == MemoryStatus.ACTIVE else " (candidate: low confidence)"),
        after={
            "status": narrative.status,
            "statuses": statuses(*touched),
            "supersedes": old.pk if old is not None else None,
            "weight": narrative.weight,
            "recurrence": narrative.recurrence,
            "rebanded": rebanded,
            "normalised": normalised,
            "source_turn_ids": data.source_turn_ids,
        },
        request_id=request_id,
    )
    embedding_schedule(memory_ids=[narrative.pk])
    return narrative


def narrative_write(
    *,
    data: NarrativeInput,
    actor: str = Actor.AGENT,
    reason: str = "",
    request_id: str = "",
    writer_sees_secrets: bool = False,
) -> Narrative:
    """Store one narrative through the write gate and the consolidation state machine (see
    narrative_commit). Gate and embedding run before the transaction opens; everything that
    writes runs inside one."""
    prepared = narrative_prepare(data=data, writer_sees_secrets=writer_sees_secrets)
    return atomic_retrying(
        lambda: narrative_commit(
            prepared=prepared,
            actor=actor,
            reason=reason,
            request_id=request_id,
            writer_sees_secrets=writer_sees_secrets,
        ),
        model=Memory,
        constraints=("memory_one_live_successor",),
        lost=f"narrative #{data.supersedes_id} was edited concurrently; edit the current version",
    )
