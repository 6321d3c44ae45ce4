import json

import pytest
from django.core.management import CommandError, call_command

from memory.services import http_client
from memory.services.errors import InvalidInput
from memory.services.http_client import (
    HttpFailed,
    RetryPolicy,
    endpoint_url_validate,
    http_post_json,
)
from memory.services.llm import LLMUnavailable, llm_complete_json, llm_config_load
from tests.fakes.llm_server import (
    FakeLLM,
    json_answer,
    redirect_answer,
    slow_answer,
    status_answer,
)

NO_RETRY = RetryPolicy(retries=0, statuses=frozenset(), on_timeout=False)


@pytest.fixture
def elsewhere():
    fake = FakeLLM().start()
    yield fake
    fake.stop()


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch):
    monkeypatch.setattr(http_client, "RETRY_BASE_SECONDS", 0.01)


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_it_never_follows_a_redirect_with_the_key(fake_llm, elsewhere, status):
    fake_llm.script(redirect_answer(f"{elsewhere.base_url}/chat/completions", status=status))

    with pytest.raises(LLMUnavailable, match="redirect"):
        llm_complete_json(system="s", user="u")

    assert elsewhere.requests == []
    assert len(fake_llm.requests) == 1


def test_it_reports_the_redirect_in_llm_test_instead_of_ok(fake_llm, elsewhere, capsys):
    fake_llm.script(redirect_answer(f"{elsewhere.base_url}/chat/completions"))

    with pytest.raises(CommandError) as error:
        call_command("llm", "test")

    assert "redirect" in str(error.value) and "sk-test-secret" not in str(error.value)
    assert "LLM ok" not in capsys.readouterr().out
    assert elsewhere.requests == []


def test_it_retries_an_overloaded_llm_but_not_a_server_error(fake_llm):
    fake_llm.script(status_answer(503), json_answer({"ok": True}))
    assert llm_complete_json(system="s", user="u").data == {"ok": True}
    assert len(fake_llm.requests) == 2

    fake_llm.requests.clear()
    fake_llm.script(status_answer(500), json_answer({"ok": True}))
    with pytest.raises(LLMUnavailable, match="HTTP 500"):
        llm_complete_json(system="s", user="u")
    assert len(fake_llm.requests) == 1


def test_it_stops_after_the_bounded_retries(fake_llm, settings):
    settings.TIDELINE_LLM_RETRIES = 2
    fake_llm.script(*[status_answer(503)] * 5)

    with pytest.raises(LLMUnavailable, match="HTTP 503"):
        llm_complete_json(system="s", user="u")

    assert len(fake_llm.requests) == 3


def test_it_does_not_repeat_a_timed_out_completion(fake_llm):
    fake_llm.script(slow_answer(1.0), slow_answer(1.0))
    with pytest.raises(LLMUnavailable, match="timed out"):
        llm_complete_json(system="s", user="u", timeout=0.3)
    assert len(fake_llm.requests) == 1


def test_it_reports_an_unreachable_service_without_the_key(elsewhere):
    url = elsewhere.base_url
    elsewhere.stop()
    with pytest.raises(HttpFailed, match="could not be reached") as error:
        http_post_json(url=url, body={}, api_key="sk-hidden", timeout=1, policy=NO_RETRY)
    assert "sk-hidden" not in str(error.value)


@pytest.mark.parametrize(
    "url",
    [
        "http://api.example.com/v1",
        "http://10.0.0.8/v1",
        "ftp://127.0.0.1/v1",
        "not a url",
        "https://user:sk-in-url@api.example.com/v1",
        "https://:sk-in-url@api.example.com/v1",
        "http://127.0.0.1:99999/v1",
        None,
        42,
    ],
)
def test_it_refuses_urls_that_would_leak_a_key(url):
    with pytest.raises(InvalidInput) as error:
        endpoint_url_validate(url, what="base_url")
    assert "sk-in-url" not in str(error.value)


@pytest.mark.parametrize(
    "url", ["https://api.example.com/v1/", "http://127.0.0.1:11434/v1", "http://[::1]:8080"]
)
def test_it_accepts_https_and_loopback_http(url):
    assert endpoint_url_validate(url, what="base_url") == url.rstrip("/")


def test_it_refuses_credentials_in_the_base_url_of_llm_set(settings, tmp_path, capsys):
    settings.TIDELINE_LLM_CONFIG_FILE = tmp_path / "llm.json"

    with pytest.raises(CommandError) as error:
        call_command(
            "llm", "set", "--base-url", "https://me:pw-secret@api.example.com/v1", "--model", "m",
            "--no-api-key",
        )  # fmt: skip

    assert "credentials" in str(error.value) and "pw-secret" not in str(error.value)
    assert "pw-secret" not in capsys.readouterr().out
    assert not (tmp_path / "llm.json").exists()


BAD_CONFIGS = {
    "null base_url": {"base_url": None, "model": "m", "api_key": "sk-file-secret"},
    "numeric base_url": {"base_url": 8080, "model": "m", "api_key": "sk-file-secret"},
    "missing model": {"base_url": "https://api.example.com/v1", "api_key": "sk-file-secret"},
    "empty model": {"base_url": "https://api.example.com/v1", "model": " ", "api_key": "k"},
    "numeric key": {"base_url": "https://api.example.com/v1", "model": "m", "api_key": 12345},
    "credentials in url": {"base_url": "https://u:sk-file-secret@h.example/v1", "model": "m"},
    "not an object": ["https://api.example.com/v1"],
}


@pytest.fixture
def owner_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("owner", "o@example.com", None))
    return client


@pytest.fixture(params=sorted(BAD_CONFIGS))
def bad_config(request, settings, tmp_path):
    path = tmp_path / "llm.json"
    path.write_text(json.dumps(BAD_CONFIGS[request.param]))
    settings.TIDELINE_LLM_CONFIG_FILE = path
    return path


def test_it_gives_one_clear_error_for_a_bad_config_file(db, bad_config, capsys):
    with pytest.raises(CommandError) as error:
        call_command("llm", "test")

    message = str(error.value)
    assert str(bad_config) in message and "manage.py llm set" in message
    assert "sk-file-secret" not in message and "12345" not in message
    assert llm_config_load() is None
    with pytest.raises(LLMUnavailable):
        llm_complete_json(system="s", user="u")


def test_it_keeps_every_llm_user_working_with_a_bad_config_file(db, bad_config, owner_client):
    call_command("dream", "--dry-run")
    call_command("stats")

    page = owner_client.get("/admin/engine-status/")

    assert page.status_code == 200
    assert str(bad_config) in page.content.decode()
    assert "sk-file-secret" not in page.content.decode()


def test_it_reads_a_bad_config_file_as_unreadable_not_a_crash(db, settings, tmp_path):
    path = tmp_path / "llm.json"
    path.write_text("{not json")
    settings.TIDELINE_LLM_CONFIG_FILE = path

    with pytest.raises(CommandError, match="not readable JSON"):
        call_command("llm", "test")
