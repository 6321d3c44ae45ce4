"""The owner's lifecycle actions. Each one calls `memory.services.lifecycle` per selected memory, so
every change is its own transaction with its own audit row (actor owner, reason naming the admin).
The same calls back the buttons on a memory's own page."""

from django.contrib import admin

from memory.admin.base import owner_apply
from memory.services.lifecycle import (
    memory_expire,
    memory_restore,
    memory_set_pinned,
    memory_set_secret,
)

# verb → (what the owner is told was done, the service call for one memory)
LIFECYCLE_CALLS = {
    "expire": ("expired", lambda pk, **kw: memory_expire(memory_id=pk, **kw)),
    "restore": ("restored", lambda pk, **kw: memory_restore(memory_id=pk, **kw)),
    "pin": ("pinned", lambda pk, **kw: memory_set_pinned(memory_id=pk, pinned=True, **kw)),
    "unpin": ("unpinned", lambda pk, **kw: memory_set_pinned(memory_id=pk, pinned=False, **kw)),
    "secret": (
        "marked secret",
        lambda pk, **kw: memory_set_secret(memory_id=pk, secret=True, **kw),
    ),
    "unsecret": (
        "no longer secret",
        lambda pk, **kw: memory_set_secret(memory_id=pk, secret=False, **kw),
    ),
}


def lifecycle_apply(request, *, verb: str, ids: list[int]) -> int:
    done, call = LIFECYCLE_CALLS[verb]
    return owner_apply(request, ids=ids, verb=done, call=call)


def _action(verb: str, description: str):
    def action(modeladmin, request, queryset) -> None:
        lifecycle_apply(request, verb=verb, ids=list(queryset.values_list("pk", flat=True)))

    action.__name__ = verb
    return admin.action(description=description, permissions=["owner_action"])(action)


LIFECYCLE_ACTIONS = [
    _action("expire", "Expire (Tideline's delete: kept and audited, no longer recalled)"),
    _action("restore", "Restore to active"),
    _action("pin", "Pin (never decays, never merged away)"),
    _action("unpin", "Unpin"),
    _action("secret", "Mark secret (shown to the owner only: never to agents or an LLM)"),
    _action("unsecret", "No longer secret"),
]
