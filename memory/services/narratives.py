from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from memory.models import (
    Actor,
    AuditAction,
    MemoryStatus,
    Narrative,
    NarrativeLayer,
    NarrativeTag,
)
from memory.services.audit import audit_record
from memory.services.embedding import embedding_schedule
from memory.services.errors import InvalidInput
from memory.services.evidence import evidence_link, evidence_validate
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
    if len(data.summary) > 500:
        raise InvalidInput("summary is longer than 500 characters", field="summary")


def tags_normalise(tags: list[str]) -> list[str]:
    return list(dict.fromkeys(tag.strip().lower()[:100] for tag in tags if tag.strip()))


def _live_sharing(tags: list[str], *, exclude_id: int | None) -> "models.QuerySet[Narrative]":
    """Live narratives sharing at least one of `tags`."""
    return (
        Narrative.objects.filter(status__in=LIVE_STATUSES, tag_rows__tag__in=tags_normalise(tags))
        .exclude(pk=exclude_id)
        .distinct()
    )


def _recurrence_for(tags: list[str], *, exclude_id: int | None) -> int:
    if not tags_normalise(tags):
        return NO_TAGS_RECURRENCE
    return recurrence_band(_live_sharing(tags, exclude_id=exclude_id).count())


def narrative_recurrence(narrative: Narrative) -> int:
    return _recurrence_for(narrative.tags, exclude_id=narrative.pk)


def narrative_reweigh(narrative: Narrative) -> float:
    return weight_compute(
        importance=narrative.importance,
        emotional=narrative.emotional,
        recurrence=narrative.recurrence,
        unresolved=narrative.unresolved,
    )


def _reband_siblings(narrative: Narrative) -> dict[int, list[float]]:
    """Recompute recurrence and weight of every live narrative sharing a tag with `narrative`."""
    changed: dict[int, list[float]] = {}
    for sibling in _live_sharing(narrative.tags, exclude_id=narrative.pk):
        recurrence = narrative_recurrence(sibling)
        if recurrence == sibling.recurrence:
            continue
        sibling.recurrence = recurrence
        sibling.weight = narrative_reweigh(sibling) if sibling.weighted else sibling.weight
        Narrative.objects.filter(pk=sibling.pk).update(
            recurrence=recurrence, weight=sibling.weight, updated_at=timezone.now()
        )
        changed[sibling.pk] = [recurrence, sibling.weight]
    return changed


def narratives_normalise_inflation() -> dict[int, float]:
    """Anti-inflation: if the newest weighted narratives average above the ceiling, scale them so
    they average the target. Returns {narrative id: new weight} for what changed."""
    window = list(
        Narrative.objects.filter(status__in=LIVE_STATUSES, weighted=True)
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


def narrative_write(
    *, data: NarrativeInput, actor: str = Actor.AGENT, reason: str = "", request_id: str = ""
) -> Narrative:
    """Store one narrative: computed recurrence (siblings re-banded), the weight formula,
    anti-inflation, evidence links and one audit row, all in one transaction. The embedding is
    computed after commit."""
    narrative_validate(data)
    scope_validate(scope_id=data.scope_id)
    evidence_validate(turn_ids=data.source_turn_ids, scope_id=data.scope_id)
    tags = list(dict.fromkeys(tag.strip() for tag in data.tags))
    status = (
        MemoryStatus.CANDIDATE
        if data.confidence < settings.TIDELINE_CANDIDATE_CONFIDENCE
        else MemoryStatus.ACTIVE
    )
    with transaction.atomic():
        narrative = Narrative(
            scope_id=data.scope_id,
            status=status,
            confidence=data.confidence,
            importance=data.importance or 3,
            gesture=data.gesture.strip(),
            context=data.context,
            moment=data.moment,
            cognition_direction=data.cognition_direction,
            emotional=data.emotional or 3,
            unresolved=data.unresolved or 3,
            layer=data.layer,
            ntype=data.ntype,
            tags=tags,
            entities_role=data.entities_role,
            related_entities=data.related_entities,
            valence=data.valence,
            emotion_intensity=data.emotion_intensity,
            summary=(data.summary or data.gesture).strip()[:500],
            depends_on=data.depends_on,
            expires_at=data.expires_at,
            valid_from=data.valid_from or timezone.now(),
            pinned=data.pinned,
            secret=data.secret,
        )
        narrative.recurrence = _recurrence_for(tags, exclude_id=None)
        narrative.weight = narrative_reweigh(narrative)
        narrative.save()
        NarrativeTag.objects.bulk_create(
            [NarrativeTag(narrative=narrative, tag=tag) for tag in tags_normalise(tags)]
        )
        rebanded = _reband_siblings(narrative)
        normalised = narratives_normalise_inflation()
        evidence_link(memory=narrative, turn_ids=data.source_turn_ids)
        narrative.refresh_from_db(fields=["weight"])
        audit_record(
            actor=actor,
            action=AuditAction.INSERT,
            target=narrative,
            reason=reason or "narrative written",
            after={
                "status": narrative.status,
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
