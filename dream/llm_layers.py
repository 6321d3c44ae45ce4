"""DREAM's LLM layers: solidify, combing, night drift and the symbolic dream.

Each layer gathers its material (never a secret memory), asks the one configured OpenAI-compatible
client for a JSON answer with our own prompt from `dream/prompts/`, validates the whole answer
(schema, ranges, ids that were in the material), and only then writes through the normal write
services, one transaction and one audit row each, as actor `llm`. An answer that fails validation
writes nothing; an item a write service still refuses (the write gate) is rejected on its own and
the rest goes on; a missing or failing LLM raises `LLMUnavailable` to the caller. LLM text is
stored without control characters, and a rejection quotes only a bounded piece of the answer. No
database transaction is open while the LLM thinks.
"""

import json
import reprlib
import unicodedata
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import cache, partial
from pathlib import Path
from typing import TypeVar

import numpy as np
from django.conf import settings
from django.db import transaction

from dream.lease import lease_heartbeat
from dream.models import (
    DreamRun,
    EmbeddingCluster,
    EmbeddingClusterAdjacency,
    EmbeddingClusterMember,
    TopicClusterMember,
)
from dream.scanner import Chunk, turns_cited
from dream.script_layer import entities_role_parse
from dream.selectors import attention_heatmap_read
from memory.models import (
    Actor,
    AuditAction,
    ContextTurn,
    EmbeddingStatus,
    Fact,
    FactKind,
    MemoryStatus,
    Narrative,
    NarrativeLayer,
    ProfileKind,
    Scope,
    ScopeKind,
    SelfConcept,
    SelfConceptField,
    Thread,
    ThreadStatus,
)
from memory.models.memories import FACT_VALUE_MAX_CHARS
from memory.services.audit import audit_record
from memory.services.embedding import vector_from_bytes
from memory.services.errors import InvalidInput, NotFound, TidelineError
from memory.services.facts import FactInput, fact_write
from memory.services.llm import (
    LLMConfig,
    LLMReply,
    LLMUnavailable,
    llm_call_seconds_max,
    llm_complete_json,
)
from memory.services.narratives import (
    NarrativeInput,
    narrative_commit,
    narrative_prepare,
    narrative_reweigh,
    narrative_write,
)
from memory.services.scopes import scope_visible_ids
from memory.services.self_concept import self_concept_write
from memory.services.threads import thread_set_status, thread_write

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
DREAM_TAG = "dream"
# A dream is recorded when it is made, which is not the day it is about (the nightly run dreams
# the day before; `--day` any past day): it carries its DREAM day in this tag, the key of its
# scope's one dream a day.
DREAM_DAY_TAG = "dream-day:"
TENSION_TAG = "tension"

# What a rejection quotes of the LLM's answer: enough to recognise the value, never all of it. The
# message is kept in DreamRun.stats and shown in the owner panel, and one answer can carry
# megabytes; reprlib also escapes control characters and stops at nesting depth.
_QUOTE = reprlib.Repr()
_QUOTE.maxstring = _QUOTE.maxother = 60
_QUOTE.maxlong = 40
_QUOTE.maxlist = _QUOTE.maxtuple = _QUOTE.maxset = _QUOTE.maxdict = 10
_QUOTE.maxlevel = 2
# Line breaks and tabs lay LLM text out; every other control character (ESC, BEL, CR, the C1
# block) would be obeyed by the owner's terminal when DREAM prints the text (retitle the window,
# clear the screen), and a lone surrogate cannot be stored, so they are dropped.
_LAYOUT = frozenset("\n\t")
_DROPPED_CATEGORIES = frozenset({"Cc", "Cs"})
_Written = TypeVar("_Written")


class AnswerInvalid(Exception):
    """The LLM answered JSON that fails validation; nothing from it is written."""


@dataclass
class LayerOutcome:
    """What one layer did, for the DreamRun's stats."""

    status: str = "ok"
    tokens: int = 0
    written: dict[str, list[int]] = field(default_factory=dict)
    rejected: list[str] = field(default_factory=list)
    detail: dict = field(default_factory=dict)

    def wrote(self, kind: str, pk: int) -> None:
        self.written.setdefault(kind, []).append(pk)

    def as_stats(self) -> dict:
        return {
            "status": self.status,
            "tokens": self.tokens,
            "written": self.written,
            "rejected": self.rejected,
            **self.detail,
        }


@cache
def prompt_load(name: str) -> str:
    return (PROMPTS_DIR / f"{name}.md").read_text(encoding="utf-8")


def _ask(name: str, material: dict, *, config: LLMConfig, outcome: LayerOutcome) -> dict:
    # The run is silent while the LLM thinks: keep its lease for that long.
    lease_heartbeat(quiet_seconds=llm_call_seconds_max())
    reply: LLMReply = llm_complete_json(
        system=prompt_load(name),
        user=json.dumps(material, ensure_ascii=False, default=str),
        config=config,
    )
    outcome.tokens += reply.total_tokens
    return reply.data


def _kept_as(memory, kind: str) -> str:
    """Where a written memory is counted: the write gate keeps what it refuses, as rejected."""
    return "gate_rejected" if memory.status == MemoryStatus.REJECTED else kind


def _proposed(
    outcome: LayerOutcome, *, what: str, write: Callable[[], _Written]
) -> _Written | None:
    """Write one item the LLM proposed. The write services may still refuse it (the write gate,
    a limit, a thread closed meanwhile): that item is recorded as rejected and the layer goes on
    with the rest, as with any other answer it cannot use."""
    try:
        return write()
    except TidelineError as exc:
        outcome.rejected.append(f"{what}: {exc}")
        return None


# --- validation -------------------------------------------------------------------------------


def _quoted(value: object) -> str:
    return _QUOTE.repr(value)


def _printable(text: str, *, layout: bool) -> str:
    if text.isprintable():
        return text  # the common case, at C speed
    return "".join(
        char
        for char in text
        if (layout and char in _LAYOUT) or unicodedata.category(char) not in _DROPPED_CATEGORIES
    )


def _list(data: dict, key: str, *, maximum: int) -> list:
    value = data.get(key, [])
    if value is None:
        return []
    if not isinstance(value, list):
        raise AnswerInvalid(f"{key} must be a list")
    if len(value) > maximum:
        raise AnswerInvalid(f"{key} has {len(value)} items; at most {maximum}")
    for item in value:
        if not isinstance(item, dict):
            raise AnswerInvalid(f"every item of {key} must be an object")
    return value


def _text(item: dict, key: str, *, maximum: int, required: bool = False) -> str:
    value = item.get(key, "")
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise AnswerInvalid(f"{key} must be a string")
    value = _printable(value, layout=True).strip()
    if required and not value:
        raise AnswerInvalid(f"{key} must not be empty")
    if len(value) > maximum:
        raise AnswerInvalid(f"{key} is longer than {maximum} characters")
    return value


def _dimension(item: dict, key: str, *, default: int | None = None) -> int:
    value = item.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 5:
        raise AnswerInvalid(f"{key} must be an integer from 1 to 5, got {_quoted(value)}")
    return value


def _number(item: dict, key: str, *, low: float, high: float, default: float) -> float:
    value = item.get(key, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or not low <= value <= high:
        raise AnswerInvalid(f"{key} must be a number from {low} to {high}, got {_quoted(value)}")
    return float(value)


def _ids(item: dict, key: str, *, allowed: set[int], required: bool) -> list[int]:
    value = item.get(key, [])
    if not isinstance(value, list) or not all(
        isinstance(pk, int) and not isinstance(pk, bool) for pk in value
    ):
        raise AnswerInvalid(f"{key} must be a list of integer ids")
    if required and not value:
        raise AnswerInvalid(f"{key} must name at least one id")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise AnswerInvalid(
            f"{key} names {len(unknown)} id(s) that were not in the material: {_quoted(unknown)}"
        )
    return list(dict.fromkeys(value))


def _one_id(item: dict, key: str, *, allowed: set[int], required: bool = True) -> int | None:
    value = item.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value not in allowed:
        raise AnswerInvalid(f"{key}={_quoted(value)} is not an id from the material")
    return value


def _strings(item: dict, key: str, *, maximum: int, each: int) -> list[str]:
    value = item.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AnswerInvalid(f"{key} must be a list of non-empty strings")
    if len(value) > maximum:
        raise AnswerInvalid(f"{key} has more than {maximum} items")
    # Names and tags are one line each: no control character is kept, not even a line break.
    value = [_printable(v, layout=False).strip() for v in value]
    if not all(value):
        raise AnswerInvalid(f"{key} must be a list of non-empty strings")
    if any(len(v) > each for v in value):
        raise AnswerInvalid(f"an item of {key} is longer than {each} characters")
    return list(dict.fromkeys(value))


def entities_role_normalise(text: str) -> str:
    """Re-serialise `entities_role` in the canonical "A=判断+执行; B=审查" form; reject anything that
    names no entity or a role without an entity."""
    if not text:
        return ""
    parsed = entities_role_parse(text)
    if not parsed:
        raise AnswerInvalid("entities_role names no entity")
    if any(not name or "=" in name for name, _ in parsed):
        raise AnswerInvalid("entities_role must look like 'Name=role+role; Other=role'")
    canonical = "; ".join(f"{name}={'+'.join(roles)}" if roles else name for name, roles in parsed)
    if len(canonical) > 300:
        raise AnswerInvalid("entities_role is longer than 300 characters")
    return canonical


# --- material ---------------------------------------------------------------------------------


def _day_narratives(day: date, *, after: datetime | None = None):
    """Today's memories that an LLM may read: active, not secret, not themselves dreams; only
    those recorded from `after` on, when a run while the day was still going read the rest."""
    narratives = Narrative.objects.filter(
        status=MemoryStatus.ACTIVE, secret=False, recorded_at__date=day
    ).exclude(ntype=DREAM_TAG)
    if after is not None:
        narratives = narratives.filter(recorded_at__gte=after)
    return narratives.order_by("-weight", "pk")


def _narrative_material(narrative: Narrative, *, context_chars: int = 300) -> dict:
    return {
        "id": narrative.pk,
        "scope_id": narrative.scope_id,
        "gesture": narrative.gesture,
        "context": narrative.context[:context_chars],
        "cognition_direction": narrative.cognition_direction,
        "importance": narrative.importance,
        "emotional": narrative.emotional,
        "recurrence": narrative.recurrence,
        "unresolved": narrative.unresolved,
        "weight": round(narrative.weight, 3),
        "tags": narrative.tags,
        "entities_role": narrative.entities_role,
        "recorded_at": narrative.recorded_at.isoformat(),
    }


def _vectors(ids: list[int]) -> dict[int, np.ndarray]:
    rows = Narrative.objects.filter(pk__in=ids, embedding_status=EmbeddingStatus.READY).values_list(
        "pk", "embedding"
    )
    return {pk: vector_from_bytes(bytes(blob)) for pk, blob in rows if blob}


def _nearest(
    seed: np.ndarray, candidates: dict[int, np.ndarray], *, count: int, farthest: bool = False
) -> list[int]:
    same = [pk for pk, vector in candidates.items() if vector.shape == seed.shape]
    if not same:
        return []
    matrix = np.vstack([candidates[pk] for pk in same])
    scores = matrix @ seed
    order = np.argsort(scores if farthest else -scores, kind="stable")[:count]
    return [same[i] for i in order]


# --- solidify ---------------------------------------------------------------------------------


def _chunk_material(chunk: Chunk) -> dict:
    turns = list(ContextTurn.objects.filter(pk__in=chunk.turn_ids).order_by("occurred_at", "seq"))
    per_turn = max(200, settings.TIDELINE_DREAM_CHUNK_MAX_CHARS // max(1, len(turns)))
    return {
        "scope_id": chunk.scope_id,
        "session_id": chunk.session_id,
        "turns": [
            {
                "id": turn.pk,
                "at": turn.occurred_at.isoformat(),
                "role": turn.role,
                "speaker": turn.speaker,
                "content": turn.content[:per_turn],
            }
            for turn in turns
        ],
    }


def solidify_validate(data: dict, *, turn_ids: set[int], scope_id: int) -> list[NarrativeInput]:
    inputs = []
    for item in _list(data, "narratives", maximum=3):
        layer = item.get("layer") or NarrativeLayer.EXPERIENCE
        if layer not in NarrativeLayer.values:
            raise AnswerInvalid(f"layer must be one of {NarrativeLayer.values}")
        inputs.append(
            NarrativeInput(
                scope_id=scope_id,
                gesture=_text(item, "gesture", maximum=500, required=True),
                context=_text(item, "context", maximum=4000),
                moment=_text(item, "moment", maximum=2000),
                cognition_direction=_text(item, "cognition_direction", maximum=500),
                importance=_dimension(item, "importance"),
                emotional=_dimension(item, "emotional"),
                unresolved=_dimension(item, "unresolved"),
                layer=layer,
                tags=_strings(item, "tags", maximum=8, each=40),
                entities_role=entities_role_normalise(_text(item, "entities_role", maximum=300)),
                related_entities=_strings(item, "related_entities", maximum=12, each=120),
                valence=_number(item, "valence", low=-1, high=1, default=0.0),
                emotion_intensity=_number(item, "emotion_intensity", low=0, high=10, default=0.0),
                source_turn_ids=_ids(item, "source_turn_ids", allowed=turn_ids, required=True),
            )
        )
    return inputs


def solidify_layer(*, chunks: list[Chunk], day: date, config: LLMConfig) -> LayerOutcome:
    """0–3 narratives per unindexed chunk, each citing the turns it came from."""
    outcome = LayerOutcome()
    limited = chunks[: settings.TIDELINE_DREAM_MAX_CHUNKS]
    outcome.detail = {"chunks": len(chunks), "asked": 0}
    for chunk in limited:
        # A chunk some other memory has started citing since the scan is left alone.
        still_unindexed = (
            not ContextTurn.objects.filter(pk__in=chunk.turn_ids)
            .filter(pk__in=turns_cited())
            .exists()
        )
        if not still_unindexed:
            continue
        outcome.detail["asked"] += 1
        try:
            data = _ask("solidify", _chunk_material(chunk), config=config, outcome=outcome)
        except LLMUnavailable as exc:
            # The chunks not yet asked stay unindexed and are offered again on the next run.
            outcome.rejected.append(f"chunk of session {chunk.session_id}: {exc}")
            break
        try:
            inputs = solidify_validate(data, turn_ids=set(chunk.turn_ids), scope_id=chunk.scope_id)
        except AnswerInvalid as exc:
            outcome.rejected.append(f"chunk of session {chunk.session_id}: {exc}")
            continue
        for data_in in inputs:
            narrative = _proposed(
                outcome,
                what=f"chunk of session {chunk.session_id}: narrative",
                write=partial(
                    narrative_write,
                    data=data_in,
                    actor=Actor.LLM,
                    reason=f"DREAM solidify {day}: from {len(data_in.source_turn_ids)} turn(s) "
                    f"of session {chunk.session_id}",
                ),
            )
            if narrative is None:
                continue
            # The write gate may still refuse it; it is then kept as rejected, with its reason.
            outcome.wrote(_kept_as(narrative, "narratives"), narrative.pk)
    if outcome.rejected:
        outcome.status = "failed" if not outcome.written else "partial"
    return outcome


# --- combing ----------------------------------------------------------------------------------


def narrative_rescore(
    *,
    narrative_id: int,
    importance: int,
    emotional: int,
    unresolved: int,
    actor: str = Actor.LLM,
    reason: str,
) -> Narrative:
    """New importance/emotional/unresolved for one narrative and the weight that follows (one
    transaction, one audit row). A dream keeps its importance of 1."""
    for name, value in (
        ("importance", importance),
        ("emotional", emotional),
        ("unresolved", unresolved),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 5:
            raise InvalidInput(f"{name} must be an integer from 1 to 5", field=name)
    with transaction.atomic():
        narrative = Narrative.objects.select_for_update().filter(pk=narrative_id).first()
        if narrative is None:
            raise NotFound(f"unknown narrative {narrative_id}")
        before = {
            "importance": narrative.importance,
            "emotional": narrative.emotional,
            "unresolved": narrative.unresolved,
            "weight": narrative.weight,
        }
        narrative.importance = 1 if narrative.ntype == DREAM_TAG else importance
        narrative.emotional = emotional
        narrative.unresolved = unresolved
        if narrative.weighted:
            narrative.weight = narrative_reweigh(narrative)
        narrative.save(update_fields=["importance", "emotional", "unresolved", "weight"])
        audit_record(
            actor=actor,
            action=AuditAction.UPDATE,
            target=narrative,
            reason=reason,
            before=before,
            after={
                "importance": narrative.importance,
                "emotional": narrative.emotional,
                "unresolved": narrative.unresolved,
                "weight": narrative.weight,
            },
        )
    return narrative


def _scopes_with_material(day: date, *, after: datetime | None = None) -> list[Scope]:
    """The scopes with memories today that an LLM may read, busiest first: each gets its own
    prompt, so no prompt carries two scopes' days."""
    counts: dict[int, int] = defaultdict(int)
    for scope_id in _day_narratives(day, after=after).values_list("scope_id", flat=True):
        counts[scope_id] += 1
    order = sorted(counts, key=lambda scope_id: (-counts[scope_id], scope_id))
    scopes = Scope.objects.in_bulk(order)
    return [scopes[scope_id] for scope_id in order]


def _combing_material(
    day: date, *, scope: Scope, after: datetime | None = None
) -> tuple[dict, dict]:
    """One scope's day and what that scope may see (itself, its workspace, global): the material
    a DREAM run for that scope reads, never a secret and never another project's memory."""
    today = list(
        _day_narratives(day, after=after).filter(scope_id=scope.pk)[
            : settings.TIDELINE_DREAM_COMBING_MAX_MEMORIES
        ]
    )
    today_ids = [n.pk for n in today]
    visible = set(scope_visible_ids(scope=scope))
    earlier_pool = Narrative.objects.filter(
        status=MemoryStatus.ACTIVE,
        secret=False,
        scope_id__in=visible,
        recorded_at__date__lt=day,
    ).exclude(ntype=DREAM_TAG)
    pool_vectors = _vectors(
        list(earlier_pool.order_by("-weight").values_list("pk", flat=True)[:2000])
    )
    today_vectors = _vectors(today_ids)
    earlier_ids: list[int] = []
    for narrative in today:
        seed = today_vectors.get(narrative.pk)
        if seed is None:
            continue
        for pk in _nearest(seed, pool_vectors, count=2):
            if pk not in earlier_ids:
                earlier_ids.append(pk)
    earlier = list(Narrative.objects.filter(pk__in=earlier_ids[:40]))
    facts = list(
        Fact.objects.filter(status=MemoryStatus.ACTIVE, secret=False, scope_id__in=visible)
        .select_related("profile")
        .order_by("-recorded_at")[:60]
    )
    self_concept = list(
        SelfConcept.objects.filter(status=MemoryStatus.ACTIVE, secret=False).order_by("field")
    )
    # Only this scope's threads can be aged by this scope's day.
    threads = list(
        Thread.objects.filter(status=ThreadStatus.OPEN, scope_id=scope.pk).order_by(
            "-weight", "pk"
        )[:20]
    )
    heatmap = attention_heatmap_read(days=30, scope_ids=sorted(visible))
    self_concept_writable = scope.kind == ScopeKind.GLOBAL
    material = {
        "day": day.isoformat(),
        "scope": {
            "id": scope.pk,
            "kind": scope.kind,
            "label": scope.label,
            "self_concept_writable": self_concept_writable,
        },
        "today": [_narrative_material(n) for n in today],
        "earlier": [_narrative_material(n, context_chars=150) for n in earlier],
        "facts": [
            {
                "id": fact.pk,
                "scope_id": fact.scope_id,
                "profile": fact.profile.name,
                "kind": fact.kind,
                "predicate": fact.predicate,
                "value": fact.value,
            }
            for fact in facts
        ],
        "self_concept": [{"field": sc.field, "content": sc.content} for sc in self_concept],
        "open_threads": [
            {"id": t.pk, "content": t.content, "weight": round(t.weight, 3)} for t in threads
        ],
        "attention": {
            "lit_clusters": [
                {"name": row["name"], "recalls": row["heat"]}
                for row in sorted(heatmap["clusters"], key=lambda r: -r["heat"])
                if row["heat"]
            ][:5],
            "desert_clusters": [row["name"] for row in heatmap["clusters"] if row["heat"] == 0][:5],
        },
    }
    context = {
        "scope": scope,
        "today": {n.pk: n for n in today},
        "earlier": {n.pk: n for n in earlier},
        "facts": {f.pk: f for f in facts},
        "threads": {t.pk: t for t in threads},
        "visible_of": {scope.pk: visible},
        "scopes": {scope.pk},
        "self_concept_writable": self_concept_writable,
    }
    return material, context


def combing_validate(data: dict, *, scope: dict) -> dict:
    today, earlier, facts = scope["today"], scope["earlier"], scope["facts"]
    plan: dict[str, list] = {}
    plan["rescore"] = [
        {
            "id": _one_id(item, "id", allowed=set(today)),
            "importance": _dimension(item, "importance"),
            "emotional": _dimension(item, "emotional"),
            "unresolved": _dimension(item, "unresolved"),
            "why": _text(item, "why", maximum=300),
        }
        for item in _list(data, "rescore", maximum=len(today))
    ]
    plan["facts"] = []
    for item in _list(data, "facts", maximum=10):
        sources = _ids(item, "source_ids", allowed=set(today), required=True)
        source_scopes = {today[pk].scope_id for pk in sources}
        if len(source_scopes) != 1:
            raise AnswerInvalid("a fact's source_ids must all come from one scope")
        kind = item.get("kind")
        if kind not in FactKind.values:
            raise AnswerInvalid(f"fact kind must be one of {FactKind.values}")
        profile_kind = item.get("profile_kind") or ProfileKind.USER
        if profile_kind not in ProfileKind.values:
            raise AnswerInvalid(f"profile_kind must be one of {ProfileKind.values}")
        plan["facts"].append(
            FactInput(
                scope_id=source_scopes.pop(),
                profile_name=_text(item, "profile", maximum=120, required=True),
                profile_kind=profile_kind,
                kind=kind,
                predicate=_text(item, "predicate", maximum=41, required=True),
                value=_text(item, "value", maximum=FACT_VALUE_MAX_CHARS, required=True),
                confidence=0.8,
            )
        )
    plan["self_concept"] = []
    for item in _list(data, "self_concept", maximum=3):
        if item.get("field") not in SelfConceptField.values:
            raise AnswerInvalid(f"self_concept field must be one of {SelfConceptField.values}")
        plan["self_concept"].append(
            {"field": item["field"], "content": _text(item, "content", maximum=4000, required=True)}
        )
    plan["conflicts"] = []
    for item in _list(data, "conflicts", maximum=10):
        new_id = _one_id(item, "id", allowed=set(today))
        earlier_id = _one_id(item, "earlier_id", allowed=set(earlier) | set(facts))
        older = earlier.get(earlier_id) or facts.get(earlier_id)
        if older.scope_id not in scope["visible_of"][today[new_id].scope_id]:
            raise AnswerInvalid(f"memory {earlier_id} is not visible from memory {new_id}")
        plan["conflicts"].append(
            {
                "id": new_id,
                "earlier_id": earlier_id,
                "tension": _text(item, "tension", maximum=1000, required=True),
            }
        )
    plan["threads"] = []
    for item in _list(data, "threads", maximum=5):
        plan["threads"].append(
            {
                "content": _text(item, "content", maximum=1000, required=True),
                "importance": _dimension(item, "importance", default=3),
                "emotional": _dimension(item, "emotional", default=3),
                "recurrence": _dimension(item, "recurrence", default=3),
                "unresolved": _dimension(item, "unresolved", default=3),
                "source_id": _one_id(item, "source_id", allowed=set(today), required=False),
            }
        )
    plan["thread_updates"] = []
    for item in _list(data, "thread_updates", maximum=20):
        status = item.get("status")
        if status not in (ThreadStatus.EXPLORED, ThreadStatus.ABANDONED):
            raise AnswerInvalid("thread status must be explored or abandoned")
        plan["thread_updates"].append(
            {
                "id": _one_id(item, "id", allowed=set(scope["threads"])),
                "status": status,
                "why": _text(item, "why", maximum=300),
            }
        )
    return plan


def _thread_exists(*, scope_id: int, content: str) -> bool:
    return Thread.objects.filter(scope_id=scope_id, content=content).exists()


def combing_layer(*, day: date, config: LLMConfig, after: datetime | None = None) -> LayerOutcome:
    """One combing prompt per scope with memories today (recorded from `after` on, if given);
    what it writes stays in that scope."""
    outcome = LayerOutcome()
    scopes = _scopes_with_material(day, after=after)
    outcome.detail = {"scopes": {}}
    if not scopes:
        outcome.status = "skipped"
        outcome.detail["reason"] = f"no new memories on {day}"
        return outcome
    _per_scope(
        scopes, outcome=outcome, run=partial(_combing_scope, day=day, config=config, after=after)
    )
    return outcome


def _combing_scope(
    *,
    day: date,
    scope: Scope,
    config: LLMConfig,
    outcome: LayerOutcome,
    after: datetime | None = None,
) -> dict:
    material, context = _combing_material(day, scope=scope, after=after)
    report: dict = {"status": "ok", "today": len(material["today"])}
    report["earlier"] = len(material["earlier"])
    data = _ask("combing", material, config=config, outcome=outcome)
    try:
        plan = combing_validate(data, scope=context)
    except AnswerInvalid as exc:
        outcome.rejected.append(f"scope {scope.pk}: {exc}")
        return report | {"status": "failed", "reason": str(exc)}
    reason = f"DREAM combing {day} · {scope.label}"
    for item in plan["rescore"]:
        narrative = context["today"][item["id"]]
        if (narrative.importance, narrative.emotional, narrative.unresolved) == (
            item["importance"],
            item["emotional"],
            item["unresolved"],
        ):
            continue
        narrative_rescore(
            narrative_id=item["id"],
            importance=item["importance"],
            emotional=item["emotional"],
            unresolved=item["unresolved"],
            reason=f"{reason}: re-scored" + (f" ({item['why']})" if item["why"] else ""),
        )
        outcome.wrote("rescored", item["id"])
    where = f"scope {scope.pk}"
    for fact_input in plan["facts"]:
        # The outcome goes to the owner, never back to the LLM, so a value it restates is
        # compared with a secret current one too and leaves it secret.
        fact = _proposed(
            outcome,
            what=f"{where}: fact {fact_input.predicate}",
            write=partial(
                fact_write,
                data=fact_input,
                actor=Actor.LLM,
                reason=f"{reason}: profile fact",
                writer_sees_secrets=True,
            ),
        )
        if fact is not None:
            outcome.wrote(_kept_as(fact, "facts"), fact.pk)
    if plan["self_concept"] and not context["self_concept_writable"]:
        # The self-concept is global: it changes only from global sources (or the owner).
        report["self_concept_skipped"] = (
            f"{len(plan['self_concept'])} change(s) proposed from {scope.label}; the global "
            "self-concept changes only from global memories"
        )
    elif plan["self_concept"]:
        for item in plan["self_concept"]:
            version = _proposed(
                outcome,
                what=f"{where}: self-concept {item['field']}",
                # As with facts: the LLM never read a secret field, and what it learns for one
                # stays secret (the outcome goes to the owner, never back to the LLM).
                write=partial(
                    self_concept_write,
                    field=item["field"],
                    content=item["content"],
                    actor=Actor.LLM,
                    reason=f"{reason}: self-concept",
                    writer_sees_secrets=True,
                ),
            )
            if version is not None:
                outcome.wrote(_kept_as(version, "self_concept"), version.pk)
    for item in plan["conflicts"]:
        reflection = _proposed(
            outcome,
            what=f"{where}: tension of #{item['id']}",
            write=partial(_tension_write, item, scope=context, reason=reason),
        )
        if reflection is not None:
            outcome.wrote("tensions", reflection.pk)
    for item in plan["threads"]:
        source = context["today"].get(item["source_id"]) if item["source_id"] else None
        # Without a source the thread still came from this scope's day: it stays here.
        scope_id = source.scope_id if source else scope.pk
        if _thread_exists(scope_id=scope_id, content=item["content"]):
            continue
        thread = _proposed(
            outcome,
            what=f"{where}: thread",
            write=partial(
                thread_write,
                scope_id=scope_id,
                content=item["content"],
                importance=item["importance"],
                emotional=item["emotional"],
                recurrence=item["recurrence"],
                unresolved=item["unresolved"],
                source_memory_id=source.pk if source else None,
                actor=Actor.LLM,
                reason=f"{reason}: thread",
            ),
        )
        if thread is not None:
            outcome.wrote("threads", thread.pk)
    for item in plan["thread_updates"]:
        aged = _proposed(
            outcome,
            what=f"{where}: thread {item['id']} {item['status']}",
            write=partial(
                thread_set_status,
                thread_id=item["id"],
                status=item["status"],
                actor=Actor.LLM,
                reason=f"{reason}: thread {item['status']}"
                + (f" ({item['why']})" if item["why"] else ""),
            ),
        )
        if aged is not None:
            outcome.wrote("threads_aged", item["id"])
    return report


def _tension_write(item: dict, *, scope: dict, reason: str) -> Narrative | None:
    """Record a conflict as a reflection, "X is in tension with earlier Y": both memories stay as
    they are; nothing is resolved on the owner's behalf."""
    new = scope["today"][item["id"]]
    older = scope["earlier"].get(item["earlier_id"]) or scope["facts"][item["earlier_id"]]
    marker = f"tension:{new.pk}:{older.pk}"
    if Narrative.objects.filter(tag_rows__tag=marker).exists():
        return None
    gesture = f"「{new.summary[:200]}」 is in tension with earlier 「{older.summary[:200]}」"
    return narrative_write(
        data=NarrativeInput(
            scope_id=new.scope_id,
            gesture=gesture[:500],
            context=item["tension"],
            cognition_direction="Keep both in view until new evidence settles it.",
            importance=3,
            emotional=3,
            unresolved=5,
            layer=NarrativeLayer.EXPERIENCE,
            ntype="self_reflection",
            tags=[TENSION_TAG, marker],
        ),
        actor=Actor.LLM,
        reason=f"{reason}: conflict between #{new.pk} and earlier #{older.pk} recorded, not resolved",
    )


# --- night drift ------------------------------------------------------------------------------


def _recent_drift_seeds(day: date) -> set[int]:
    seeds = set()
    for stats in DreamRun.objects.filter(
        day__gte=day - timedelta(days=7), day__lte=day
    ).values_list("stats", flat=True):
        drift = (stats or {}).get("layers", {}).get("drift") or {}
        for seed in [drift.get("seed"), *(drift.get("seeds") or [])]:
            if isinstance(seed, int):
                seeds.add(seed)
    return seeds


def _drift_seed(day: date, *, scope_id: int) -> Narrative | None:
    recent = _recent_drift_seeds(day)
    candidates = (
        Narrative.objects.filter(
            scope_id=scope_id,
            status=MemoryStatus.ACTIVE,
            secret=False,
            recorded_at__date__gte=day - timedelta(days=30),
            recorded_at__date__lte=day,
        )
        .exclude(ntype=DREAM_TAG)
        .exclude(pk__in=recent)
        .order_by("-weight", "-recorded_at", "-pk")
    )
    return candidates.first()


def _drift_material(seed: Narrative) -> tuple[dict, dict[str, list[int]]]:
    visible = scope_visible_ids(scope=seed.scope)
    pool = Narrative.objects.filter(
        status=MemoryStatus.ACTIVE, secret=False, scope_id__in=visible
    ).exclude(pk=seed.pk)
    path: dict[str, list[int]] = {"embedding": [], "entities": [], "topics": [], "far": []}
    seed_vector = _vectors([seed.pk]).get(seed.pk)
    pool_vectors = _vectors(list(pool.order_by("-weight").values_list("pk", flat=True)[:3000]))
    if seed_vector is not None:
        path["embedding"] = _nearest(seed_vector, pool_vectors, count=3)
    for name, _ in entities_role_parse(seed.entities_role)[:3]:
        found = pool.filter(entities_role__contains=f"{name}=").order_by("-weight")
        path["entities"].extend(pk for pk in found.values_list("pk", flat=True)[:2])
    topics = TopicClusterMember.objects.filter(narrative=seed).values("cluster_id")
    shared_topic = (
        TopicClusterMember.objects.filter(cluster_id__in=topics, narrative__in=pool)
        .order_by("-narrative__weight")
        .values_list("narrative_id", flat=True)
    )
    path["topics"] = list(dict.fromkeys(shared_topic))[:3]
    near = {pk for ids in path.values() for pk in ids} | {seed.pk}
    path["far"] = _far_territory(seed, seed_vector, pool, pool_vectors, near, visible=visible)
    for via in path:
        path[via] = list(dict.fromkeys(path[via]))
    wanted = {pk for ids in path.values() for pk in ids}
    rows = {n.pk: n for n in Narrative.objects.filter(pk__in=wanted)}
    material = {
        "seed": _narrative_material(seed),
        "near": {
            via: [_narrative_material(rows[pk], context_chars=150) for pk in ids if pk in rows]
            for via, ids in path.items()
            if via != "far"
        },
        "far": [_narrative_material(rows[pk], context_chars=150) for pk in path["far"]],
    }
    return material, path


def _far_territory(
    seed, seed_vector, pool, pool_vectors, near: set[int], *, visible: list[int]
) -> list[int]:
    """Memories from the soft cluster (of a scope the seed's scope sees) least like the seed's and
    not adjacent to it, or failing that the visible memories least similar to the seed."""
    home = (
        EmbeddingClusterMember.objects.filter(memory=seed, rank=1)
        .values_list("cluster_id", flat=True)
        .first()
    )
    if home is not None and seed_vector is not None:
        adjacent = set(
            EmbeddingClusterAdjacency.objects.filter(cluster_a_id=home).values_list(
                "cluster_b_id", flat=True
            )
        ) | set(
            EmbeddingClusterAdjacency.objects.filter(cluster_b_id=home).values_list(
                "cluster_a_id", flat=True
            )
        )
        clusters = {
            pk: vector_from_bytes(bytes(blob))
            for pk, blob in EmbeddingCluster.objects.filter(scope_id__in=visible)
            .exclude(pk__in=adjacent | {home})
            .values_list("pk", "centroid")
        }
        for cluster_id in _nearest(seed_vector, clusters, count=len(clusters), farthest=True):
            members = list(
                EmbeddingClusterMember.objects.filter(
                    cluster_id=cluster_id, rank=1, memory_id__in=pool.values("pk")
                )
                .exclude(memory_id__in=near)
                .order_by("-memory__narrative__weight")
                .values_list("memory_id", flat=True)[:2]
            )
            if members:
                return members
    if seed_vector is None:
        return []
    candidates = {pk: v for pk, v in pool_vectors.items() if pk not in near}
    return _nearest(seed_vector, candidates, count=2, farthest=True)


def drift_validate(data: dict, *, path: dict[str, list[int]]) -> dict | None:
    connection = data.get("connection")
    if not isinstance(connection, bool):
        raise AnswerInvalid("connection must be true or false")
    if not connection:
        return None
    allowed = {pk for ids in path.values() for pk in ids}
    memory_ids = _ids(data, "memory_ids", allowed=allowed, required=True)
    if not set(memory_ids) & set(path["far"]):
        raise AnswerInvalid("a connection must include at least one memory from the far territory")
    plan = {"insight": _text(data, "insight", maximum=1000, required=True), "thread": None}
    thread = data.get("thread")
    if thread is not None:
        if not isinstance(thread, dict):
            raise AnswerInvalid("thread must be an object or null")
        plan["thread"] = {
            "content": _text(thread, "content", maximum=1000, required=True),
            "importance": _dimension(thread, "importance", default=3),
            "emotional": _dimension(thread, "emotional", default=3),
            "recurrence": _dimension(thread, "recurrence", default=3),
            "unresolved": _dimension(thread, "unresolved", default=3),
        }
    plan["memory_ids"] = memory_ids
    return plan


def drift_layer(*, day: date, config: LLMConfig, after: datetime | None = None) -> LayerOutcome:
    """Per scope with memories today (recorded from `after` on, if given): from its heaviest
    recent memory, through its neighbours, to unrelated territory the scope may see; a thread, in
    that scope, only when the LLM finds a real connection that the material supports."""
    outcome = LayerOutcome()
    outcome.detail = {"scopes": {}, "seeds": []}
    scopes = _scopes_with_material(day, after=after)
    reports = _per_scope(scopes, outcome=outcome, run=partial(_drift_scope, day=day, config=config))
    if not any(report["status"] != "skipped" for report in reports):
        outcome.detail["reason"] = (
            "no memory to drift from" if not scopes else "no unrelated territory to drift to"
        )
    return outcome


def _per_scope(scopes: list[Scope], *, outcome: LayerOutcome, run) -> list[dict]:
    """Run a layer's `run(scope=…, outcome=…)` for each scope, keeping the lease; one scope's LLM
    failure is recorded and the others still run. Sets the layer's status from the scopes' reports
    (skipped when none was asked, failed when all that were failed, partial when some did or an
    item was rejected)."""
    for scope in scopes:
        lease_heartbeat()
        try:
            report = run(scope=scope, outcome=outcome)
        except LLMUnavailable as exc:
            report = {"status": "failed", "reason": str(exc)}
            outcome.rejected.append(f"scope {scope.pk}: {exc}")
        outcome.detail["scopes"][str(scope.pk)] = report
    reports = list(outcome.detail["scopes"].values())
    asked = [report for report in reports if report["status"] != "skipped"]
    if not asked:
        outcome.status = "skipped"
    elif all(report["status"] == "failed" for report in asked):
        outcome.status = "failed"
    elif outcome.rejected or any(report["status"] == "failed" for report in asked):
        outcome.status = "partial"
    return reports


def _drift_scope(*, day: date, scope: Scope, config: LLMConfig, outcome: LayerOutcome) -> dict:
    seed = _drift_seed(day, scope_id=scope.pk)
    if seed is None:
        return {"status": "skipped", "reason": "no memory to drift from"}
    material, path = _drift_material(seed)
    report: dict = {"status": "ok", "seed": seed.pk, "path": path}
    if not path["far"]:
        return report | {"status": "skipped", "reason": "no unrelated territory to drift to"}
    outcome.detail["seeds"].append(seed.pk)
    data = _ask("drift", material, config=config, outcome=outcome)
    try:
        plan = drift_validate(data, path=path)
    except AnswerInvalid as exc:
        outcome.rejected.append(f"scope {scope.pk}: {exc}")
        return report | {"status": "failed", "reason": str(exc)}
    report["connection"] = plan is not None
    if plan is None:
        return report
    report["insight"] = plan["insight"]
    if plan["thread"] and not _thread_exists(
        scope_id=seed.scope_id, content=plan["thread"]["content"]
    ):
        thread = _proposed(
            outcome,
            what=f"scope {scope.pk}: thread",
            write=partial(
                thread_write,
                scope_id=seed.scope_id,
                source_memory_id=seed.pk,
                actor=Actor.LLM,
                reason=f"DREAM night drift {day}: {plan['insight'][:200]} "
                f"(memories {plan['memory_ids']})",
                **plan["thread"],
            ),
        )
        if thread is not None:
            outcome.wrote("threads", thread.pk)
    return report


# --- symbolic dream ---------------------------------------------------------------------------


def dream_validate(data: dict, *, today: set[int], scope_id: int, day: date) -> NarrativeInput:
    symbols = _strings(data, "symbols", maximum=5, each=40)
    if len(symbols) < 3:
        raise AnswerInvalid("a dream needs 3 to 5 symbols")
    _ids(data, "source_ids", allowed=today, required=True)
    return NarrativeInput(
        scope_id=scope_id,
        gesture=_text(data, "gesture", maximum=500, required=True),
        context=_text(data, "story", maximum=4000, required=True),
        cognition_direction=_text(data, "reflection", maximum=500),
        # A dream never outweighs what really happened: importance is fixed at 1.
        importance=1,
        emotional=_dimension(data, "emotional"),
        unresolved=_dimension(data, "unresolved"),
        valence=_number(data, "valence", low=-1, high=1, default=0.0),
        ntype=DREAM_TAG,
        layer=NarrativeLayer.EXPERIENCE,
        tags=[
            DREAM_TAG,
            *[symbol for symbol in symbols if symbol.lower() != DREAM_TAG],
            _dream_day_tag(day),
        ],
    )


def _dream_day_tag(day: date) -> str:
    return f"{DREAM_DAY_TAG}{day.isoformat()}"


def _dreamt(*, scope_id: int, day: date) -> bool:
    """Whether the scope has its dream for `day`, whenever it was written. A dream the gate
    refused is kept as rejected; it is not the day's dream."""
    return (
        Narrative.objects.filter(
            scope_id=scope_id, ntype=DREAM_TAG, tag_rows__tag=_dream_day_tag(day)
        )
        .exclude(status=MemoryStatus.REJECTED)
        .exists()
    )


def _day_dream_write(*, data: NarrativeInput, day: date, reason: str) -> Narrative | None:
    """Write `data` as its scope's dream for `day`; None, writing nothing, when the scope got its
    dream for that day while the LLM was dreaming this one."""
    prepared = narrative_prepare(data=data)
    with transaction.atomic():
        # Runs normally take turns through the lease, but a run whose lease ran out while it
        # stalled may still be writing when the run that took over does: writers of a scope's
        # dream take turns on the scope's row (SQLite's IMMEDIATE transactions already do), so
        # the second sees the first's dream and writes none.
        Scope.objects.select_for_update().filter(pk=data.scope_id).first()
        if _dreamt(scope_id=data.scope_id, day=day):
            return None
        return narrative_commit(prepared=prepared, actor=Actor.LLM, reason=reason)


def dream_layer(*, day: date, config: LLMConfig, after: datetime | None = None) -> LayerOutcome:
    """Per scope with memories today (recorded from `after` on, if given): 3–5 symbols from that
    scope's day, woven into one dream narrative written in that scope (once a day per scope)."""
    outcome = LayerOutcome()
    outcome.detail = {"scopes": {}}
    scopes = _scopes_with_material(day, after=after)
    if not scopes:
        outcome.status = "skipped"
        outcome.detail["reason"] = f"no memories on {day} to dream about"
        return outcome
    reports = _per_scope(
        scopes, outcome=outcome, run=partial(_dream_scope, day=day, config=config, after=after)
    )
    if not any(report["status"] != "skipped" for report in reports):
        outcome.detail["reason"] = reports[0].get("reason", "nothing to dream about")
    return outcome


def _dream_scope(
    *,
    day: date,
    scope: Scope,
    config: LLMConfig,
    outcome: LayerOutcome,
    after: datetime | None = None,
) -> dict:
    already = {"status": "skipped", "reason": f"already dreamt for {day}"}
    if _dreamt(scope_id=scope.pk, day=day):
        return already
    material_rows = list(
        _day_narratives(day, after=after).filter(scope_id=scope.pk)[
            : settings.TIDELINE_DREAM_COMBING_MAX_MEMORIES
        ]
    )
    report: dict = {"status": "ok", "memories": len(material_rows)}
    data = _ask(
        "dream",
        {"day": day.isoformat(), "today": [_narrative_material(n) for n in material_rows]},
        config=config,
        outcome=outcome,
    )
    try:
        data_in = dream_validate(
            data, today={n.pk for n in material_rows}, scope_id=scope.pk, day=day
        )
    except AnswerInvalid as exc:
        outcome.rejected.append(f"scope {scope.pk}: {exc}")
        return report | {"status": "failed", "reason": str(exc)}
    try:
        dream = _day_dream_write(
            data=data_in, day=day, reason=f"DREAM symbolic dream {day} · {scope.label}"
        )
    except TidelineError as exc:
        # As `_proposed`: a dream a write service refuses is one rejection, not the layer's end.
        outcome.rejected.append(f"scope {scope.pk}: dream: {exc}")
        return report
    if dream is None:
        return already
    outcome.wrote(_kept_as(dream, "dreams"), dream.pk)
    return report
