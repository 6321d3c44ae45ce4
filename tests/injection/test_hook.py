"""The Claude Code hook, run as Claude Code runs it: a separate process fed JSON on stdin."""

import json
import os
import subprocess
import sys

import pytest
from django.conf import settings

from injection.services.access import apikey_create
from memory.models import ContextTurn, Session
from tests.injection.conftest import narrative_seed, weights_set

HOOK = settings.BASE_DIR / "injection" / "hooks" / "claude_code.py"


def run_hook(stdin: bytes, *, env: dict, args=()) -> dict:
    completed = subprocess.run(
        [sys.executable, "-I", str(HOOK), *args],
        input=stdin,
        capture_output=True,
        env={"PATH": os.environ["PATH"], **env},
        timeout=30,
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


@pytest.fixture
def hook_env(live_server, project):
    _, key = apikey_create(name="claude code", scope_ids=[project.pk])
    # The first request of a fresh server loads the embedder and jieba; allow for it under load.
    return {"TIDELINE_URL": live_server.url, "TIDELINE_API_KEY": key, "TIDELINE_HOOK_TIMEOUT": "60"}


def test_it_injects_the_relevant_memory_on_user_prompt_submit(hook_env, project, project_dir):
    narrative_seed(project, "边界检查放在解析器里，不放在调用方")
    event = {
        "hook_event_name": "UserPromptSubmit",
        "session_id": "cc-1",
        "cwd": str(project_dir),
        "prompt": "边界应该在哪里检查？",
    }

    output = run_hook(json.dumps(event).encode(), env=hook_env)

    specific = output["hookSpecificOutput"]
    assert specific["hookEventName"] == "UserPromptSubmit"
    assert "边界检查放在解析器里" in specific["additionalContext"]
    assert specific["additionalContext"].startswith("<tideline-memory")
    # The prompt itself is recorded by the Stop hook, under its transcript uuid.
    assert not ContextTurn.objects.filter(session__external_id="cc-1").exists()


def test_it_injects_the_session_start_block(hook_env, project, project_dir):
    weights_set({narrative_seed(project, "we moved to trigram search"): 0.9})
    event = {
        "hook_event_name": "SessionStart",
        "session_id": "cc-2",
        "cwd": str(project_dir),
        "source": "startup",
    }

    output = run_hook(json.dumps(event).encode(), env=hook_env)

    assert output["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert "we moved to trigram search" in output["hookSpecificOutput"]["additionalContext"]
    assert Session.objects.get(external_id="cc-2").runtime == "claude_code"


def test_it_syncs_new_transcript_turns_on_stop(hook_env, project_dir, tmp_path):
    lines = [
        {
            "type": "user",
            "uuid": "u1",
            "timestamp": "2026-11-30T10:00:00Z",
            "message": {"role": "user", "content": "please fix the parser"},
        },
        {
            "type": "assistant",
            "uuid": "a1",
            "timestamp": "2026-11-30T10:00:05Z",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Fixed it."},
                    {"type": "tool_use", "name": "Edit"},
                ],
            },
        },
        {
            "type": "user",
            "uuid": "t1",
            "message": {"role": "user", "content": [{"type": "tool_result", "content": "ok"}]},
        },
        {
            "type": "assistant",
            "uuid": "s1",
            "isSidechain": True,
            "message": {"role": "assistant", "content": "subagent chatter"},
        },
        {
            "type": "user",
            "uuid": "c1",
            "message": {
                "role": "user",
                "content": "<command-name>/clear</command-name>\n<command-message>clear</command-message>",
            },
        },
        {
            "type": "user",
            "uuid": "c2",
            "message": {"role": "user", "content": "<local-command-stdout></local-command-stdout>"},
        },
        "not json at all",
    ]
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(
        "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)
    )
    event = json.dumps(
        {
            "hook_event_name": "Stop",
            "session_id": "cc-3",
            "cwd": str(project_dir),
            "transcript_path": str(transcript),
        }
    ).encode()

    first = run_hook(event, env=hook_env)
    run_hook(event, env=hook_env)

    assert first == {"suppressOutput": True}
    turns = list(ContextTurn.objects.filter(session__external_id="cc-3").order_by("seq"))
    assert [(t.role, t.content) for t in turns] == [
        ("user", "please fix the parser"),
        ("assistant", "Fixed it."),
    ]
    assert turns[0].occurred_at.isoformat() == "2026-11-30T10:00:00+00:00"


def test_it_prints_the_servers_reason_on_stderr(hook_env, other_project, other_dir):
    event = {"hook_event_name": "SessionStart", "session_id": "cc-4", "cwd": str(other_dir)}
    completed = subprocess.run(
        [sys.executable, "-I", str(HOOK)],
        input=json.dumps(event),
        capture_output=True,
        env={"PATH": os.environ["PATH"], **hook_env},
        timeout=30,
        text=True,
    )

    assert completed.returncode == 0
    assert json.loads(completed.stdout)["hookSpecificOutput"]["additionalContext"] == ""
    assert "403" in completed.stderr
    assert "may not use the scope" in completed.stderr


@pytest.mark.parametrize("stdin", [b"", b"garbage \xff\xfe", b"[1, 2]", b'{"prompt": 5}'])
def test_it_prints_valid_json_on_garbage_input(stdin):
    output = run_hook(
        stdin, env={"TIDELINE_API_KEY": "tl_x_y", "TIDELINE_URL": "http://127.0.0.1:9"}
    )

    assert output == {
        "hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": ""}
    }


@pytest.mark.parametrize("event", ["SessionStart", "UserPromptSubmit"])
def test_it_prints_valid_json_when_tideline_is_down(event):
    payload = json.dumps({"hook_event_name": event, "session_id": "s", "prompt": "hello there"})

    output = run_hook(
        payload.encode(), env={"TIDELINE_API_KEY": "tl_x_y", "TIDELINE_URL": "http://127.0.0.1:9"}
    )

    assert output["hookSpecificOutput"] == {"hookEventName": event, "additionalContext": ""}


def test_it_takes_the_event_from_its_argument_when_stdin_is_unreadable():
    output = run_hook(b"\x00\x01", env={}, args=["SessionStart"])

    assert output["hookSpecificOutput"]["hookEventName"] == "SessionStart"


def test_it_injects_nothing_with_a_wrong_key(live_server, project_dir):
    event = {
        "hook_event_name": "UserPromptSubmit",
        "session_id": "x",
        "cwd": str(project_dir),
        "prompt": "anything at all",
    }

    output = run_hook(
        json.dumps(event).encode(),
        env={"TIDELINE_URL": live_server.url, "TIDELINE_API_KEY": "tl_wrong_key"},
    )

    assert output["hookSpecificOutput"]["additionalContext"] == ""


def test_it_imports_nothing_outside_the_standard_library():
    code = (
        f"import sys; sys.argv=['x']; import runpy; runpy.run_path({str(HOOK)!r}, run_name='m'); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('django', 'memory', 'injection', 'numpy', 'mcp', 'urllib3', 'requests')))"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True)

    assert out.stdout.strip() == "[]", out.stderr
