import pytest

from tideline_site import edge


@pytest.fixture(autouse=True)
def fresh_limiters(settings):
    edge.LIMITERS.clear()
    settings.TIDELINE_LOGIN_FAILURES = 5
    yield
    edge.LIMITERS.clear()


@pytest.fixture
def owner(django_user_model):
    return django_user_model.objects.create_superuser("owner", "o@example.com", "right-pw")


def login(client, username: str, password: str, address: str = "203.0.113.7"):
    return client.post(
        "/admin/login/",
        {"username": username, "password": password, "next": "/admin/"},
        REMOTE_ADDR=address,
    )


def test_it_answers_429_after_the_failed_login_limit(client, owner):
    statuses = [login(client, "owner", f"guess-{n}").status_code for n in range(8)]

    assert statuses == [200] * 5 + [429] * 3
    refused = login(client, "owner", "right-pw")
    assert refused.status_code == 429  # even the right password waits out the window
    assert int(refused["Retry-After"]) >= 1 and "too many failed logins" in refused.json()["detail"]


def test_it_limits_one_user_name_across_addresses(client, owner):
    statuses = [
        login(client, "owner", "guess", address=f"198.51.100.{n}").status_code for n in range(7)
    ]
    assert statuses == [200] * 5 + [429] * 2


def test_it_lets_a_correct_login_through_below_the_limit(client, owner):
    for n in range(3):
        login(client, "owner", f"guess-{n}")
    assert login(client, "owner", "right-pw").status_code == 302
