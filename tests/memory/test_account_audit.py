"""Accounts made or changed around the owner panel (Django's createsuperuser and changepassword,
the shell) are decisions on record like the panel's own: one row each, naming the OS user who ran
the process, never holding the password or its hash."""

import json
from io import StringIO

import pytest
from django.contrib.auth.management.commands import changepassword
from django.contrib.auth.models import Group, Permission, User
from django.core.management import call_command
from django.urls import reverse

from memory.models import AuditEvent

NEW_PASSWORD = "tide-Pass-9f3k"
OS_USER = "tide-operator"


@pytest.fixture(autouse=True)
def os_user(monkeypatch):
    # getpass.getuser reads LOGNAME before asking the system.
    monkeypatch.setenv("LOGNAME", OS_USER)


def account_events(account: User) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(target_type="user", target_id=account.pk).order_by("id"))


def assert_os_owner_decision(event: AuditEvent, *, action: str) -> None:
    assert (event.actor, event.action) == ("owner", action)
    assert event.reason.endswith(
        f"outside the owner panel (a command or the shell) by OS user {OS_USER}"
    )
    assert len(event.request_id) == 32 and event.key_id is None


def assert_no_secret(event: AuditEvent, account: User) -> None:
    written = json.dumps([event.before, event.after, event.reason], ensure_ascii=False)
    assert NEW_PASSWORD not in written
    assert account.password not in written and account.password.split("$")[-1] not in written


def test_it_audits_createsuperuser_as_the_os_user_without_the_password(db, monkeypatch, client):
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", NEW_PASSWORD)
    call_command("createsuperuser", interactive=False, username="root", email="", stdout=StringIO())
    root = User.objects.get(username="root")
    # Logging in saves last_login: no decision, so still the one row.
    assert client.login(username="root", password=NEW_PASSWORD)

    [event] = account_events(root)
    assert_os_owner_decision(event, action="insert")
    assert event.before is None
    assert event.after == {
        "username": "root",
        "is_active": True,
        "is_staff": True,
        "is_superuser": True,
        "password": "changed",
    }
    assert_no_secret(event, root)


def test_it_records_no_password_for_a_superuser_created_without_one(db):
    call_command("createsuperuser", interactive=False, username="root", email="", stdout=StringIO())
    root = User.objects.get(username="root")

    [event] = account_events(root)
    assert_os_owner_decision(event, action="insert")
    assert event.after["is_superuser"] is True and "password" not in event.after


def test_it_audits_changepassword_as_a_password_change_alone(db, monkeypatch):
    alice = User.objects.create_user("alice", password="an-old-password-1")
    monkeypatch.setattr(changepassword.Command, "_get_pass", lambda self, prompt=None: NEW_PASSWORD)
    call_command("changepassword", "alice", stdout=StringIO())
    alice.refresh_from_db()
    assert alice.check_password(NEW_PASSWORD)

    created, changed = account_events(alice)
    assert_os_owner_decision(created, action="insert")
    assert_os_owner_decision(changed, action="update")
    assert (changed.before, changed.after) == ({}, {"password": "changed"})
    assert_no_secret(changed, alice)


def test_it_audits_powers_granted_and_taken_in_the_shell(db):
    bob = User.objects.create_user("bob", password=None)
    bob.is_staff = bob.is_superuser = True
    bob.save()
    bob.first_name = "Bob"
    bob.save()
    bob.is_active = False
    bob.save(update_fields=["is_active"])

    created, granted, deactivated = account_events(bob)
    assert_os_owner_decision(created, action="insert")
    assert "password" not in created.after
    assert_os_owner_decision(granted, action="update")
    assert (granted.before, granted.after) == (
        {"is_staff": False, "is_superuser": False},
        {"is_staff": True, "is_superuser": True},
    )
    assert (deactivated.before, deactivated.after) == ({"is_active": True}, {"is_active": False})


def test_it_audits_an_unusable_password_set_in_the_shell(db):
    carol = User.objects.create_user("carol", password=NEW_PASSWORD)
    carol.set_unusable_password()
    carol.save()

    created, changed = account_events(carol)
    assert created.after["password"] == "changed"
    assert_os_owner_decision(changed, action="update")
    assert changed.after == {"password": "changed"}
    assert_no_secret(changed, carol)


def test_it_leaves_the_owner_panel_one_row_per_account_decision(owner_client):
    alice = User.objects.create_user("alice", password=NEW_PASSWORD)
    response = owner_client.post(
        reverse("admin:auth_user_change", args=[alice.pk]),
        {
            "username": "alice",
            "is_active": "on",
            "is_staff": "on",
            "is_superuser": "on",
            "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00",
        },
        headers={"X-Request-Id": "req-grant-1"},
    )
    assert response.status_code == 302
    response = owner_client.post(
        reverse("admin:auth_user_password_change", args=[alice.pk]),
        {"usable_password": "true", "password1": "tide-Pass-2x7q", "password2": "tide-Pass-2x7q"},
    )
    assert response.status_code == 302

    created, granted, password = account_events(alice)
    assert_os_owner_decision(created, action="insert")
    assert (granted.request_id, granted.reason) == (
        "req-grant-1",
        "owner panel: changed user alice by owner",
    )
    assert granted.after["is_superuser"] is True
    assert password.reason == "owner panel: changed user alice by owner"
    assert password.after == {"password": "changed"}


def test_it_records_the_first_run_owner_once_and_a_later_changepassword(db, monkeypatch):
    call_command("owner_init", stdout=StringIO())
    owner = User.objects.get(username="owner")
    monkeypatch.setattr(changepassword.Command, "_get_pass", lambda self, prompt=None: NEW_PASSWORD)
    call_command("changepassword", "owner", stdout=StringIO())

    created, changed = account_events(owner)
    assert created.reason == "owner account created on first run"
    assert_os_owner_decision(changed, action="update")
    assert changed.after == {"password": "changed"}
    assert created.request_id != changed.request_id


def test_it_audits_groups_and_permissions_given_and_taken_in_the_shell(db):
    """Before, user.groups.add(...) or group.permissions.add(...) in the shell changed what an
    account may do and left no row."""
    alice = User.objects.create_user("alice", password=NEW_PASSWORD)
    editors = Group.objects.create(name="editors")
    delete_memory = Permission.objects.get(codename="delete_memory")
    before = len(account_events(alice))

    editors.permissions.add(delete_memory)
    alice.groups.add(editors)
    editors.user_set.remove(alice)
    alice.user_permissions.add(delete_memory)
    alice.user_permissions.clear()

    changes = [(event.before, event.after) for event in account_events(alice)[before:]]
    assert changes == [
        ({"groups added": None}, {"groups added": ["editors"]}),
        ({"groups removed": ["editors"]}, {"groups removed": None}),
        ({"user_permissions added": None}, {"user_permissions added": ["memory.delete_memory"]}),
        (
            {"user_permissions removed": ["memory.delete_memory"]},
            {"user_permissions removed": None},
        ),
    ]
    [granted] = AuditEvent.objects.filter(target_type="group", target_id=editors.pk)
    assert granted.after == {"permissions added": ["memory.delete_memory"]}
    assert_os_owner_decision(granted, action="update")


def test_it_leaves_a_group_the_owner_panel_gives_to_the_panels_own_row(owner_client):
    alice = User.objects.create_user("alice", password=NEW_PASSWORD)
    editors = Group.objects.create(name="editors")
    before = len(account_events(alice))

    response = owner_client.post(
        reverse("admin:auth_user_change", args=[alice.pk]),
        {
            "username": "alice",
            "is_active": "on",
            "groups": [editors.pk],
            "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00",
        },
    )

    assert response.status_code == 302
    [event] = account_events(alice)[before:]
    assert "outside the owner panel" not in event.reason
