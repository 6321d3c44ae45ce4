from io import StringIO

from django.contrib.auth import get_user_model
from django.core.management import call_command


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
