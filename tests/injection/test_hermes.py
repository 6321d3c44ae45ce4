"""The Hermes Agent memory provider, loaded by the real hermes-agent package (its plugin discovery,
its MemoryManager) in its own environment, against a live Tideline server.

hermes-agent pins versions Tideline's environment cannot share (pydantic among them), so it lives
in a separate venv: TIDELINE_HERMES_PYTHON, or .venv-hermes/ (`.ci/run` builds it from
requirements-hermes.txt)."""

import hashlib
import json
import os
import subprocess
from io import StringIO
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.conf import settings
from django.core.management import call_command

from injection.services.access import apikey_create
from memory.models import ContextTurn, Fact, Session
from tests.conftest import service_required
from tests.injection.conftest import narrative_seed, weights_set
from tests.injection.fake_tideline import Answer, FakeTideline, json_answer

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


@pytest.fixture
def fake():
    server = FakeTideline().start()
    yield server
    server.stop()


def provider_run(python: str, *, home: Path, url: str, cwd: Path, steps: list) -> list:
    """The provider driven call by call against `url`; what each call returned or raised."""
    completed = subprocess.run(
        [python, str(DRIVER.with_name("hermes_steps.py"))],
        input=json.dumps(steps),
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(home.parent),
            "HERMES_HOME": str(home),
            "TIDELINE_URL": url,
            "TIDELINE_API_KEY": "tl_x_y",
            "TIDELINE_CWD": str(cwd),
        },
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


def start(session_id: str = "h-1") -> list:
    """initialize, then wait for the session-start request so the scripted answers stay in order."""
    return [["initialize", [session_id], {}], ["system_prompt_block", [], {}]]


def sent_turns(fake) -> list:
    return [[t["content"] for t in body["turns"]] for body in fake.bodies() if "turns" in body]


# Three user/assistant exchanges synced one by one, as Hermes does after each turn.
THREE_EXCHANGES = [
    ["sync_turn", ["one", "two"], {}],
    ["sync_turn", ["three", "four"], {}],
    ["sync_turn", ["five", "six"], {}],
]


def test_it_follows_no_redirect_and_keeps_the_turns(hermes_python, hermes_home, fake, tmp_path):
    elsewhere = FakeTideline().start()
    fake.script(
        json_answer({"block": ""}),
        Answer(status=302, headers={"Location": f"{elsewhere.url}/api/v1/turns"}),
        Answer(body=b""),
    )
    try:
        provider_run(
            hermes_python,
            home=hermes_home,
            url=fake.url,
            cwd=tmp_path,
            steps=[*start(), *THREE_EXCHANGES],
        )
    finally:
        elsewhere.stop()

    # The key never went to the redirect's origin, and neither failure lost a turn.
    assert elsewhere.requests == []
    assert sent_turns(fake)[-1] == ["one", "two", "three", "four", "five", "six"]


def test_it_holds_its_deadline_against_a_dripping_server(
    hermes_python, hermes_home, fake, tmp_path
):
    dripping = Answer(body=json.dumps({"block": "late" + " " * 40}).encode(), drip=0.1)
    fake.script(json_answer({"block": ""}), dripping, dripping, dripping)

    seen = provider_run(
        hermes_python,
        home=hermes_home,
        url=fake.url,
        cwd=tmp_path,
        steps=[
            *start(),
            ["client_timeout", [1.0], {}],
            ["prefetch", ["is the parser fixed?"], {}],
            ["on_session_end", [[{"role": "user", "content": "bye"}]], {}],
            ["shutdown", [], {}],
        ],
    )

    prefetch, session_end, shutdown = seen[3:]
    assert prefetch["result"] == "", seen
    assert prefetch["seconds"] < 2 and session_end["seconds"] < 2 and shutdown["seconds"] < 2


def test_it_drops_a_refused_batch_and_retries_a_failed_one(
    hermes_python, hermes_home, fake, tmp_path
):
    fake.script(
        json_answer({"block": ""}),
        json_answer({"detail": "content too long"}, status=422),
        json_answer({"detail": "down for a moment"}, status=503),
    )

    provider_run(
        hermes_python,
        home=hermes_home,
        url=fake.url,
        cwd=tmp_path,
        steps=[*start(), *THREE_EXCHANGES],
    )

    assert sent_turns(fake) == [
        ["one", "two"],
        ["three", "four"],
        ["three", "four", "five", "six"],
    ]


def test_it_sends_what_the_servers_limits_accept(hermes_python, hermes_home, fake, tmp_path):
    transcript = [
        {"role": "user" if i % 2 else "assistant", "content": f"边界 {i} " + "检" * 20_000}
        for i in range(60)
    ] + [{"role": "user", "content": f"short {i}"} for i in range(1_100)]

    provider_run(
        hermes_python,
        home=hermes_home,
        url=fake.url,
        cwd=tmp_path,
        steps=[
            *start(),
            ["prefetch", ["q" * 150_000], {}],
            ["sync_turn", ["u" * 100_001, "fine"], {}],
            ["on_session_end", [transcript], {}],
        ],
    )

    prefetch, turns, *ends = (r for r in fake.requests if r["path"] != "/api/v1/session/start")
    assert len(json.loads(prefetch["body"])["content"]) == 100_000
    assert [len(t["content"]) for t in json.loads(turns["body"])["turns"]] == [100_000, 4]
    assert all(len(r["body"]) <= 1_000_000 for r in ends)
    assert all(len(json.loads(r["body"])["turns"]) <= 500 for r in ends)
    assert [t["content"] for r in ends for t in json.loads(r["body"])["turns"]] == [
        m["content"] for m in transcript
    ]


def test_it_writes_only_the_declared_fields_in_its_own_project(
    hermes_python, hermes_home, fake, tmp_path
):
    fake.script(json_answer({"block": ""}), json_answer({"id": 7}))
    args = {
        "profile_name": "user",
        "kind": "preference",
        "predicate": "editor",
        "value": "helix",
        "cwd": "/somewhere/else",
        "scope_id": 3,
        "secret": "x",
    }

    seen = provider_run(
        hermes_python,
        home=hermes_home,
        url=fake.url,
        cwd=tmp_path,
        steps=[*start(), ["handle_tool_call", ["tideline_write_fact", args], {}]],
    )

    assert json.loads(seen[2]["result"]) == {"id": 7}
    assert fake.bodies()[-1] == {
        "profile_name": "user",
        "kind": "preference",
        "predicate": "editor",
        "value": "helix",
        "cwd": str(tmp_path),
    }


def test_it_degrades_to_empty_answers_on_odd_ones(hermes_python, hermes_home, fake, tmp_path):
    fake.script(
        json_answer({"block": {"not": "a string"}}),
        json_answer([1, 2]),
        json_answer(None),
        json_answer({"block": {"not": "a string"}}),
        json_answer([{"memory": None}, 5, {"memory": {"id": 1, "summary": "s"}, "score": "x"}]),
    )

    seen = provider_run(
        hermes_python,
        home=hermes_home,
        url=fake.url,
        cwd=tmp_path,
        steps=[
            *start(),
            ["prefetch", ["first"], {}],
            ["prefetch", ["second"], {}],
            ["prefetch", ["third"], {}],
            ["handle_tool_call", ["tideline_search", {"query": "s", "limit": "abc"}], {}],
            ["handle_tool_call", ["tideline_search", {"query": "s"}], {}],
            ["sync_turn", ["lone \ud800 surrogate", "ok"], {}],
        ],
    )

    assert [step["raised"] for step in seen] == [None] * 8
    assert [step["result"] for step in seen[1:5]] == ["", "", "", ""]
    assert json.loads(seen[5]["result"]) == [
        {"id": 1, "type": None, "text": "s", "scope": None, "score": None}
    ]
    query = urlencode({"q": "s", "limit": 8, "cwd": str(tmp_path)})
    assert fake.requests[4]["path"] == f"/api/v1/search?{query}"


def test_it_delivers_queued_turns_where_they_were_said_after_a_session_switch(
    hermes_python, hermes_home, fake, tmp_path
):
    elsewhere = tmp_path / "elsewhere"
    down = json_answer({"detail": "down for a moment"}, status=503)
    fake.script(json_answer({"block": ""}), down, down)

    provider_run(
        hermes_python,
        home=hermes_home,
        url=fake.url,
        cwd=tmp_path,
        steps=[
            *start("h-1"),
            ["sync_turn", ["one", "two"], {}],
            # The next session starts in another directory while Tideline is still down.
            ["setenv", ["TIDELINE_CWD", str(elsewhere)], {}],
            ["on_session_switch", ["h-2"], {}],
            ["system_prompt_block", [], {}],
            ["sync_turn", ["three", "four"], {}],
        ],
    )

    sent = [
        (body["session_id"], body["cwd"], [t["content"] for t in body["turns"]])
        for body in fake.bodies()
        if "turns" in body
    ]
    assert sent == [
        ("h-1", str(tmp_path), ["one", "two"]),
        ("h-1", str(tmp_path), ["one", "two"]),
        ("h-1", str(tmp_path), ["one", "two"]),
        ("h-2", str(elsewhere), ["three", "four"]),
    ]


def test_it_keeps_turn_ids_apart_and_within_200_characters_for_a_long_session_id(
    hermes_python, hermes_home, fake, tmp_path
):
    session_ids = ["h" * 150, "s" * 195, "t" * 199, "u" * 300]
    steps = [*start(session_ids[0]), ["sync_turn", ["one", "two"], {}]]
    for session_id in session_ids[1:]:
        steps += [["on_session_switch", [session_id], {}], ["sync_turn", ["one", "two"], {}]]

    provider_run(hermes_python, home=hermes_home, url=fake.url, cwd=tmp_path, steps=steps)

    ids = [t["turn_id"] for body in fake.bodies() if "turns" in body for t in body["turns"]]
    assert len(ids) == 8 and len(set(ids)) == 8
    assert all(len(turn_id) <= 200 for turn_id in ids)
    # An id that fits is what it always was, so a history sent before still matches.
    digest = hashlib.sha256(b"user\0one").hexdigest()[:20]
    assert ids[0] == f"{'h' * 150}:{digest}:0"
    assert all(turn_id.endswith(f":{digest}:0") for turn_id in ids[::2])
