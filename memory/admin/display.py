"""How things read on the owner panel: the human sentence first, machine keys out of the way."""

import json

from django.db.models import OuterRef, Subquery
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from memory.models import (
    Actor,
    ApiKey,
    AuditAction,
    AuditEvent,
    ExpiredBy,
    Fact,
    Memory,
    MemoryStatus,
    Narrative,
    ScopeKind,
    SelfConcept,
    Thread,
)
from memory.selectors.reads import MEMORY_TARGET_TYPES, audit_events_of_memory

RAW_KEYS_TITLE = "原始键名 · raw keys"
LIFECYCLE_TITLE = "生命周期 · lifecycle"
AUDIT_TRAIL_LIMIT = 20


def scoped_summary(memory: Memory) -> str:
    """The summary with its scope in front ("[项目·archive-manager] …") unless the summary already
    says it or the memory is global, so a list mixing projects still reads unambiguously."""
    scope = memory.scope
    prefix = f"[{scope.label}]"
    if scope.kind == ScopeKind.GLOBAL or memory.summary.startswith(prefix):
        return memory.summary
    return f"{prefix} {memory.summary}"


# DREAM's script layer writes these as the system; everything else the system does is maintenance.
DREAM_TARGET_TYPES = ("topiccluster", "embeddingcluster", "entitynode", "entityedge", "dreamrun")
ACTOR_LABELS = {
    Actor.OWNER: "owner",
    Actor.AGENT: "agent",
    Actor.LLM: "DREAM (LLM)",
    Actor.RULE: "write-gate rule",
    Actor.SYSTEM: "system",
}


def actor_text(*, actor: str, target_type: str = "", key_name: str = "") -> str:
    """Who made a decision, as the owner would say it: owner, agent (with its key), DREAM."""
    if actor == Actor.SYSTEM and target_type in DREAM_TARGET_TYPES:
        return "DREAM (script)"
    label = ACTOR_LABELS.get(actor, actor)
    return f"{label} · key {key_name}" if key_name and actor == Actor.AGENT else label


def key_name_subquery(key_field: str = "key_id") -> Subquery:
    return Subquery(ApiKey.objects.filter(pk=OuterRef(key_field)).values("name")[:1])


def expiry_actor_subquery() -> Subquery:
    """The actor of the newest expire decision about each memory, for a list in one query."""
    return Subquery(
        AuditEvent.objects.filter(
            target_type__in=MEMORY_TARGET_TYPES, target_id=OuterRef("pk"), action=AuditAction.EXPIRE
        )
        .order_by("-occurred_at", "-id")
        .values("actor")[:1]
    )


def status_text(memory: Memory) -> str:
    """ "expired · by agent", not the model's "manual (owner)": a manual expiry is whoever asked
    for it, which the audit log knows."""
    if memory.status != MemoryStatus.EXPIRED or not memory.expired_by:
        return memory.get_status_display()
    if memory.expired_by != ExpiredBy.MANUAL:
        return f"{memory.get_status_display()} · {memory.get_expired_by_display()}"
    actor = getattr(memory, "expiry_actor", None)
    if actor is None:
        event = (
            AuditEvent.objects.filter(
                target_type__in=MEMORY_TARGET_TYPES, target_id=memory.pk, action=AuditAction.EXPIRE
            )
            .order_by("-occurred_at", "-id")
            .first()
        )
        actor = event.actor if event else ""
    by = ACTOR_LABELS.get(actor, "") if actor else ""
    return f"{memory.get_status_display()} · by {by}" if by else memory.get_status_display()


def short_date(moment) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d") if moment else "—"


def pretty_json(value) -> str:
    if value in (None, "", [], {}):
        return "—"
    return format_html(
        '<pre style="margin:0;white-space:pre-wrap">{}</pre>',
        json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True),
    )


def change_lines(before, after) -> str:
    """An audit row's before/after as "field: old → new" lines, the way the owner reads a change."""
    before = before if isinstance(before, dict) else {}
    after = after if isinstance(after, dict) else {}
    keys = [key for key in {**before, **after} if before.get(key) != after.get(key)]
    if not keys:
        return "—"
    return format_html_join(
        "",
        "<div>{}: {} → {}</div>",
        (
            (
                key,
                json.dumps(before.get(key, "—"), ensure_ascii=False),
                json.dumps(after.get(key, "—"), ensure_ascii=False),
            )
            for key in keys
        ),
    )


def audit_trail(memory: Memory) -> str:
    """The newest decisions about this memory, each linking to its full audit row."""
    events = (
        audit_events_of_memory(memory_id=memory.pk)
        .annotate(key_name=key_name_subquery())
        .order_by("-occurred_at", "-id")[:AUDIT_TRAIL_LIMIT]
    )
    rows = [
        (
            reverse("admin:memory_auditevent_change", args=[event.pk]),
            event.occurred_at.strftime("%Y-%m-%d %H:%M:%S"),
            actor_text(actor=event.actor, target_type=event.target_type, key_name=event.key_name),
            event.get_action_display(),
            event.reason,
        )
        for event in events
    ]
    if not rows:
        return "—"
    return format_html(
        "<table><tbody>{}</tbody></table>",
        format_html_join(
            "",
            '<tr><td><a href="{}">{}</a></td><td>{}</td><td>{}</td><td>{}</td></tr>',
            rows,
        ),
    )


LAYER_KEYS = ("status", "reason", "tokens", "written", "rejected")
# What the ids under each key of a layer's `written` are (the kinds dream/llm_layers.py passes to
# `LayerOutcome.wrote`). Ids are per table: thread #1 and memory #1 are unrelated rows, so each id
# links to the page of its own table; an id of a kind not named here is listed with no page.
WRITTEN_MODELS = {
    "narratives": Narrative,
    "rescored": Narrative,
    "tensions": Narrative,
    "dreams": Narrative,
    "facts": Fact,
    "self_concept": SelfConcept,
    # The write gate keeps what it refuses, as rejected, whatever kind the layer wrote.
    "gate_rejected": Memory,
    "threads": Thread,
    "threads_aged": Thread,
}
FAILED_STATUSES = ("failed", "partial")


def _detail_text(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{key} {_detail_text(item)}" for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return f"{len(value)}"
    return str(value)


def written_url(*, kind: str, pk: int) -> str:
    """The owner-panel page of one id a DREAM layer wrote, or "" where it has none."""
    model = WRITTEN_MODELS.get(kind)
    if model is None:
        return ""
    try:
        return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[pk])
    except NoReverseMatch:
        # The model has no page on this panel (not registered): the id is listed with no page.
        return ""


def dream_layer_rows(stats) -> list[dict]:
    """A DREAM run's per-layer stats as table rows: outcome, what it read or did, what it wrote
    (each id with the URL of its page, "" where it has none), tokens, and what went wrong — in
    the order the layers ran."""
    layers = stats.get("layers") if isinstance(stats, dict) else None
    if not isinstance(layers, dict):
        return []
    order = [name for name in stats.get("order") or [] if name in layers]
    rows = []
    for name in order + [name for name in layers if name not in order]:
        result = layers[name] if isinstance(layers[name], dict) else {"status": str(layers[name])}
        status = str(result.get("status", "?"))
        written = result.get("written") if isinstance(result.get("written"), dict) else {}
        rejected = result.get("rejected") if isinstance(result.get("rejected"), list) else []
        failure = result.get("reason", "") if status in FAILED_STATUSES else ""
        rows.append(
            {
                "layer": name,
                "status": status,
                "note": result.get("reason", "") if status not in FAILED_STATUSES else "",
                "read": " · ".join(
                    f"{key.replace('_', ' ')} {_detail_text(value)}"
                    for key, value in result.items()
                    if key not in LAYER_KEYS
                ),
                "written": [
                    {
                        "kind": kind,
                        "links": [
                            (written_url(kind=kind, pk=pk), pk) for pk in ids if isinstance(pk, int)
                        ],
                    }
                    for kind, ids in written.items()
                    if isinstance(ids, list) and ids
                ],
                "tokens": int(result.get("tokens") or 0),
                "errors": [text for text in [failure, *map(str, rejected)] if text],
            }
        )
    return rows
