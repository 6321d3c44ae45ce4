"""The owner panel's home: what Tideline knows, before any table. Who the agent is, what it knows
about the owner (in sentences), the newest memories of each scope, open threads, where recall's
attention goes, what is waiting and how the last DREAM went. Read-only; the owner sees every scope."""

from dataclasses import dataclass
from datetime import datetime

from django.apps import apps
from django.db.models import Max
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.timesince import timesince

from memory.admin.status import backlog_counts, layer_outcomes
from memory.models import (
    Fact,
    FactKind,
    Memory,
    MemoryStatus,
    ProfileKind,
    Scope,
    SelfConcept,
    SelfConceptField,
    Thread,
    ThreadStatus,
)

SCOPES_SHOWN = 6
MEMORIES_PER_SCOPE = 5
FACTS_PER_PROFILE = 12
PROFILES_SHOWN = 6
THREADS_SHOWN = 8
HEATMAP_DAYS = 30
HEATMAP_ROWS = 12
# The heatmap's label column is 300 px at 12 px type: a CJK character is about one em wide, a
# Latin one about half, so names are cut to what fits rather than to a character count.
HEATMAP_LABEL_EMS = 19
PROFILE_ORDER = [ProfileKind.USER, ProfileKind.SELF, ProfileKind.PERSON, ProfileKind.PROJECT]


@dataclass(frozen=True)
class Line:
    text: str
    url: str
    note: str = ""


def _change_url(memory: Memory) -> str:
    return reverse(f"admin:memory_{memory.memory_type.replace('_', '')}_change", args=[memory.pk])


def _ago(moment: datetime | None) -> str:
    if moment is None:
        return ""
    if (timezone.now() - moment).total_seconds() < 60:
        return "just now"
    return f"{timesince(moment, timezone.now()).split(',')[0]} ago"


def self_concept_lines() -> list[Line]:
    labels = dict(SelfConceptField.choices)
    current = SelfConcept.objects.filter(status=MemoryStatus.ACTIVE).order_by("-recorded_at")
    newest = {}
    for row in current:
        newest.setdefault(row.field, row)
    return [
        Line(text=newest[field].content, url=_change_url(newest[field]), note=labels[field])
        for field in SelfConceptField.values
        if field in newest
    ]


def fact_sentence(fact: Fact) -> str:
    """The fact's own summary, or one composed from its key when it has none."""
    if fact.summary:
        return fact.summary
    return f"{fact.profile.name}: {fact.predicate.replace('_', ' ')} is {fact.value}"


def profile_sections() -> list[dict]:
    """Profiles with current facts, the owner's first, each fact as its sentence (preferences
    first)."""
    facts = sorted(
        Fact.objects.filter(status=MemoryStatus.ACTIVE)
        .select_related("profile", "scope")
        .order_by("-pinned", "-recorded_at"),
        key=lambda fact: fact.kind != FactKind.PREFERENCE,
    )
    by_profile: dict[int, dict] = {}
    for fact in facts:
        section = by_profile.setdefault(
            fact.profile_id, {"profile": fact.profile, "lines": [], "more": 0}
        )
        if len(section["lines"]) >= FACTS_PER_PROFILE:
            section["more"] += 1
            continue
        section["lines"].append(
            Line(
                text=fact_sentence(fact),
                url=_change_url(fact),
                # A composed summary already starts with its kind ("[偏好] …").
                note="" if fact.summary.startswith("[") else fact.get_kind_display(),
            )
        )
    order = {kind: n for n, kind in enumerate(PROFILE_ORDER)}
    sections = sorted(
        by_profile.values(),
        key=lambda s: (order.get(s["profile"].kind, 9), -len(s["lines"]), s["profile"].name),
    )
    return sections[:PROFILES_SHOWN]


def newest_by_scope() -> list[dict]:
    active = Memory.objects.filter(status=MemoryStatus.ACTIVE)
    scopes = (
        Scope.objects.filter(memories__in=active)
        .annotate(newest=Max("memories__recorded_at"))
        .order_by("-newest")[:SCOPES_SHOWN]
    )
    return [
        {
            "scope": scope,
            "lines": [
                Line(
                    text=memory.summary,
                    url=_change_url(memory),
                    note=f"{memory.get_memory_type_display()} · {_ago(memory.recorded_at)}",
                )
                for memory in active.filter(scope=scope).order_by("-recorded_at")[
                    :MEMORIES_PER_SCOPE
                ]
            ],
        }
        for scope in scopes
    ]


def open_threads() -> list[Line]:
    threads = (
        Thread.objects.filter(status=ThreadStatus.OPEN)
        .select_related("scope")
        .order_by("-weight", "-created_at")[:THREADS_SHOWN]
    )
    return [
        Line(
            text=thread.content,
            url=reverse("admin:memory_thread_change", args=[thread.pk]),
            note=f"{thread.scope.label} · weight {thread.weight:.2f}",
        )
        for thread in threads
    ]


def _label_fit(name: str) -> str:
    width, kept = 0.0, []
    for char in name:
        width += 1.0 if ord(char) > 0x2E7F else 0.55
        if width > HEATMAP_LABEL_EMS:
            return "".join(kept).rstrip() + "…"
        kept.append(char)
    return name


def heatmap_picture() -> dict | None:
    """DREAM's own heatmap renderer over the last 30 days (its legend needs that width), with
    names cut to fit the label column."""
    if not apps.is_installed("dream"):
        return None
    from dream.heatmap import heatmap_svg
    from dream.selectors import attention_heatmap_read

    heatmap = attention_heatmap_read(days=HEATMAP_DAYS)
    heatmap["clusters"] = [
        {**row, "name": _label_fit(row["name"] or "")} for row in heatmap["clusters"]
    ]
    try:
        url = reverse("admin:dream_attention_heatmap")
    except NoReverseMatch:
        url = ""
    return {"svg": heatmap_svg(heatmap, row_limit=HEATMAP_ROWS), "url": url, "days": HEATMAP_DAYS}


def last_dream_run() -> dict | None:
    if not apps.is_installed("dream"):
        return None
    run = apps.get_model("dream", "DreamRun").objects.order_by("-started_at", "-id").first()
    if run is None:
        return {"run": None, "list_url": reverse("admin:dream_dreamrun_changelist")}
    return {
        "run": run,
        "url": reverse("admin:dream_dreamrun_change", args=[run.pk]),
        "list_url": reverse("admin:dream_dreamrun_changelist"),
        "outcomes": layer_outcomes(run.stats),
        "ago": _ago(run.started_at),
    }


def dashboard_context() -> dict:
    return {
        "self_concept": self_concept_lines(),
        "profiles": profile_sections(),
        "scopes": newest_by_scope(),
        "threads": open_threads(),
        "heatmap": heatmap_picture(),
        "backlog": backlog_counts(),
        "dream": last_dream_run(),
    }
