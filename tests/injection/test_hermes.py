"""The Hermes Agent memory provider, loaded by the real hermes-agent package (its plugin discovery,
its MemoryManager) in its own environment, against a live Tideline server.

hermes-agent pins versions Tideline's environment cannot share (pydantic among them), so it lives
in a separate venv: TIDELINE_HERMES_PYTHON, or .venv-hermes/ (`.ci/run` builds it from
requirements-hermes.txt)."""

import json
import os
import subprocess
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from injection.services.access import apikey_create
from memory.models import ContextTurn, Fact, Session
from tests.conftest import service_required
from tests.injection.conftest import narrative_seed, weights_set

DRIVER = Path(__file__).with_name("hermes_session.py")


@pytest.fixture(scope="module")
def hermes_python() -> str:
    python = os.environ.get("TIDELINE_HERMES_PYTHON") or str(
        settings.BASE_DIR / ".venv-hermes" / "bin" / "python"
    )
    probe = (
        subprocess.run(
            [python, "-c", "import agent.memory_provider, plugins.memory"],
            capture_output=True,
            timeout=120,
        )
        if Path(python).exists()
        else None
    )
    if probe is None or probe.returncode != 0:
        service_required("hermes-agent", f"no Hermes environment at {python}")
    return python


@pytest.fixture
def hermes_home(tmp_path) -> Path:
    home = tmp_path / "hermes-home"
    call_command("hermes_install", "--hermes-home", str(home), stdout=StringIO())
    return home


def hermes_run(python: str, *, home: Path, url: str, key: str, cwd: Path, args: list[str]):
    completed = subprocess.run(
        [python, str(DRIVER), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(home.parent),
            "HERMES_HOME": str(home),
            "TIDELINE_URL": url,
            "TIDELINE_API_KEY": key,
        },
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_it_installs_the_plugin_where_hermes_looks(hermes_home):
    plugin = hermes_home / "plugins" / "tideline"

    assert (plugin / "__init__.py").read_text().count("MemoryProvider") >= 1
    assert (plugin / "plugin.yaml").exists()


def test_it_runs_a_hermes_session_injected_and_stored(
    hermes_python, hermes_home, live_server, project, project_dir
):
    weights_set({narrative_seed(project, "we moved the index to trigram search"): 0.9})
    narrative_seed(project, "边界检查放在解析器里，不放在调用方")
    _, key = apikey_create(name="hermes", scope_ids=[project.pk])

    seen = hermes_run(
        hermes_python,
        home=hermes_home,
        url=live_server.url,
        key=key,
        cwd=project_dir,
        args=["h-live", "primary", "边界应该在哪里检查？", "放在解析器里。", "trigram"],
    )

    assert seen["discovered"]["tideline"] is True and seen["provider"] == "tideline"
    assert "we moved the index to trigram search" in seen["system_prompt"]
    assert seen["system_prompt"].startswith("<tideline-memory")
    assert "边界检查放在解析器里" in seen["prefetched"]
    assert seen["search"][0]["text"] == "we moved the index to trigram search"
    assert {"tideline_search", "tideline_write_narrative", "tideline_write_fact"} <= set(
        seen["tools"]
    )
    assert seen["config_schema"] == ["api_key", "url", "cwd"]
    editor = Fact.objects.get(pk=seen["wrote"]["id"])
    # The user's preference follows the user: it is filed globally, not in this project.
    assert (editor.predicate, editor.value, editor.scope.kind) == ("editor", "helix", "global")
    session = Session.objects.get(external_id="h-live")
    assert (session.runtime, session.scope_id) == ("hermes", project.pk)
    assert [(t.role, t.content) for t in session.turns.order_by("seq")] == [
        ("user", "边界应该在哪里检查？"),
        ("assistant", "放在解析器里。"),
        ("user", "thanks, that settles it"),
    ]


def test_it_captures_nothing_in_a_subagent_context(
    hermes_python, hermes_home, live_server, project, project_dir
):
    weights_set({narrative_seed(project, "we moved the index to trigram search"): 0.9})
    _, key = apikey_create(name="hermes", scope_ids=[project.pk])

    seen = hermes_run(
        hermes_python,
        home=hermes_home,
        url=live_server.url,
        key=key,
        cwd=project_dir,
        args=["h-child", "subagent", "trigram search please", "done", "trigram"],
    )

    assert seen["system_prompt"] == "" and seen["prefetched"] == ""
    assert "does not write" in seen["wrote"]["error"]
    assert not Fact.objects.filter(predicate="editor").exists()
    assert not Session.objects.filter(external_id="h-child").exists()
    assert not ContextTurn.objects.filter(session__external_id="h-child").exists()


def test_it_imports_the_session_files_this_hermes_writes(
    hermes_python, tmp_path, project, project_dir
):
    out = tmp_path / "hermes-home"
    written = subprocess.run(
        [hermes_python, str(DRIVER.with_name("hermes_files.py")), str(out), str(project_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "HERMES_HOME": str(out)},
    )
    assert written.returncode == 0, written.stderr
    # Hermes' debug request dumps share the sessions folder; they are not sessions.
    (out / "sessions" / "request_dump_20261201_100000_bbbbbb_1.json").write_text(
        json.dumps({"reason": "max_retries", "request": {"body": {"messages": []}}})
    )
    report = StringIO()

    call_command(
        "import_sessions", str(out), "--format", "hermes", stdout=report, stderr=StringIO()
    )
    call_command(
        "import_sessions", str(out), "--format", "hermes", stdout=report, stderr=StringIO()
    )

    from_db = Session.objects.get(external_id="20261201_090000_aaaaaa")
    from_json = Session.objects.get(external_id="20261201_100000_bbbbbb")
    assert (from_db.runtime, from_db.scope_id) == ("hermes", project.pk)
    # A snapshot names no directory: it is kept in a project of its own file, never in global.
    assert from_json.scope.kind == "project"
    for session in (from_db, from_json):
        assert [(t.role, t.content) for t in session.turns.order_by("seq")] == [
            ("user", "remember my editor is helix"),
            ("assistant", "Noted: helix."),
        ]
    assert from_json.turns.first().occurred_at.date().isoformat() == "2026-12-01"
    lines = report.getvalue().splitlines()
    assert lines[0].startswith("2 session(s): 4 turn(s) imported, 0 already present, 0 file(s)")
    assert lines[1].startswith("2 session(s): 0 turn(s) imported, 4 already present, 0 file(s)")


def test_it_keeps_hermes_running_while_tideline_is_down_and_delivers_later(
    hermes_python, hermes_home, live_server, project, project_dir
):
    _, key = apikey_create(name="hermes", scope_ids=[project.pk])

    seen = hermes_run(
        hermes_python,
        home=hermes_home,
        url="http://127.0.0.1:9",
        key=key,
        cwd=project_dir,
        args=["--outage", "h-down", "is the parser fixed?", "yes, since Monday", live_server.url],
    )

    assert (seen["system_prompt"], seen["prefetched"]) == ("", "")
    assert seen["down_seconds"] < 20
    session = Session.objects.get(external_id="h-down")
    assert [(t.role, t.content) for t in session.turns.order_by("seq")] == [
        ("user", "is the parser fixed?"),
        ("assistant", "yes, since Monday"),
    ]
