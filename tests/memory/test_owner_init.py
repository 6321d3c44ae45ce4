from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from memory.models import AuditEvent


def test_it_creates_the_owner_once_and_says_how_to_log_in(db, client):
    first = StringIO()
    call_command("owner_init", stdout=first)
    output = first.getvalue()
    assert "user:     owner" in output
    password = output.split("password: ")[1].split()[0]
    assert client.login(username="owner", password=password)

    second = StringIO()
    call_command("owner_init", stdout=second)
    assert second.getvalue() == ""
    assert get_user_model().objects.filter(is_superuser=True).count() == 1
    # Adding the owner is a decision on record, like an account the panel adds; no password in it.
    created = AuditEvent.objects.get(target_type="user")
    assert (created.actor, created.action, created.request_id != "") == ("owner", "insert", True)
    assert created.after["username"] == "owner" and created.after["password"] == "changed"
    assert password not in str([created.before, created.after])


@pytest.mark.parametrize(
    ("username", "message"),
    [
        ("", "cannot be blank"),
        ("o" * 151, "at most 150 characters"),
        ("the owner", "Enter a valid username"),
        ("owner!", "Enter a valid username"),
        ("own\x07er", "Enter a valid username"),
    ],
)
def test_it_refuses_a_username_the_login_form_would_not_take(db, username, message):
    with pytest.raises(CommandError, match=message):
        call_command("owner_init", "--username", username, stdout=StringIO())
    assert not get_user_model().objects.exists()


def test_it_names_the_owner_s_own_account_in_the_password_hint(db, client):
    out = StringIO()
    call_command("owner_init", "--username", "keeper", stdout=out)
    assert "changepassword keeper`" in out.getvalue()
    password = out.getvalue().split("password: ")[1].split()[0]
    assert client.login(username="keeper", password=password)
