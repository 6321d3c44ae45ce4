"""How things read on the owner panel: the human sentence first, machine keys out of the way."""

import json

from django.urls import reverse
from django.utils.html import format_html, format_html_join

from memory.models import AuditEvent, Memory, MemoryStatus, ScopeKind

RAW_KEYS_TITLE = "原始键名 · raw keys"
LIFECYCLE_TITLE = "生命周期 · lifecycle"
AUDIT_TRAIL_LIMIT = 20

# Memory parent rows and their typed children are audited under either name with the same id.
MEMORY_TARGET_TYPES = ("memory", "narrative", "fact", "selfconcept")


def scoped_summary(memory: Memory) -> str:
    """The summary with its scope in front ("[项目·archive-manager] …") unless the summary already
    says it or the memory is global, so a list mixing projects still reads unambiguously."""
    scope = memory.scope
    prefix = f"[{scope.label}]"
    if scope.kind == ScopeKind.GLOBAL or memory.summary.startswith(prefix):
        return memory.summary
    return f"{prefix} {memory.summary}"


def status_text(memory: Memory) -> str:
    if memory.status == MemoryStatus.EXPIRED and memory.expired_by:
        return f"{memory.get_status_display()} · {memory.get_expired_by_display()}"
    return memory.get_status_display()


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
    events = AuditEvent.objects.filter(
        target_type__in=MEMORY_TARGET_TYPES, target_id=memory.pk
    ).order_by("-occurred_at", "-id")[:AUDIT_TRAIL_LIMIT]
    rows = [
        (
            reverse("admin:memory_auditevent_change", args=[event.pk]),
            event.occurred_at.strftime("%Y-%m-%d %H:%M:%S"),
            event.get_actor_display(),
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
