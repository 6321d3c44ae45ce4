import os
import stat
import time

import pytest

from memory.services.errors import InvalidInput
from memory.services.llm import (
    LLM_RESPONSE_MAX_BYTES,
    TOKEN_COUNT_MAX,
    LLMUnavailable,
    llm_complete_json,
    llm_config_load,
    llm_config_save,
)
from tests.fakes.llm_server import Answer, json_answer, slow_answer, status_answer, text_answer

DEEP_JSON = '{"a": ' + "[" * 200_000 + "]" * 200_000 + "}"


def test_it_returns_the_json_object_and_token_use(fake_llm):
    fake_llm.script(json_answer({"verdict": "keep"}))
    reply = llm_complete_json(system="judge", user="a memory")
    assert reply.data == {"verdict": "keep"}
    assert reply.total_tokens == 18
    assert fake_llm.requests[0]["headers"]["Authorization"] == "Bearer sk-test-secret"


@pytest.mark.parametrize(
    "answer", [text_answer("not json at all"), text_answer("[1, 2]"), status_answer(500)]
)
def test_it_raises_unavailable_on_bad_answers(fake_llm, answer):
    fake_llm.script(answer)
    with pytest.raises(LLMUnavailable):
        llm_complete_json(system="judge", user="a memory")


def test_it_raises_unavailable_on_timeout(fake_llm):
    fake_llm.script(slow_answer(1.5))
    with pytest.raises(LLMUnavailable):
        llm_complete_json(system="judge", user="a memory", timeout=0.3)


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 10**30, "completion_tokens": 2**62},
        {"prompt_tokens": TOKEN_COUNT_MAX + 1, "completion_tokens": True},
    ],
)
def test_it_treats_an_absurd_token_count_as_unreported(fake_llm, usage):
    fake_llm.script(Answer(content='{"ok": true}', usage=usage))
    reply = llm_complete_json(system="s", user="u")
    assert reply.data == {"ok": True}
    assert (reply.prompt_tokens, reply.completion_tokens) == (0, 0)


@pytest.mark.parametrize(
    "answer",
    [Answer(body=DEEP_JSON.encode()), text_answer(DEEP_JSON)],
    ids=["http-body", "message-content"],
)
def test_it_raises_unavailable_on_json_nested_too_deep(fake_llm, answer):
    fake_llm.script(answer)
    with pytest.raises(LLMUnavailable, match="not"):
        llm_complete_json(system="s", user="u")


def test_it_ends_a_dripping_answer_at_the_timeout_of_the_whole_request(fake_llm):
    # About 200 bytes a twentieth of a second apart: each read is quick, the answer takes 10 s.
    fake_llm.script(Answer(content='{"ok": true}', drip=0.05))
    started = time.monotonic()
    with pytest.raises(LLMUnavailable, match="timed out"):
        llm_complete_json(system="s", user="u", timeout=1.0)
    assert time.monotonic() - started < 2.0


def test_it_refuses_an_answer_over_the_size_cap(fake_llm):
    fake_llm.script(json_answer({"notes": "x" * LLM_RESPONSE_MAX_BYTES}))
    with pytest.raises(LLMUnavailable, match=f"more than {LLM_RESPONSE_MAX_BYTES} bytes"):
        llm_complete_json(system="s", user="u")


def test_it_raises_unavailable_without_config(db):
    assert llm_config_load() is None
    with pytest.raises(LLMUnavailable, match="no LLM"):
        llm_complete_json(system="s", user="u")


def test_it_stores_the_key_in_a_private_file(db, settings, tmp_path):
    settings.TIDELINE_LLM_CONFIG_FILE = tmp_path / "llm.json"
    llm_config_save(base_url="https://api.example.com/v1", model="m", api_key="sk-secret")
    mode = stat.S_IMODE(os.stat(tmp_path / "llm.json").st_mode)
    assert mode == 0o600
    assert "sk-secret" not in str(llm_config_load().public())


@pytest.mark.parametrize(
    "url", ["http://api.example.com/v1", "ftp://127.0.0.1/v1", "not a url", "http://10.0.0.8/v1"]
)
def test_it_refuses_plain_http_to_remote_hosts(settings, tmp_path, url):
    settings.TIDELINE_LLM_CONFIG_FILE = tmp_path / "llm.json"
    with pytest.raises(InvalidInput):
        llm_config_save(base_url=url, model="m", api_key="k")
    assert not (tmp_path / "llm.json").exists()


def test_it_allows_plain_http_to_loopback(db, settings, tmp_path):
    settings.TIDELINE_LLM_CONFIG_FILE = tmp_path / "llm.json"
    config = llm_config_save(base_url="http://127.0.0.1:11434/v1", model="qwen", api_key="")
    assert config.base_url == "http://127.0.0.1:11434/v1"
