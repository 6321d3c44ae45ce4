"""What every page of the owner panel shares: nothing is deleted, nothing is written around the
services (which are what keep the audit log complete), and no input from a URL or a tampered form
makes a page fail with a 500."""

import re
from contextlib import nullcontext

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import FieldDoesNotExist
from django.db import DataError, NotSupportedError, connections, models, router, transaction
from django.db.models.constants import LOOKUP_SEP
from django.http import HttpRequest

from memory.models import Actor
from memory.services.errors import TidelineError

# The largest id any table here holds (a signed 64-bit key); a larger one names no row.
ID_MAX = 2**63 - 1
# The array indexes a JSON path takes on both databases: SQLite's paths have no negative index,
# and PostgreSQL's `->` takes a 32-bit integer.
JSON_INDEX_MAX = 2**31 - 1
# These take a list of keys; from a URL, the key list is the characters of the value.
JSON_KEY_LIST_LOOKUPS = ("has_keys", "has_any_keys")


def id_parse(text: str) -> int | None:
    """An id typed in a URL or posted by a form, or None. `str.isdigit` and `int` both take more
    than ASCII digits ("²" is a digit to one and not the other), and a number past the key's range
    fails in the database driver instead of matching nothing."""
    if not (text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if value <= ID_MAX else None


def json_filter_refusal(model: type[models.Model], name: str, values: list[str]) -> str | None:
    """Why a URL filter into a JSON field cannot run on one of the databases, or None. Django
    reads a segment after the field that is a number as an array index (`meta__-1`), which
    SQLite's paths refuse below 0 and PostgreSQL's past 32 bits, and an empty key list is no SQL
    on SQLite. Each fails only when the query runs, as the error a broken database also raises."""
    parts = name.split(LOOKUP_SEP)
    opts = model._meta
    for at, part in enumerate(parts):
        try:
            field = opts.get_field(part)
        except FieldDoesNotExist:
            return None
        if isinstance(field, models.JSONField):
            path = parts[at + 1 :]
            break
        if field.related_model is None:
            return None
        opts = field.related_model._meta
    else:
        return None
    for key in path:
        try:
            index = int(key)
        except ValueError:
            continue
        if not 0 <= index <= JSON_INDEX_MAX:
            return f"{name}: {key!r} is no JSON array index"
    if path and path[-1] in JSON_KEY_LIST_LOOKUPS and not all(values):
        return f"{name}: no key given"
    return None


class OwnerPanelMixin:
    """Shared by every ModelAdmin on the owner panel, Django's account pages included."""

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def get_object(self, request: HttpRequest, object_id: str, from_field=None):
        """Django turns an id that is not a number into "no such row", but passes one past the
        key's range on to the database driver, which fails. Every table here has an integer key."""
        if from_field is None and id_parse(object_id) is None:
            return None
        return super().get_object(request, object_id, from_field)

    def get_changelist_instance(self, request: HttpRequest):
        """Django checks that a filter in the URL names a field, not that its value fits one: an id
        past the key's range, a year datetime cannot hold, or a lookup this database does not have
        (SQLite has no `contains` on JSON) fails only when the list is counted. That is bad input,
        so it gets Django's own answer to bad filters, the `?e=1` redirect."""
        # Every value of a repeated parameter is a filter of its own (Django ORs them).
        for name, values in request.GET.lists():
            # SQLite runs a regex filter through Python's `re`, and a pattern it cannot compile
            # fails the query as an OperationalError, which is also how a broken database fails.
            if name.endswith(("__regex", "__iregex")):
                for value in values:
                    try:
                        re.compile(value)
                    except re.error as exc:
                        raise IncorrectLookupParameters(exc) from exc
            if refusal := json_filter_refusal(self.model, name, values):
                raise IncorrectLookupParameters(refusal)
        using = router.db_for_read(self.model)
        # Inside a transaction (tests; ATOMIC_REQUESTS) PostgreSQL refuses every later statement
        # after a failed one, so the count gets a savepoint to roll back to. In autocommit there is
        # nothing to break, and SQLite's IMMEDIATE mode would make a BEGIN take the write lock.
        in_transaction = connections[using].in_atomic_block
        try:
            with transaction.atomic(using=using) if in_transaction else nullcontext():
                return super().get_changelist_instance(request)
        except (DataError, NotSupportedError, OverflowError, ValueError) as exc:
            raise IncorrectLookupParameters(exc) from exc

    def response_action(self, request: HttpRequest, queryset):
        """Django filters the selection by the posted ids as they come, so a tampered one fails in
        the database. Every table here has an integer key: anything else selects no row, and the
        whole selection is refused rather than acted on in part."""
        for text in request.POST.getlist(ACTION_CHECKBOX_NAME):
            if id_parse(text) is None:
                messages.error(request, f"{text!r} is not a row id; nothing was changed.")
                return None
        return super().response_action(request, queryset)


class NoDeleteAdmin(OwnerPanelMixin, admin.ModelAdmin):
    """Tideline never physically deletes: the owner's "delete" is the audited expire action.
    Other apps registering models in the owner panel should build on this class too."""


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
