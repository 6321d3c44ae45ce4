"""Accounts saved around the owner panel (Django's createsuperuser and changepassword, the shell,
`./tideline manage`) are decisions too. Django gives those paths no hook but the User model's save
signals, so these receivers record them through memory.services.accounts.

Inside an audit context the operation that opened it records its own decisions (the owner panel's
account pages, with the form's whole diff and the logged-in owner; owner_create, with its first-run
reason), so the receivers stay out and each decision stays one row."""

from typing import Any

from django.contrib.auth.models import Group, Permission, User
from django.db import models

from memory.services.accounts import (
    ACCESS_FIELDS,
    account_access_stored,
    account_links_record,
    account_save_record,
)
from memory.services.audit import audit_context_current

# The access an account had before this save, kept on the instance from pre_save to post_save,
# when the old password hash is gone from the row.
_STORED_ATTR = "_tideline_access_stored"
# Not compared before this save (a login, or a save inside an audit context).
_UNSEEN = object()


def user_access_before_save(
    sender: type[User],
    instance: User,
    using: str,
    update_fields: frozenset[str] | None,
    **kwargs: Any,
) -> None:
    # Cleared first, so a save that failed before post_save cannot lend this one its old state.
    instance.__dict__.pop(_STORED_ATTR, None)
    if audit_context_current() is not None:
        return
    # A login saves only last_login: nothing to compare, and no query on every login.
    if update_fields is not None and update_fields.isdisjoint(ACCESS_FIELDS):
        return
    instance.__dict__[_STORED_ATTR] = account_access_stored(account=instance, using=using)


def user_access_after_save(sender: type[User], instance: User, **kwargs: Any) -> None:
    stored = instance.__dict__.pop(_STORED_ATTR, _UNSEEN)
    if stored is _UNSEEN:
        return
    account_save_record(account=instance, stored=stored)


def account_links_changed(
    sender: type[models.Model],
    instance: models.Model,
    action: str,
    reverse: bool,
    model: type[models.Model],
    pk_set: set[int] | None,
    **kwargs: Any,
) -> None:
    """Groups and permissions added to or taken from an account (user.groups.add(...),
    group.permissions.remove(...), group.user_set.add(...), a clear): access changes too."""
    if audit_context_current() is not None or action not in LINK_ACTIONS:
        return
    field = LINK_FIELDS[sender]
    if action == "pre_clear":
        pk_set = set(
            getattr(instance, _link_manager(field, reverse=reverse)).values_list("pk", flat=True)
        )
    if not pk_set:
        return
    added = action == "post_add"
    if not reverse:
        names = [_link_name(linked) for linked in model.objects.filter(pk__in=pk_set)]
        account_links_record(
            account=instance,
            field=field,
            added=names if added else [],
            removed=[] if added else names,
        )
        return
    name = [_link_name(instance)]
    for account in model.objects.filter(pk__in=pk_set):
        account_links_record(
            account=account, field=field, added=name if added else [], removed=[] if added else name
        )


LINK_ACTIONS = ("post_add", "post_remove", "pre_clear")
# The through model of each link an account's access rides on, by the name of its field.
LINK_FIELDS: dict[type[models.Model], str] = {
    User.groups.through: "groups",
    User.user_permissions.through: "user_permissions",
    Group.permissions.through: "permissions",
}
_REVERSE_MANAGERS = {
    "groups": "user_set",
    "user_permissions": "user_set",
    "permissions": "group_set",
}


def _link_manager(field: str, *, reverse: bool) -> str:
    return _REVERSE_MANAGERS[field] if reverse else field


def _link_name(linked: models.Model) -> str:
    if isinstance(linked, Permission):
        return f"{linked.content_type.app_label}.{linked.codename}"
    return str(linked)
