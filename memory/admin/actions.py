"""The owner's lifecycle actions. Each one calls `memory.services.lifecycle` per selected memory, so
every change is its own transaction with its own audit row (actor owner, reason naming the admin)."""

from django.contrib import admin

from memory.admin.base import owner_apply
from memory.services.lifecycle import memory_expire, memory_restore, memory_set_pinned


def _ids(queryset) -> list[int]:
    return list(queryset.values_list("pk", flat=True))


@admin.action(
    description="Expire (Tideline's delete: kept and audited, no longer recalled)",
    permissions=["owner_action"],
)
def expire(modeladmin, request, queryset) -> None:
    owner_apply(
        request,
        ids=_ids(queryset),
        verb="expired",
        call=lambda pk, **kw: memory_expire(memory_id=pk, **kw),
    )


@admin.action(description="Restore to active", permissions=["owner_action"])
def restore(modeladmin, request, queryset) -> None:
    owner_apply(
        request,
        ids=_ids(queryset),
        verb="restored",
        call=lambda pk, **kw: memory_restore(memory_id=pk, **kw),
    )


@admin.action(description="Pin (never decays, never merged away)", permissions=["owner_action"])
def pin(modeladmin, request, queryset) -> None:
    owner_apply(
        request,
        ids=_ids(queryset),
        verb="pinned",
        call=lambda pk, **kw: memory_set_pinned(memory_id=pk, pinned=True, **kw),
    )


@admin.action(description="Unpin", permissions=["owner_action"])
def unpin(modeladmin, request, queryset) -> None:
    owner_apply(
        request,
        ids=_ids(queryset),
        verb="unpinned",
        call=lambda pk, **kw: memory_set_pinned(memory_id=pk, pinned=False, **kw),
    )


LIFECYCLE_ACTIONS = [expire, restore, pin, unpin]
