"""What `./tideline up` prints at the end of its first run, and `./tideline manage`."""

import json
import os
import shlex
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from injection.services.access import apikey_create
from injection.services.onboarding import Checkout, next_steps_render
from tests.injection.conftest import narrative_seed, weights_set

CLI = settings.BASE_DIR / "tideline"


def printed_json(text: str) -> list[dict]:
    decoder, found, at = json.JSONDecoder(), [], 0
    while (start := text.find("\n{", at)) != -1:
        value, end = decoder.raw_decode(text, start + 1)
        found.append(value)
        at = end
    return found


def next_steps() -> str:
    out = StringIO()
    call_command("next_steps", stdout=out)
    return out.getvalue()


def test_it_prints_every_step_with_real_paths_of_this_checkout():
    text = next_steps()
    claude, mcp = printed_json(text)

    assert f"{CLI} manage apikey create --scope" in text
    assert f"{CLI} manage hermes_install" in text
    assert "hermes config set memory.provider tideline" in text
    for event in ("SessionStart", "UserPromptSubmit", "Stop"):
        command = shlex.split(claude["hooks"][event][0]["hooks"][0]["command"])
        assert command[:2] == ["python3", "-I"] and Path(command[2]).is_file()
        assert command[3] == event
    stdio = mcp["mcpServers"]["tideline"]
    assert Path(stdio["command"]).is_absolute() and os.access(stdio["command"], os.X_OK)
    assert stdio["args"] == [str(settings.BASE_DIR / "manage.py"), "mcp"]
    assert mcp["mcpServers"]["tideline-http"]["url"] == "http://127.0.0.1:8765/mcp"


def test_it_prints_only_once_when_asked_for_the_first_run(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    first, second = StringIO(), StringIO()

    call_command("next_steps", "--first-run", stdout=first)
    call_command("next_steps", "--first-run", stdout=second)

    assert first.getvalue().startswith("Next steps") and second.getvalue() == ""
    assert next_steps().startswith("Next steps")


def test_it_gives_a_hook_command_that_works_as_printed(live_server, project, project_dir):
    weights_set({narrative_seed(project, "we moved to trigram search"): 0.9})
    _, key = apikey_create(name="claude code", scope_ids=[project.pk])
    claude, _ = printed_json(next_steps())
    command = shlex.split(claude["hooks"]["SessionStart"][0]["hooks"][0]["command"])
    event = {"hook_event_name": "SessionStart", "session_id": "cc-n", "cwd": str(project_dir)}

    completed = subprocess.run(
        [sys.executable, *command[1:]],
        input=json.dumps(event).encode(),
        capture_output=True,
        timeout=60,
        env={
            "PATH": os.environ["PATH"],
            **claude["env"],
            "TIDELINE_URL": live_server.url,
            "TIDELINE_API_KEY": key,
            "TIDELINE_HOOK_TIMEOUT": "60",
        },
    )

    context = json.loads(completed.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "we moved to trigram search" in context


def fake_venv(tmp_path) -> Path:
    """This test run's interpreter dressed as ./tideline's venv, already installed, so the script
    runs as it does after its first install (without touching the network or .venv)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    requirements = sorted(settings.BASE_DIR.glob("requirements*.txt"))
    (venv / ".installed-requirements").write_bytes(b"".join(p.read_bytes() for p in requirements))
    return venv


def test_it_runs_a_management_command_through_the_cli_in_the_callers_directory(tmp_path):
    venv = fake_venv(tmp_path)
    here = tmp_path / "somewhere"
    here.mkdir()

    completed = subprocess.run(
        [str(CLI), "manage", "shell", "-v0", "-c", "import os; print(os.getcwd())"],
        cwd=here,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TIDELINE_VENV": str(venv), "TIDELINE_DATA_DIR": str(tmp_path)},
    )

    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == str(here)


# Its own SQLite store whichever backend the suite runs on: once in CI is enough.
@pytest.mark.slow
def test_it_ends_the_first_up_with_the_next_steps_and_only_the_first(tmp_path):
    venv = fake_venv(tmp_path)
    env = {
        **os.environ,
        "TIDELINE_VENV": str(venv),
        "TIDELINE_DATA_DIR": str(tmp_path / "data"),
        # Its own embedded store, whichever database the suite runs on: "first run" means empty.
        "TIDELINE_DATABASE_URL": f"sqlite:///{tmp_path / 'data' / 'tideline.sqlite3'}",
        # A documentation address no interface has: uvicorn cannot bind, so `up` ends right
        # after its setup steps instead of serving.
        "TIDELINE_HOST": "192.0.2.1",
    }

    first, second = (
        subprocess.run([str(CLI), "up"], capture_output=True, text=True, timeout=120, env=env)
        for _ in range(2)
    )

    assert "Tideline owner account created." in first.stdout
    assert first.stdout.index("password:") < first.stdout.index("Next steps")
    assert f"{CLI} manage apikey create" in first.stdout
    assert "Tideline is up" in first.stdout.split("Next steps")[1]
    assert "Next steps" not in second.stdout and "Tideline is up" in second.stdout


def test_it_quotes_a_checkout_path_holding_a_space(tmp_path):
    root = tmp_path / "my code" / "tideline's"
    (root / "injection" / "hooks").mkdir(parents=True)
    hook = root / "injection" / "hooks" / "claude_code.py"
    hook.write_bytes((settings.BASE_DIR / "injection" / "hooks" / "claude_code.py").read_bytes())
    checkout = Checkout(root=root, python=Path(sys.executable), url="http://127.0.0.1:8000")
    text = next_steps_render(checkout=checkout)
    claude, _ = printed_json(text)
    command = shlex.split(claude["hooks"]["Stop"][0]["hooks"][0]["command"])

    completed = subprocess.run(
        [sys.executable, *command[1:]], input=b"{}", capture_output=True, timeout=30
    )

    assert command[2:] == [str(hook), "Stop"]
    assert json.loads(completed.stdout) == {"suppressOutput": True}
    create = next(line for line in text.splitlines() if "apikey create" in line)
    assert shlex.split(create)[:4] == [str(root / "tideline"), "manage", "apikey", "create"]
