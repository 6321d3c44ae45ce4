"""What every page of the owner panel shares: nothing is deleted, and nothing is written around the
services (which are what keep the audit log complete)."""

from django.contrib import admin, messages
from django.http import HttpRequest

from memory.models import Actor
from memory.services.errors import TidelineError


class NoDeleteAdmin(admin.ModelAdmin):
    """Tideline never physically deletes: the owner's "delete" is the audited expire action.
    Other apps registering models in the owner panel should build on this class too."""

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


class ReadOnlyAdmin(NoDeleteAdmin):
    """A page the owner reads. Changes go through actions that call a service, so each one is one
    transaction with one audit row; a raw form save would change data with no record of why."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_owner_action_permission(self, request: HttpRequest) -> bool:
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.change_{opts.model_name}")


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


def owner_reason(request: HttpRequest, what: str) -> str:
    return f"owner panel: {what} by {request.user.get_username()}"


def owner_apply(request: HttpRequest, *, ids: list[int], verb: str, call) -> int:
    """Run one service call per selected row, each its own audited transaction. A refusal (already
    expired, not restorable, …) becomes a message on the page, never a 500, and does not stop the
    rest of the selection."""
    done = 0
    for pk in ids:
        try:
            call(pk, actor=Actor.OWNER, reason=owner_reason(request, verb))
        except TidelineError as exc:
            messages.error(request, f"#{pk}: {exc}")
        else:
            done += 1
    if done:
        messages.success(request, f"{verb}: {done} row(s); each change is in the audit log.")
    return done
