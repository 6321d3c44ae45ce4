import json
import sqlite3
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from injection.services import importing
from memory.models import AuditEvent, ContextTurn, Session


def _write_lines(path, rows):
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    return path


@pytest.fixture
def sessions_dir(tmp_path, project_dir):
    folder = tmp_path / "sessions"
    folder.mkdir()
    _write_lines(
        folder / "claude.jsonl",
        [
            {"type": "summary", "summary": "x"},
            {
                "type": "user",
                "uuid": "u1",
                "sessionId": "cc-s",
                "cwd": str(project_dir),
                "timestamp": "2026-11-01T09:00:00Z",
                "message": {"role": "user", "content": "why is the parser slow?"},
            },
            {
                "type": "assistant",
                "uuid": "a1",
                "sessionId": "cc-s",
                "cwd": str(project_dir),
                "timestamp": "2026-11-01T09:00:09Z",
                "message": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "It re-reads."}],
                },
            },
            {
                "type": "assistant",
                "uuid": "x1",
                "sessionId": "cc-s",
                "isSidechain": True,
                "message": {"role": "assistant", "content": "subagent work"},
            },
        ],
    )
    (folder / "hermes.json").write_text(
        json.dumps(
            {
                "session_id": "h-1",
                "cwd": "/nowhere/at/all",
                "messages": [
                    {"role": "system", "content": "you are hermes"},
                    {
                        "role": "user",
                        "content": "remember my editor is helix",
                        "timestamp": 1764000000,
                    },
                    {"role": "assistant", "content": "Noted."},
                    {"role": "tool", "content": "{}"},
                ],
            }
        )
    )
    _write_lines(
        folder / "generic.jsonl",
        [
            {"session": "g-1", "role": "user", "content": "first", "ts": "2026-10-01T08:00:00Z"},
            {"session": "g-2", "role": "user", "content": "other session"},
            {"session": "g-1", "role": "assistant", "content": "second"},
        ],
    )
    return folder


def test_it_imports_each_format_into_its_scope_and_is_idempotent(db, sessions_dir, project):
    out = StringIO()
    call_command("import_sessions", str(sessions_dir), stdout=out, stderr=StringIO())
    call_command("import_sessions", str(sessions_dir), stdout=out, stderr=StringIO())

    claude = Session.objects.get(runtime="claude_code", external_id="cc-s")
    assert claude.scope == project
    assert [t.content for t in claude.turns.order_by("seq")] == [
        "why is the parser slow?",
        "It re-reads.",
    ]
    assert claude.turns.first().occurred_at.isoformat() == "2026-11-01T09:00:00+00:00"
    hermes = Session.objects.get(runtime="hermes", external_id="h-1")
    assert (hermes.scope.kind, hermes.scope.key) == ("project", "/nowhere/at/all")
    generic = Session.objects.get(external_id="g-1")
    assert (generic.scope.kind, generic.scope.key) == (
        "project",
        str(sessions_dir / "generic.jsonl"),
    )
    assert [t.role for t in hermes.turns.order_by("seq")] == ["user", "assistant"]
    assert Session.objects.get(external_id="g-1").turns.count() == 2
    assert ContextTurn.objects.count() == 7
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("4 session(s): 7 turn(s) imported, 0 already present")
    assert lines[1].startswith("4 session(s): 0 turn(s) imported, 7 already present")


def test_it_refuses_a_missing_path(db):
    with pytest.raises(CommandError, match="no such file"):
        call_command("import_sessions", "/no/such/place")


def test_it_reports_a_broken_file_and_keeps_going(db, tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"session": "s", "role": "robot", "content": "x"}\n')
    _write_lines(tmp_path / "good.jsonl", [{"session": "ok", "role": "user", "content": "fine"}])
    out, err = StringIO(), StringIO()

    call_command("import_sessions", str(tmp_path), "--format", "jsonl", stdout=out, stderr=err)

    assert "unknown role 'robot'" in err.getvalue()
    assert "1 turn(s) imported" in out.getvalue() and "1 file(s) failed" in out.getvalue()


def test_it_puts_everything_in_an_explicit_scope(db, sessions_dir, other_project, other_dir):
    call_command(
        "import_sessions",
        str(sessions_dir / "generic.jsonl"),
        "--scope",
        f"project:{other_dir}",
        stdout=StringIO(),
        stderr=StringIO(),
    )

    assert set(Session.objects.values_list("scope", flat=True)) == {other_project.pk}


def test_it_keeps_a_session_whose_directory_is_gone_out_of_every_other_scope(
    db, tmp_path, project, project_dir
):
    gone = tmp_path / "deleted-checkout"
    _write_lines(
        tmp_path / "old.jsonl",
        [
            {
                "type": "user",
                "uuid": "g1",
                "sessionId": "cc-gone",
                "cwd": str(gone),
                "message": {"role": "user", "content": "canary-gone-7d1 lives in a removed repo"},
            }
        ],
    )
    unrelated = tmp_path / "unrelated"
    unrelated.mkdir()

    call_command(
        "import_sessions", str(tmp_path / "old.jsonl"), stdout=StringIO(), stderr=StringIO()
    )

    session = Session.objects.get(external_id="cc-gone")
    assert session.scope.kind == "project" and session.scope.key == str(gone)
    for cwd in (unrelated, project_dir):
        out = StringIO()
        call_command("context", "--query", "canary-gone-7d1", "--cwd", str(cwd), stdout=out)
        assert "canary-gone-7d1" not in out.getvalue()


def test_it_refuses_an_unknown_scope_instead_of_importing_into_global(db, sessions_dir):
    with pytest.raises(CommandError, match="names no scope"):
        call_command("import_sessions", "--scope", "bogus", str(sessions_dir / "generic.jsonl"))
    assert not Session.objects.exists()


def test_it_refuses_a_file_whose_turns_cannot_be_stored_and_opens_no_session(db, tmp_path):
    _write_lines(
        tmp_path / "blank.jsonl",
        [
            {"session": "s", "role": "user", "content": "kept only if every turn is"},
            {"session": "s", "role": "assistant", "content": "   "},
        ],
    )
    err = StringIO()
    with pytest.raises(CommandError, match="every file failed"):
        call_command("import_sessions", str(tmp_path), stdout=StringIO(), stderr=err)
    assert "content must not be empty" in err.getvalue()
    assert not Session.objects.exists()


@pytest.mark.parametrize("ts", [1e20, "9999-12-31T23:59:59-23:59", "2026-99-01", True])
def test_it_refuses_a_turn_time_it_cannot_store(db, tmp_path, ts):
    _write_lines(
        tmp_path / "times.jsonl",
        [
            {"session": "s", "role": "user", "content": "fine", "ts": "2026-01-01T00:00:00Z"},
            {"session": "s", "role": "user", "content": "when?", "ts": ts},
        ],
    )
    err = StringIO()
    with pytest.raises(CommandError, match="every file failed"):
        call_command("import_sessions", str(tmp_path), stdout=StringIO(), stderr=err)
    assert "times.jsonl line 2: turn s:1: time" in err.getvalue()
    assert not Session.objects.exists()


def test_it_reports_a_file_it_cannot_read(db):
    err = StringIO()
    with pytest.raises(CommandError, match="every file failed"):
        call_command("import_sessions", "/proc/self/mem", stdout=StringIO(), stderr=err)
    assert "/proc/self/mem: cannot read it" in err.getvalue()


def test_it_imports_ids_and_text_with_nul_or_a_lone_surrogate_on_either_backend(db, tmp_path):
    """PostgreSQL's text holds no NUL and no database encodes a lone surrogate: before, such a
    file was a traceback on PostgreSQL, and the session it opened stayed behind empty."""
    (tmp_path / "odd.jsonl").write_text(
        json.dumps(
            {
                "session": "s\u0000x",
                "id": "t\ud800",
                "cwd": "/tmp/\u0000",
                "role": "user",
                "content": "hello \u0000 there \ud800",
            },
            ensure_ascii=True,
        )
        + "\n"
    )

    call_command("import_sessions", str(tmp_path), stdout=StringIO(), stderr=StringIO())

    session = Session.objects.get()
    assert session.external_id == "sx"
    assert session.turns.get().content == "hello  there ?"


def _hermes_state_write(path, sessions):
    """A Hermes state.db holding only what the import reads: (id, cwd, [(role, content)…])."""
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE sessions (id TEXT, cwd, started_at REAL)")
    connection.execute(
        "CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT, role TEXT, content TEXT,"
        " timestamp REAL, active INTEGER)"
    )
    for number, (session_id, cwd, turns) in enumerate(sessions):
        connection.execute("INSERT INTO sessions VALUES (?, ?, ?)", (session_id, cwd, number))
        for role, content in turns:
            connection.execute(
                "INSERT INTO messages (session_id, role, content, timestamp, active)"
                " VALUES (?, ?, ?, 1764000000, 1)",
                (session_id, role, content),
            )
    connection.commit()
    connection.close()
    return path


def test_it_refuses_a_session_whose_cwd_is_no_absolute_path_and_never_files_it_in_global(
    db, tmp_path, project_dir
):
    """Such a cwd fell back to the global scope, which every project reads."""
    _write_lines(
        tmp_path / "generic.jsonl",
        [
            {"session": "s-dot", "role": "user", "content": "secret-dot-41", "cwd": "."},
            {"session": "s-rel", "role": "user", "content": "secret-rel-41", "cwd": "rel/dir"},
            {"session": "s-int", "role": "user", "content": "secret-int-41", "cwd": 123},
            {"session": "s-ok", "role": "user", "content": "kept", "cwd": str(project_dir)},
        ],
    )
    _hermes_state_write(
        tmp_path / "state.db",
        [("h-int", 123, [("user", "secret-h-int-41")]), ("h-dot", ".", [("user", "secret-h")])],
    )
    out, err = StringIO(), StringIO()

    call_command("import_sessions", str(tmp_path), stdout=out, stderr=err)

    assert list(Session.objects.values_list("external_id", flat=True)) == ["s-ok"]
    assert not ContextTurn.objects.filter(content__startswith="secret").exists()
    for session, cwd in [("s-dot", "."), ("s-rel", "rel/dir"), ("s-int", "123"), ("h-int", "123")]:
        assert f"session {session}: cwd {cwd!r} is refused: cwd must be an absolute path" in (
            err.getvalue()
        )
    assert (
        "1 session(s): 1 turn(s) imported, 0 already present, 0 file(s) failed, 5 session(s) refused"
        in (out.getvalue())
    )


def test_it_files_a_cwd_under_the_importing_user_s_home_in_a_project_of_its_own(
    db, tmp_path, monkeypatch
):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    _hermes_state_write(
        tmp_path / "state.db", [("h-home", "~/src/secret-project", [("user", "in my home")])]
    )

    call_command("import_sessions", str(tmp_path / "state.db"), stdout=StringIO())

    scope = Session.objects.get(external_id="h-home").scope
    assert (scope.kind, scope.key) == ("project", str(tmp_path / "home/src/secret-project"))


def test_it_files_a_session_without_a_cwd_by_its_file_named_relatively(db, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write_lines(tmp_path / "generic.jsonl", [{"session": "g", "role": "user", "content": "x"}])

    call_command("import_sessions", "generic.jsonl", stdout=StringIO())

    scope = Session.objects.get(external_id="g").scope
    assert (scope.kind, scope.key) == ("project", str(tmp_path / "generic.jsonl"))


def test_it_opens_no_session_elsewhere_when_every_turn_is_already_present(
    db, sessions_dir, other_dir
):
    """Importing a file again under another scope opened an empty session there, global too."""
    call_command("import_sessions", str(sessions_dir), stdout=StringIO(), stderr=StringIO())
    before = (Session.objects.count(), AuditEvent.objects.count())
    out = StringIO()

    for scope in ("global", f"project:{other_dir}"):
        call_command(
            "import_sessions", str(sessions_dir), "--scope", scope, stdout=out, stderr=StringIO()
        )

    assert (Session.objects.count(), AuditEvent.objects.count()) == before
    assert out.getvalue().count("4 session(s): 0 turn(s) imported, 7 already present") == 2


class Terminal(StringIO):
    def isatty(self) -> bool:
        return True


def test_it_reports_its_progress_turn_by_turn(db, tmp_path, monkeypatch):
    monkeypatch.setattr(importing, "IMPORT_BATCH_TURNS", 2)
    _write_lines(
        tmp_path / "long.jsonl",
        [{"session": "long", "role": "user", "content": f"turn {n}"} for n in range(5)],
    )
    steps = []

    importing.sessions_import(
        path=tmp_path / "long.jsonl", progress=lambda *step: steps.append(step)
    )
    drawn = Terminal()
    call_command("import_sessions", str(tmp_path / "long.jsonl"), stdout=StringIO(), stderr=drawn)

    assert steps == [("long.jsonl", 2, 5), ("long.jsonl", 4, 5), ("long.jsonl", 5, 5)]
    assert "5/5" in drawn.getvalue() and "files=1/1" in drawn.getvalue()
