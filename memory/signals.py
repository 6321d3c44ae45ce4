"""Accounts saved around the owner panel (Django's createsuperuser and changepassword, the shell,
`./tideline manage`) are decisions too. Django gives those paths no hook but the User model's save
signals, so these receivers record them through memory.services.accounts.

Inside an audit context the operation that opened it records its own decisions (the owner panel's
account pages, with the form's whole diff and the logged-in owner; owner_create, with its first-run
reason), so the receivers stay out and each decision stays one row."""

from typing import Any

from django.contrib.auth.models import User

from memory.services.accounts import ACCESS_FIELDS, account_access_stored, account_save_record
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
