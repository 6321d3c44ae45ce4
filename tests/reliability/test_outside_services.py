"""The LLM endpoint misbehaves or its config is broken: real commands in real processes say so
clearly, never send the key elsewhere, and never crash."""

import json
import os
import stat

import pytest

from tests.fakes.llm_server import FakeLLM, redirect_answer

BAD_FILES = {
    "null base_url": {"base_url": None, "model": "m", "api_key": "sk-reliability-secret"},
    "numeric base_url": {"base_url": 443, "model": "m", "api_key": "sk-reliability-secret"},
    "missing model": {"base_url": "https://api.example.com/v1", "api_key": "sk-reliability-secret"},
}


@pytest.fixture
def fakes():
    endpoint, elsewhere = FakeLLM().start(), FakeLLM().start()
    yield endpoint, elsewhere
    endpoint.stop()
    elsewhere.stop()


def test_it_reports_a_redirect_and_keeps_the_key_home(shared_instance, fakes):
    instance = shared_instance
    endpoint, elsewhere = fakes
    saved = instance.manage(
        "llm", "set", "--base-url", endpoint.base_url, "--model", "fake", "--api-key-stdin",
        input="sk-reliability-secret\n",
    )  # fmt: skip
    assert saved.returncode == 0, saved.stderr
    config = instance.data_dir / "llm.json"
    assert stat.S_IMODE(os.stat(config).st_mode) == 0o600
    endpoint.script(redirect_answer(f"{elsewhere.base_url}/chat/completions"))

    tested = instance.manage("llm", "test")

    assert tested.returncode == 1
    assert "redirect" in tested.stderr and "LLM ok" not in tested.stdout
    assert "sk-reliability-secret" not in tested.stdout + tested.stderr
    assert len(endpoint.requests) == 1 and elsewhere.requests == []


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_it_names_a_bad_config_file_in_every_command(shared_instance, name):
    instance = shared_instance
    config = instance.data_dir / "llm.json"
    config.write_text(json.dumps(BAD_FILES[name]))

    tested = instance.manage("llm", "test")
    dry_run = instance.manage("dream", "--dry-run")
    checked = instance.manage("check")

    assert tested.returncode == 1 and str(config) in tested.stderr
    assert "Traceback" not in tested.stderr
    assert dry_run.returncode == 0, dry_run.stderr
    assert checked.returncode == 0 and "tideline.W002" in checked.stderr
    for result in (tested, dry_run, checked):
        assert "sk-reliability-secret" not in result.stdout + result.stderr
