"""Who and where memories belong to: scopes, profiles (with their current facts), tags, API keys."""

from django.contrib import admin
from django.db.models import Count
from django.utils.html import format_html_join

from memory.admin.base import ReadOnlyAdmin, ReadOnlyInline
from memory.admin.display import RAW_KEYS_TITLE
from memory.models import ApiKey, Fact, MemoryStatus, NarrativeTag, Profile, Scope


@admin.register(Scope)
class ScopeAdmin(ReadOnlyAdmin):
    list_display = ("label", "kind", "workspace", "memory_count", "created_at")
    list_filter = ("kind",)
    search_fields = ("label", "key")
    fieldsets = [
        (None, {"fields": ("label", "kind", "workspace", "created_at")}),
        (RAW_KEYS_TITLE, {"classes": ("collapse",), "fields": ("key",)}),
    ]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(memory_total=Count("memories"))

    @admin.display(description="memories", ordering="memory_total")
    def memory_count(self, scope: Scope) -> int:
        return scope.memory_total


class CurrentFactInline(ReadOnlyInline):
    """A profile's current facts are its profile."""

    model = Fact
    fk_name = "profile"
    fields = ("summary", "kind", "value", "valid_from")
    readonly_fields = fields
    verbose_name = "current fact"
    verbose_name_plural = "当前事实 · current facts"

    def get_queryset(self, request):
        return super().get_queryset(request).filter(status=MemoryStatus.ACTIVE)


@admin.register(Profile)
class ProfileAdmin(ReadOnlyAdmin):
    list_display = ("name", "kind", "scope", "pinned", "updated_at")
    list_filter = ("kind", "scope", "pinned")
    list_select_related = ("scope",)
    search_fields = ("name", "description")
    readonly_fields = ("aliases_line",)
    inlines = [CurrentFactInline]
    fieldsets = [
        (None, {"fields": ("name", "kind", "scope", "description", "aliases_line", "pinned")}),
        (RAW_KEYS_TITLE, {"classes": ("collapse",), "fields": ("created_at", "updated_at")}),
    ]

    @admin.display(description="aliases")
    def aliases_line(self, profile: Profile) -> str:
        return " · ".join(str(alias) for alias in profile.aliases) or "—"


@admin.register(NarrativeTag)
class NarrativeTagAdmin(ReadOnlyAdmin):
    """Which narratives share a tag (what recurrence counts)."""

    list_display = ("tag", "narrative")
    list_select_related = ("narrative",)
    search_fields = ("tag",)
    fields = ("tag", "narrative")


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdmin):
    """Keys are minted by a management command, which shows the secret once. Only the prefix is
    shown here; the hash never is."""

    list_display = (
        "name",
        "prefix_line",
        "scope_labels",
        "include_global",
        "can_write",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    list_filter = ("can_write", "include_global")
    search_fields = ("name", "prefix")
    readonly_fields = ("prefix_line", "scope_labels")
    fields = (
        "name",
        "prefix_line",
        "scope_labels",
        "include_global",
        "can_write",
        "created_at",
        "last_used_at",
        "revoked_at",
    )

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("scopes")

    @admin.display(description="key starts with", ordering="prefix")
    def prefix_line(self, key: ApiKey) -> str:
        return f"{key.prefix}…"

    @admin.display(description="scopes")
    def scope_labels(self, key: ApiKey) -> str:
        labels = [(scope.label,) for scope in key.scopes.all()]
        return format_html_join(" · ", "{}", labels) if labels else "—"
