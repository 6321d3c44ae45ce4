"""The raw past on the owner panel: sessions, the verbatim timeline, evidence, the inbox, snapshots,
threads and attention, and the words of the timeline that search can expand a query by. All
read-only; threads change status through their service."""

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from memory.admin.base import ReadOnlyAdmin, owner_apply
from memory.admin.display import RAW_KEYS_TITLE, pretty_json
from memory.models import (
    AttentionEvent,
    ContextTurn,
    Evidence,
    InboxItem,
    Session,
    Snapshot,
    Thread,
    ThreadStatus,
    WordVector,
)
from memory.services.threads import thread_set_status


@admin.register(Session)
class SessionAdmin(ReadOnlyAdmin):
    list_display = ("__str__", "scope", "origin", "cwd", "started_at", "ended_at")
    list_filter = ("scope", "origin", "runtime")
    list_select_related = ("scope",)
    search_fields = ("external_id", "cwd")
    readonly_fields = ("turns_link", "meta_json")
    fieldsets = [
        (None, {"fields": ("scope", "runtime", "cwd", "origin", "started_at", "ended_at")}),
        ("时间线 · timeline", {"fields": ("turns_link",)}),
        (
            RAW_KEYS_TITLE,
            {
                "classes": ("collapse",),
                "fields": ("external_id", "parent", "delegation_depth", "key_id", "meta_json"),
            },
        ),
    ]

    @admin.display(description="turns")
    def turns_link(self, session: Session) -> str:
        url = reverse("admin:memory_contextturn_changelist") + f"?session={session.pk}"
        return format_html('<a href="{}">{} turn(s)</a>', url, session.turns.count())

    @admin.display(description="meta")
    def meta_json(self, session: Session) -> str:
        return pretty_json(session.meta)


@admin.register(ContextTurn)
class ContextTurnAdmin(ReadOnlyAdmin):
    list_display = ("said", "who", "session", "occurred_at")
    list_filter = ("scope", "role")
    list_select_related = ("session",)
    search_fields = ("content", "speaker")
    search_help_text = "Words of what was said"
    show_full_result_count = False
    readonly_fields = ("meta_json",)
    fieldsets = [
        (None, {"fields": ("content", "role", "speaker", "session", "scope", "occurred_at")}),
        (
            RAW_KEYS_TITLE,
            {
                "classes": ("collapse",),
                "fields": (
                    "seq",
                    "recorded_at",
                    "embedding_status",
                    "embedding_model",
                    "meta_json",
                ),
            },
        ),
    ]

    @admin.display(description="what was said")
    def said(self, turn: ContextTurn) -> str:
        return turn.content[:160]

    @admin.display(description="who", ordering="role")
    def who(self, turn: ContextTurn) -> str:
        return turn.speaker or turn.role

    @admin.display(description="meta")
    def meta_json(self, turn: ContextTurn) -> str:
        return pretty_json(turn.meta)


@admin.register(Evidence)
class EvidenceAdmin(ReadOnlyAdmin):
    list_display = ("memory", "turn", "quote", "created_at")
    list_select_related = ("memory", "turn")
    search_fields = ("quote", "memory__summary")
    fields = ("memory", "turn", "quote", "created_at")


@admin.register(InboxItem)
class InboxItemAdmin(ReadOnlyAdmin):
    list_display = ("captured", "status", "scope", "origin", "captured_at", "processed_at")
    list_filter = ("status", "scope", "origin")
    list_select_related = ("scope",)
    search_fields = ("content",)
    readonly_fields = ("result_json",)
    fieldsets = [
        (None, {"fields": ("content", "status", "scope", "origin", "captured_at")}),
        ("结果 · result", {"fields": ("processed_at", "result_json")}),
        (
            RAW_KEYS_TITLE,
            {"classes": ("collapse",), "fields": ("session", "cwd", "delegation_depth")},
        ),
    ]

    @admin.display(description="captured text")
    def captured(self, item: InboxItem) -> str:
        return item.content[:160]

    @admin.display(description="result")
    def result_json(self, item: InboxItem) -> str:
        return pretty_json(item.result)


@admin.register(Snapshot)
class SnapshotAdmin(ReadOnlyAdmin):
    list_display = ("__str__", "scope", "created_at")
    list_filter = ("scope",)
    list_select_related = ("scope",)
    search_fields = ("content",)
    fields = ("content", "scope", "session", "created_at")


def _thread_action(status: str, description: str):
    def action(modeladmin, request, queryset) -> None:
        owner_apply(
            request,
            ids=list(queryset.values_list("pk", flat=True)),
            verb=f"marked {status}",
            call=lambda pk, **kw: thread_set_status(thread_id=pk, status=status, **kw),
        )

    action.__name__ = f"mark_{status}"
    return admin.action(description=description, permissions=["owner_action"])(action)


@admin.register(Thread)
class ThreadAdmin(ReadOnlyAdmin):
    list_display = ("__str__", "status", "weight", "scope", "created_at")
    list_filter = ("status", "scope")
    list_select_related = ("scope",)
    search_fields = ("content",)
    actions = [
        _thread_action(ThreadStatus.OPEN, "Mark open"),
        _thread_action(ThreadStatus.EXPLORED, "Mark explored"),
        _thread_action(ThreadStatus.ABANDONED, "Mark abandoned"),
    ]
    fieldsets = [
        (None, {"fields": ("content", "status", "weight", "scope", "created_at")}),
        (
            RAW_KEYS_TITLE,
            {
                "classes": ("collapse",),
                "fields": (
                    "importance",
                    "emotional",
                    "recurrence",
                    "unresolved",
                    "source_memory",
                    "updated_at",
                ),
            },
        ),
    ]


@admin.register(AttentionEvent)
class AttentionEventAdmin(ReadOnlyAdmin):
    list_display = ("memory", "source", "similarity", "session", "occurred_at")
    list_filter = ("source",)
    list_select_related = ("memory", "session")
    search_fields = ("memory__summary",)
    show_full_result_count = False
    fields = ("memory", "source", "similarity", "session", "occurred_at")


@admin.register(WordVector)
class WordVectorAdmin(ReadOnlyAdmin):
    list_display = ("word", "term", "embedding_model", "created_at")
    list_filter = ("embedding_model",)
    search_fields = ("word", "term")
    show_full_result_count = False
    fields = ("word", "term", "embedding_model", "created_at")
