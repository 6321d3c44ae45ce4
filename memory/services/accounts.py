"""Owner-panel accounts (Django's users and groups) as audited decisions. Django's own admin forms
save them; this records what the owner changed, in the same transaction, like every other
decision. An account saved anywhere else (createsuperuser, changepassword, the shell) is recorded
by the User save receivers (memory/signals.py). Passwords are recorded as changed, never by value
or hash."""

import getpass
import os
import secrets
from collections.abc import Iterable, Mapping
from datetime import date
from typing import Any

from django.contrib.auth.models import Group, User
from django.db import models, transaction

from memory.models import Actor, AuditAction, AuditEvent
from memory.services.audit import audit_context, audit_record

# The stored hash, and the two typed copies of a new password on the add and password forms.
SECRET_FIELDS = frozenset({"password", "password1", "password2"})
# What makes an account a way in to every memory: whether it may log in, its powers, and its
# password (compared by stored hash, which no audit row holds).
ACCESS_FIELDS = ("is_active", "is_staff", "is_superuser", "password")


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


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        # A container's uid often has no name; the number still says who ran the command.
        return f"uid {os.getuid()}"


def account_access_stored(*, account: User, using: str) -> dict[str, Any] | None:
    """The account's access as the database holds it, read before a save overwrites it; None for
    an account not saved yet."""
    if account.pk is None:
        return None
    return User.objects.using(using).filter(pk=account.pk).values(*ACCESS_FIELDS).first()


def account_save_record(*, account: User, stored: Mapping[str, Any] | None) -> AuditEvent | None:
    """One audit row for an account saved outside any operation that records its own decisions
    (createsuperuser, changepassword, the shell), given its access as stored before the save (None:
    it was created). The owner is whoever runs the process, named by their OS user; a save that
    changes no access (a new email, say) writes nothing."""
    if stored is None:
        changes: dict[str, tuple[Any, Any]] = {"username": (None, account.get_username())}
        changes |= {
            name: (None, getattr(account, name)) for name in ACCESS_FIELDS if name != "password"
        }
        # An unusable password (createsuperuser --noinput without one) opens no door.
        if account.has_usable_password():
            changes["password"] = (None, "")
    else:
        changes = {
            name: (stored[name], getattr(account, name))
            for name in ACCESS_FIELDS
            if stored[name] != getattr(account, name)
        }
    if not changes:
        return None
    verb = "created" if stored is None else "changed"
    return account_change_record(
        account=account,
        created=stored is None,
        changes=changes,
        reason=(
            f"account {account.get_username()} {verb} outside the owner panel "
            f"(a command or the shell) by OS user {_os_user()}"
        ),
    )


def account_links_record(
    *, account: User | Group, field: str, added: list[str], removed: list[str]
) -> AuditEvent | None:
    """One audit row for the groups or permissions an account gained or lost outside any
    operation that records its own decisions (the shell, a script under `./tideline manage`): a
    group can carry every permission a superuser has."""
    changes: dict[str, tuple[Any, Any]] = {}
    if added:
        changes[f"{field} added"] = (None, sorted(added))
    if removed:
        changes[f"{field} removed"] = (sorted(removed), None)
    if not changes:
        return None
    name = account.get_username() if isinstance(account, User) else account.name
    return account_change_record(
        account=account,
        created=False,
        changes=changes,
        reason=(
            f"{field} of {name} changed outside the owner panel (a command or the shell) by OS "
            f"user {_os_user()}"
        ),
    )


@transaction.atomic
def owner_create(*, username: str) -> str | None:
    """The first run's owner account, with a fresh password returned once (stored only as its
    hash); None when an owner exists already. Recorded like an account the panel adds."""
    if User.objects.filter(is_superuser=True).exists():
        return None
    password = secrets.token_urlsafe(12)
    # The row below names the first run; inside an audit context the save receivers leave the
    # record to it, so the one decision is one row.
    with audit_context(actor=Actor.OWNER):
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
