"""Tideline's narrative weights (DESIGN §3.4): pure arithmetic, shared by the write path and DREAM."""

from collections.abc import Sequence

from django.conf import settings
from django.db.models import F, Value
from django.db.models.expressions import CombinedExpression

DEFAULT_DIMENSION = 3
NO_TAGS_RECURRENCE = 3
WEIGHT_FACTORS = {"importance": 0.35, "emotional": 0.25, "recurrence": 0.25, "unresolved": 0.15}


def recurrence_band(shared_count: int) -> int:
    """How many other narratives share a tag → 1..5 (0→1, 1–2→2, 3–5→3, 6–10→4, ≥11→5)."""
    if shared_count <= 0:
        return 1
    if shared_count <= 2:
        return 2
    if shared_count <= 5:
        return 3
    if shared_count <= 10:
        return 4
    return 5


def weight_compute(
    *,
    importance: int | None,
    emotional: int | None,
    recurrence: int | None,
    unresolved: int | None,
) -> float:
    """(importance×0.35 + emotional×0.25 + recurrence×0.25 + unresolved×0.15) / 5, a missing
    dimension counting as 3."""
    values = {
        "importance": importance,
        "emotional": emotional,
        "recurrence": recurrence,
        "unresolved": unresolved,
    }
    total = sum(
        WEIGHT_FACTORS[name] * (DEFAULT_DIMENSION if value is None else value)
        for name, value in values.items()
    )
    return round(total / 5, 6)


def salience(*, weight: float, emotion_intensity: float) -> float:
    """A narrative's weight raised by how strongly it was felt (seed 004): what T2 orders by and
    search's lifecycle prior uses. Emotion intensity is 0–10."""
    return weight + settings.TIDELINE_EMOTION_SALIENCE * emotion_intensity / 10


def salience_sql() -> CombinedExpression:
    """salience() as a database expression over a Narrative's columns, to order by."""
    return F("weight") + Value(settings.TIDELINE_EMOTION_SALIENCE / 10) * F("emotion_intensity")


def decay_limit_days(*, base_days: int, emotion_intensity: float) -> float:
    """Days without activation before decay, lengthened by emotion intensity (seed 004's LUFY:
    forgetting weighted by arousal)."""
    return base_days * (1 + settings.TIDELINE_EMOTION_DECAY_FACTOR * emotion_intensity / 10)


def inflation_scale(
    weights: Sequence[float], *, minimum: int, ceiling: float, target: float
) -> float:
    """The factor that brings an inflated window of recent weights back to `target` on average,
    or 1.0 when the window is too small or not inflated."""
    if len(weights) < minimum:
        return 1.0
    average = sum(weights) / len(weights)
    if average <= ceiling:
        return 1.0
    return target / average
