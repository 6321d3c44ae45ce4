"""The audit log on the owner panel: append-only, so there is nothing to add, change or delete."""

from django.contrib import admin
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from memory.admin.base import ReadOnlyAdmin, id_parse
from memory.admin.display import (
    RAW_KEYS_TITLE,
    actor_text,
    change_lines,
    key_name_subquery,
    pretty_json,
)
from memory.models import AuditEvent
from memory.selectors.reads import audit_events_of_memory


class MemoryTouchedFilter(admin.SimpleListFilter):
    """A memory's History: every decision that touched it, including the successor's row that
    superseded it. Reached from the memory's History link, so it offers only the memory given."""

    title = "memory"
    parameter_name = "memory"

    def lookups(self, request, model_admin):
        memory_id = id_parse(self.value() or "")
        return [] if memory_id is None else [(str(memory_id), f"#{memory_id}")]

    def queryset(self, request, queryset):
        memory_id = id_parse(self.value() or "")
        if memory_id is None:
            return queryset
        return queryset.filter(pk__in=audit_events_of_memory(memory_id=memory_id).values("pk"))


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("occurred_at", "actor_line", "action", "target_line", "reason")
    list_display_links = ("occurred_at",)
    list_filter = (MemoryTouchedFilter, "actor", "action", "target_type")
    search_fields = ("reason", "target_repr")
    search_help_text = "Words of the reason or of what it was about"
    date_hierarchy = "occurred_at"
    show_full_result_count = False
    list_per_page = 100
    readonly_fields = ("actor_line", "target_line", "change_table", "before_json", "after_json")
    fieldsets = [
        (None, {"fields": ("occurred_at", "actor_line", "action", "target_line", "reason")}),
        ("变化 · what changed", {"fields": ("change_table",)}),
        (
            RAW_KEYS_TITLE,
            {
                "classes": ("collapse",),
                "fields": (
                    "actor",
                    "key_id",
                    "target_type",
                    "target_id",
                    "request_id",
                    "before_json",
                    "after_json",
                ),
            },
        ),
    ]

    def has_owner_action_permission(self, request) -> bool:
        return False

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(key_name=key_name_subquery())

    @admin.display(description="who", ordering="actor")
    def actor_line(self, event: AuditEvent) -> str:
        return actor_text(
            actor=event.actor,
            target_type=event.target_type,
            key_name=getattr(event, "key_name", "") or "",
        )

    @admin.display(description="about", ordering="target_repr")
    def target_line(self, event: AuditEvent) -> str:
        text = event.target_repr or f"{event.target_type} #{event.target_id}"
        if event.target_id is None:
            return text
        try:
            url = reverse(f"admin:memory_{event.target_type}_change", args=[event.target_id])
        except NoReverseMatch:
            return text
        return format_html('<a href="{}">{}</a>', url, text)

    @admin.display(description="field: before → after")
    def change_table(self, event: AuditEvent) -> str:
        return change_lines(event.before, event.after)

    @admin.display(description="before")
    def before_json(self, event: AuditEvent) -> str:
        return pretty_json(event.before)

    @admin.display(description="after")
    def after_json(self, event: AuditEvent) -> str:
        return pretty_json(event.after)
