"""Owner-panel accounts (Django's users and groups) as audited decisions. Django's own admin forms
save them; this records what the owner changed, in the same transaction, like every other
decision. Passwords are recorded as changed, never by value or hash."""

import secrets
from collections.abc import Iterable, Mapping
from datetime import date
from typing import Any

from django.contrib.auth.models import Group, User
from django.db import models, transaction

from memory.models import Actor, AuditAction, AuditEvent
from memory.services.audit import audit_record

# The stored hash, and the two typed copies of a new password on the add and password forms.
SECRET_FIELDS = frozenset({"password", "password1", "password2"})


def _plain(value: Any) -> Any:
    """A form value as the audit log's JSON can hold it: rows by name, a set of rows sorted."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, models.Model):
        return str(value)
    if isinstance(value, Iterable):
        return sorted(str(item) for item in value)
    return str(value)


def account_change_record(
    *,
    account: User | Group,
    created: bool,
    changes: Mapping[str, tuple[Any, Any]],
    reason: str,
) -> AuditEvent:
    """One audit row for an account the owner added or changed; `changes` maps each changed form
    field to its value before and after. The owner panel's request stamps it with its request id
    (OwnerPanelAuditMiddleware)."""
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    for name, (old, new) in changes.items():
        if name in SECRET_FIELDS:
            after["password"] = "changed"
            continue
        before[name] = _plain(old)
        after[name] = _plain(new)
    return audit_record(
        actor=Actor.OWNER,
        action=AuditAction.INSERT if created else AuditAction.UPDATE,
        target=account,
        reason=reason,
        before=None if created else before,
        after=after,
    )


@transaction.atomic
def owner_create(*, username: str) -> str | None:
    """The first run's owner account, with a fresh password returned once (stored only as its
    hash); None when an owner exists already. Recorded like an account the panel adds."""
    if User.objects.filter(is_superuser=True).exists():
        return None
    password = secrets.token_urlsafe(12)
    owner = User.objects.create_superuser(username=username, email="", password=password)
    account_change_record(
        account=owner,
        created=True,
        changes={
            "username": (None, username),
            "is_superuser": (None, True),
            "password": (None, ""),
        },
        reason="owner account created on first run",
    )
    return password
