"""The Claude Code hook, run as Claude Code runs it: a separate process fed JSON on stdin."""

import ast
import importlib.util
import json
import os
import resource
import subprocess
import sys
import time

import pytest
from django.conf import settings

from injection.services.access import apikey_create
from memory.models import ContextTurn, Session
from tests.injection.conftest import narrative_seed, weights_set
from tests.injection.fake_tideline import Answer, FakeTideline

HOOK = settings.BASE_DIR / "injection" / "hooks" / "claude_code.py"


def run_hook(stdin: bytes, *, env: dict, args=(), timeout=30, **popen) -> dict:
    return run_hook_said(stdin, env=env, args=args, timeout=timeout, **popen)[0]


def run_hook_said(stdin: bytes, *, env: dict, args=(), timeout=30, **popen) -> tuple[dict, str]:
    """The hook's answer, and what it said on stderr."""
    completed = subprocess.run(
        [sys.executable, "-I", str(HOOK), *args],
        input=stdin,
        capture_output=True,
        env={"PATH": os.environ["PATH"], **env},
        timeout=timeout,
        **popen,
    )
    assert completed.returncode == 0, completed.stderr
    # ASCII only: writable whatever stdout's encoding.
    assert completed.stdout.isascii()
    return json.loads(completed.stdout), completed.stderr.decode(errors="replace")


@pytest.fixture
def fake():
    server = FakeTideline().start()
    yield server
    server.stop()


def fake_env(fake) -> dict:
    return {"TIDELINE_URL": fake.url, "TIDELINE_API_KEY": "tl_x_y", "TIDELINE_HOOK_TIMEOUT": "5"}


def stop_event(transcript) -> bytes:
    return json.dumps(
        {"hook_event_name": "Stop", "session_id": "s", "transcript_path": str(transcript)}
    ).encode()


def prompt_event(prompt: str = "hello there") -> bytes:
    return json.dumps(
        {"hook_event_name": "UserPromptSubmit", "session_id": "s", "prompt": prompt}
    ).encode()


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

    # No event named anywhere: the one answer valid for every event.
    assert output == {}


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


def test_it_gives_up_on_a_dripping_server_at_its_deadline(fake):
    fake.script(Answer(body=json.dumps({"block": "late" + " " * 40}).encode(), drip=0.1))
    started = time.monotonic()

    output = run_hook(prompt_event(), env={**fake_env(fake), "TIDELINE_HOOK_TIMEOUT": "1"})

    assert time.monotonic() - started < 3
    assert output["hookSpecificOutput"] == {
        "hookEventName": "UserPromptSubmit",
        "additionalContext": "",
    }


def test_it_survives_deeply_nested_json_on_stdin():
    output = run_hook(b"[" * 100_000, env={}, args=["UserPromptSubmit"])

    assert output["hookSpecificOutput"]["additionalContext"] == ""


def test_it_prints_a_block_holding_a_lone_surrogate(fake):
    fake.script(Answer(body=b'{"block": "hi \\ud800 there \xe8\xbe\xb9"}'))

    output = run_hook(prompt_event(), env=fake_env(fake))

    assert output["hookSpecificOutput"]["additionalContext"] == "hi \ud800 there 边"


def transcript_line(uuid: str, text: str) -> str:
    return json.dumps(
        {"type": "user", "uuid": uuid, "message": {"role": "user", "content": text}},
        ensure_ascii=False,
    )


def test_it_keeps_a_cjk_and_code_heavy_tail_under_the_body_limit(fake, tmp_path):
    # Each line escapes to far more than its UTF-8 bytes: quotes and backslashes double.
    text = '边界 "quoted" \\path\\ ' * 300
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("\n".join(transcript_line(f"u{i}", text) for i in range(400)))

    run_hook(stop_event(transcript), env=fake_env(fake))

    (request,) = fake.requests
    assert len(request["body"]) <= 1_000_000
    assert json.loads(request["body"])["lines"][-1] == transcript_line("u399", text)


def test_it_skips_a_newest_line_too_large_to_send_and_syncs_the_earlier_ones(fake, tmp_path):
    transcript = tmp_path / "t.jsonl"
    lines = [transcript_line("u1", "first"), transcript_line("u2", "second")]
    transcript.write_text("\n".join([*lines, transcript_line("big", "x" * 1_200_000)]))

    run_hook(stop_event(transcript), env=fake_env(fake))

    assert fake.bodies()[0]["lines"] == lines


def test_it_reads_only_the_end_of_a_huge_transcript(fake, tmp_path):
    transcript = tmp_path / "t.jsonl"
    with transcript.open("wb") as file:
        file.truncate(400_000_000)  # sparse: huge to read, free to make
        file.seek(0, os.SEEK_END)
        file.write(("\n" + transcript_line("u1", "at the end")).encode())
    limit = 200_000_000

    run_hook(
        stop_event(transcript),
        env=fake_env(fake),
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
    )

    assert fake.bodies()[0]["lines"] == [transcript_line("u1", "at the end")]


def test_it_does_not_wait_on_a_fifo_as_transcript(fake, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    output = run_hook(stop_event(fifo), env=fake_env(fake), timeout=10)

    assert output == {"suppressOutput": True}
    assert fake.requests == []


@pytest.mark.parametrize(
    "event",
    ["SubagentStop", "PreCompact", "SessionEnd", "Notification", "PreToolUse", "PostToolUse"],
)
def test_it_answers_nothing_to_events_it_does_not_handle(fake, event):
    payload = {"hook_event_name": event, "session_id": "s", "prompt": "hello there"}

    output = run_hook(json.dumps(payload).encode(), env=fake_env(fake), args=[event])

    assert output == {}
    assert fake.requests == []


def test_it_uses_no_syntax_newer_than_python_3_9():
    tree = ast.parse(HOOK.read_text())
    postponed = any(
        isinstance(node, ast.ImportFrom)
        and node.module == "__future__"
        and any(alias.name == "annotations" for alias in node.names)
        for node in tree.body
    )
    unions = [
        node
        for node in ast.walk(tree)
        if isinstance(node, (ast.arg, ast.AnnAssign, ast.FunctionDef))
        for annotation in [node.returns if isinstance(node, ast.FunctionDef) else node.annotation]
        if annotation is not None
        and any(
            isinstance(part, ast.BinOp) and isinstance(part.op, ast.BitOr)
            for part in ast.walk(annotation)
        )
    ]

    # `X | None` in an annotation is evaluated at definition time on 3.9 unless postponed.
    assert postponed or not unions


def test_it_sends_no_key_that_would_add_a_header(fake):
    env = {**fake_env(fake), "TIDELINE_API_KEY": "tl_x_y\r\nX-Injected: 1"}

    output = run_hook(prompt_event(), env=env)

    assert output["hookSpecificOutput"]["additionalContext"] == ""
    assert fake.requests == []


def test_it_reads_an_ipv6_url_without_a_port():
    spec = importlib.util.spec_from_file_location("claude_code_hook", HOOK)
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)

    assert hook._address("[::1]") == ("::1", 80)
    assert hook._address("[::1]:8000") == ("::1", 8000)
    assert hook._address("localhost") == ("localhost", 80)


@pytest.mark.parametrize(
    "stdin",
    [
        b"[1, 2]",
        b'{"hook_event_name": 5}',
        b'{"hook_event_name": "SessionStart", "session_id": {"a": 1}, "cwd": "/tmp"}',
        b'{"hook_event_name": "SessionStart", "session_id": " ", "cwd": "/tmp"}',
    ],
)
def test_it_sends_nothing_for_an_input_without_a_session_id(fake, stdin):
    output, said = run_hook_said(stdin, env=fake_env(fake), args=["SessionStart"])

    assert output["hookSpecificOutput"] == {
        "hookEventName": "SessionStart",
        "additionalContext": "",
    }
    # Not a session "unknown" shared by every such input, in whatever directory the hook ran.
    assert fake.requests == []
    assert "no session_id" in said


@pytest.mark.parametrize("value", ["inf", "1e20", "nan", "-1", "3 s"])
@pytest.mark.parametrize(
    "name, event",
    [
        ("TIDELINE_HOOK_TIMEOUT", "UserPromptSubmit"),
        ("TIDELINE_HOOK_START_TIMEOUT", "SessionStart"),
    ],
)
def test_it_names_an_unusable_timeout_and_uses_the_default(fake, name, event, value):
    fake.script(Answer(body=b'{"block": "remembered"}'))
    payload = {"hook_event_name": event, "session_id": "s", "prompt": "hello there"}

    output, said = run_hook_said(json.dumps(payload).encode(), env={**fake_env(fake), name: value})

    assert output["hookSpecificOutput"]["additionalContext"] == "remembered"
    assert said.count("\n") == 1 and f"{name}={value!r}" in said


@pytest.mark.parametrize("port", ["99999", "0", "-1", "8x"])
def test_it_refuses_a_port_out_of_range(port):
    # Taken as a number, 99999 would wrap to another port (34463) and reach whatever is there.
    env = {"TIDELINE_API_KEY": "tl_x_y", "TIDELINE_URL": f"http://127.0.0.1:{port}"}

    output, said = run_hook_said(prompt_event(), env=env)

    assert output["hookSpecificOutput"]["additionalContext"] == ""
    assert f"TIDELINE_URL has a bad port (not 1-65535): 127.0.0.1:{port}" in said


def test_it_names_a_transcript_path_that_is_a_directory(fake, tmp_path):
    output, said = run_hook_said(stop_event(tmp_path), env=fake_env(fake))

    assert output == {"suppressOutput": True}
    assert fake.requests == []
    assert f"Is a directory: '{tmp_path}'" in said
