"""Engine status: how much is stored, what is waiting, how DREAM went, which LLM is configured
(never its key)."""

import json

from django.apps import apps
from django.conf import settings
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse

from memory.models import (
    ContextTurn,
    EmbeddingStatus,
    Fact,
    InboxItem,
    InboxStatus,
    Memory,
    MemoryStatus,
    MemoryType,
    Narrative,
)
from memory.services.llm import LLMConfigInvalid, llm_config_read

DREAM_RUNS_SHOWN = 10
BACKLOG_EMBEDDING = (EmbeddingStatus.PENDING, EmbeddingStatus.FAILED)


def _counts_by_type_and_status() -> list[dict]:
    cells = {
        (row["memory_type"], row["status"]): row["n"]
        for row in Memory.objects.values("memory_type", "status").annotate(n=Count("id"))
    }
    return [
        {
            "label": label,
            "cells": [cells.get((value, status), 0) for status in MemoryStatus.values],
            "total": sum(cells.get((value, status), 0) for status in MemoryStatus.values),
        }
        for value, label in MemoryType.choices
    ]


def _active_counts(model, field: str) -> list[tuple[str, int]]:
    labels = dict(model._meta.get_field(field).choices)
    rows = (
        model.objects.filter(status=MemoryStatus.ACTIVE)
        .values(field)
        .annotate(n=Count("id"))
        .order_by(field)
    )
    return [(labels.get(row[field], row[field]), row["n"]) for row in rows]


def layer_outcomes(stats) -> str:
    """ "scan ok · solidify failed" from a run's per-layer stats, else its stats as compact JSON."""
    layers = stats.get("layers") if isinstance(stats, dict) else None
    if isinstance(layers, dict) and layers:
        # PostgreSQL's jsonb does not keep key order; the run records the order it ran in.
        order = [name for name in stats.get("order") or [] if name in layers]
        names = order + [name for name in layers if name not in order]
        return " · ".join(
            f"{name} {outcome.get('status', '?') if isinstance(outcome, dict) else outcome}"
            for name in names
            for outcome in [layers[name] or {}]
        )
    return json.dumps(stats, ensure_ascii=False)[:200] if stats else "—"


def _dream_runs() -> dict | None:
    """The DREAM app owns its runs; read them only when that model exists."""
    if not apps.is_installed("dream"):
        return None
    try:
        dream_run = apps.get_model("dream", "DreamRun")
    except LookupError:
        return None
    try:
        list_url = reverse("admin:dream_dreamrun_changelist")
    except NoReverseMatch:
        list_url = ""
    runs = [
        {
            "layer": run.get_layer_display(),
            "status": run.get_status_display(),
            "started_at": run.started_at,
            "finished_at": run.finished_at,
            "tokens": run.tokens,
            "outcomes": layer_outcomes(run.stats),
            "error": run.error,
        }
        for run in dream_run.objects.order_by("-started_at")[:DREAM_RUNS_SHOWN]
    ]
    return {"runs": runs, "list_url": list_url}


def backlog_counts() -> list[tuple[str, int]]:
    return [
        (
            "inbox items waiting for flush_inbox",
            InboxItem.objects.filter(status=InboxStatus.PENDING).count(),
        ),
        (
            "memories needing embedding",
            Memory.objects.filter(embedding_status__in=BACKLOG_EMBEDDING).count(),
        ),
        (
            "timeline turns needing embedding",
            ContextTurn.objects.filter(embedding_status__in=BACKLOG_EMBEDDING).count(),
        ),
    ]


def engine_status_context() -> dict:
    try:
        llm, llm_problem = llm_config_read(), ""
    except LLMConfigInvalid as exc:
        llm, llm_problem = None, str(exc)
    return {
        "statuses": [label for _, label in MemoryStatus.choices],
        "by_type": _counts_by_type_and_status(),
        "fact_kinds": _active_counts(Fact, "kind"),
        "narrative_layers": _active_counts(Narrative, "layer"),
        "backlog": backlog_counts(),
        "dream": _dream_runs(),
        "llm": llm.public() if llm else None,
        "llm_problem": llm_problem,
        "engine": [
            ("database", connection.vendor),
            ("embedder", settings.TIDELINE_EMBEDDER),
            (
                "background tasks",
                "in-process (no broker)" if settings.CELERY_TASK_ALWAYS_EAGER else "Celery broker",
            ),
        ],
    }


def engine_status(request: HttpRequest) -> HttpResponse:
    if not request.user.has_module_perms("memory"):
        raise PermissionDenied
    context = {
        **admin.site.each_context(request),
        "title": "Engine status",
        **engine_status_context(),
    }
    return TemplateResponse(request, "admin/engine_status.html", context)
