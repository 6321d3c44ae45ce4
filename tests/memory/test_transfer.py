"""Moving a store: export → import into a fresh database gives the same rows and the same search
results; a scope travels with what its rows point at; backup is consistent under write load."""

import base64
import io
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest
from django.apps import apps
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from dream.pipeline import dream_run
from injection.services.access import apikey_create
from memory.models import (
    Actor,
    ApiKey,
    AuditEvent,
    ContextTurn,
    EmbeddingStatus,
    Evidence,
    Fact,
    Memory,
    Narrative,
    Scope,
    ScopeKind,
    Session,
    WordVector,
)
from memory.search import memory_search
from memory.services.audit import audit_context
from memory.services.embedding import embedder_get
from memory.services.errors import Conflict
from memory.services.facts import FactInput, fact_write
from memory.services.inbox import inbox_capture
from memory.services.lifecycle import memory_expire
from memory.services.narratives import NarrativeInput, narrative_write
from memory.services.scopes import scope_ensure, scope_global
from memory.services.self_concept import self_concept_write
from memory.services.threads import snapshot_write, thread_write
from memory.services.timeline import TurnInput, session_start, turns_record
from memory.services.transfer import EXPORTED_MODELS, NOT_EXPORTED, store_export, store_import
from tests.conftest import service_required

QUERIES = [
    "where does the archive live now",
    "archive PostgreSQL",
    "which editor does the user prefer",
    "billing webhooks retry",
    "边界条件",
    "keeper",
]
SEARCH_SCRIPT = """
import json
from memory.models import Scope, WordVector
from memory.search import memory_search
scopes = list(Scope.objects.values_list("pk", flat=True))
print(json.dumps([
    [[hit.memory.pk, hit.memory.memory_type] for hit in memory_search(query=q, scope_ids=scopes)]
    for q in QUERIES
] + [sorted(WordVector.objects.values_list("term", flat=True))]))
"""


def _seed(project_scope, other_project_scope, global_scope) -> None:
    session = session_start(runtime="test", external_id="move-1", scope_id=project_scope.pk)
    turns = turns_record(
        session_id=session.pk,
        turns=[
            TurnInput(role="user", content="We moved the archive to PostgreSQL last week"),
            TurnInput(role="assistant", content="Noted: the archive lives on PostgreSQL now"),
        ],
    )
    narrative_write(
        data=NarrativeInput(
            scope_id=project_scope.pk,
            gesture="The archive moved from SQLite to PostgreSQL",
            moment="We moved the archive to PostgreSQL last week",
            tags=["archive", "database"],
            source_turn_ids=[turns[0].pk],
        )
    )
    narrative_write(
        data=NarrativeInput(
            scope_id=project_scope.pk,
            gesture="边界条件的兜底逻辑在归档器里还没写完",
            confidence=0.3,
        )
    )
    narrative_write(data=NarrativeInput(scope_id=project_scope.pk, gesture="你自己改完之后"))
    old = narrative_write(
        data=NarrativeInput(scope_id=project_scope.pk, gesture="The nightly export ran at 2 am")
    )
    memory_expire(memory_id=old.pk, reason="the export moved to 3 am")
    for value in ("vim", "neovim"):
        fact_write(
            data=FactInput(
                scope_id=global_scope.pk,
                profile_name="user",
                kind="preference",
                predicate="editor",
                value=value,
            )
        )
    fact_write(
        data=FactInput(
            scope_id=project_scope.pk,
            profile_name="user",
            kind="fact",
            predicate="archive_database",
            value="PostgreSQL 15",
            secret=True,
        )
    )
    narrative_write(
        data=NarrativeInput(
            scope_id=other_project_scope.pk,
            gesture="The billing service retries webhooks three times",
            tags=["billing"],
        )
    )
    self_concept_write(field="fact", content="I am the keeper of the archive's memory")
    thread_write(scope_id=project_scope.pk, content="Is the archive's backup restorable?")
    snapshot_write(scope_id=project_scope.pk, content="Mid-migration: data copied, search next")
    inbox_capture(content="用户喜欢用简体中文回复", scope_id=project_scope.pk)
    key, _ = apikey_create(name="laptop", scope_ids=[project_scope.pk])
    with audit_context(actor=Actor.AGENT, key_id=key.pk):
        thread_write(scope_id=project_scope.pk, content="Does the laptop key see the archive?")
    memory_search(
        query="archive",
        scope_ids=[project_scope.pk, global_scope.pk],
        activation_source="mcp_search",
    )
    dream_run(layer="script")


@pytest.fixture
def seeded(project_scope, other_project_scope, global_scope, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        _seed(project_scope, other_project_scope, global_scope)


def _export(**options) -> list[str]:
    out = io.StringIO()
    store_export(out=out, **options)
    return out.getvalue().splitlines()


def _rows(lines: list[str]) -> list[dict]:
    return [json.loads(line) for line in lines[1:]]


def _search_results() -> list:
    """The fixed queries' results, then the words that have a vector (query expansion's): the
    export leaves them out, and the import embeds the imported turns' words again."""
    scopes = list(Scope.objects.values_list("pk", flat=True))
    return [
        [
            [hit.memory.pk, hit.memory.memory_type]
            for hit in memory_search(query=q, scope_ids=scopes)
        ]
        for q in QUERIES
    ] + [sorted(WordVector.objects.values_list("term", flat=True))]


def _manage(url: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=settings.BASE_DIR,
        env={**os.environ, "TIDELINE_DATABASE_URL": url, "TIDELINE_LOG_LEVEL": "ERROR"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _round_trip(url: str, export: Path) -> tuple[list[str], list]:
    """Migrate a fresh database at `url`, import the export, and read it back: its own export
    and the fixed queries' results."""
    _manage(url, "migrate", "--noinput", "-v0")
    _manage(url, "import_store", str(export))
    again = Path(f"{export}.again")
    _manage(url, "export", str(again))
    results = json.loads(
        _manage(url, "shell", "--no-imports", "-c", f"QUERIES = {QUERIES!r}\n{SEARCH_SCRIPT}")
    )
    return again.read_text(encoding="utf-8").splitlines(), results


def _scope_ids(lines: list[str]) -> dict[tuple[str, str], int]:
    return {
        (row["fields"]["kind"], row["fields"]["key"]): row["pk"]
        for row in _rows(lines)
        if row["model"] == "memory.scope"
    }


def _scope_fields(label: str) -> list[str]:
    """The serialised fields of `label` that hold scope ids (foreign keys and many-to-many)."""
    return [
        field.name
        for field in apps.get_model(label)._meta.get_fields()
        if field.concrete and field.is_relation and field.related_model is Scope
    ]


def _comparable(lines: list[str], scope_ids: dict[int, int] | None = None) -> list[dict]:
    """Rows as exported, less the import's own audit row, and less the creation time of scopes:
    the global scope every migrated database starts with is reused, not replaced. So the source's
    global scope may land under another id (a flush in an earlier test renumbers it here), and
    `scope_ids` (source id → target id) renames every scope reference, a fact's key included, to
    compare like with like."""
    scope_ids = scope_ids or {}
    rows = []
    for row in _rows(lines):
        if row["model"] == "memory.auditevent" and row["fields"]["target_type"] == "store":
            continue
        key = row["fields"].get("stable_key") or ""
        if row["model"] == "memory.memory" and key.startswith("fact:"):
            _, scope, rest = key.split(":", 2)
            row["fields"]["stable_key"] = f"fact:{scope_ids.get(int(scope), int(scope))}:{rest}"
        if row["model"] == "memory.scope":
            row["fields"].pop("created_at")
            row["pk"] = scope_ids.get(row["pk"], row["pk"])
        for name in _scope_fields(row["model"]):
            value = row["fields"].get(name)
            if isinstance(value, list):
                row["fields"][name] = [scope_ids.get(pk, pk) for pk in value]
            elif value is not None:
                row["fields"][name] = scope_ids.get(value, value)
        rows.append(row)
    return sorted(rows, key=lambda row: (row["model"], row["pk"]))


def _same_rows(source: list[str], target: list[str]) -> None:
    landed = _scope_ids(target)
    moved = {pk: landed[key] for key, pk in _scope_ids(source).items()}
    assert _comparable(target) == _comparable(source, moved)
    assert {row["model"] for row in _rows(source)} >= {
        "memory.narrative",
        "memory.fact",
        "memory.selfconcept",
        "memory.evidence",
        "memory.auditevent",
        "memory.attentionevent",
        "memory.apikey",
        "dream.dreamrun",
    }
    statuses = {row["fields"]["status"] for row in _rows(source) if row["model"] == "memory.memory"}
    assert {"active", "candidate", "rejected", "superseded", "expired"} <= statuses


def test_it_names_every_model_it_exports_or_says_why_not():
    models = {
        model._meta.label_lower
        for app in ("memory", "dream", "injection")
        for model in apps.get_app_config(app).get_models()
    }
    assert models == set(EXPORTED_MODELS) | set(NOT_EXPORTED)


@pytest.fixture
def global_scope_elsewhere(db) -> None:
    """The source's global scope under another id than the one a fresh database gives its own
    (as in a store that was itself imported once): the import folds it into the target's global
    scope, and every row that points at it must follow."""
    scope_global()
    Scope.objects.filter(kind=ScopeKind.GLOBAL).update(id=1000)


@pytest.mark.slow
def test_it_round_trips_the_store_into_a_fresh_sqlite_database(
    global_scope_elsewhere, seeded, global_scope, tmp_path
):
    assert global_scope.pk == 1000
    export = tmp_path / "store.jsonl"
    call_command("export", str(export), stderr=io.StringIO())
    assert oct(export.stat().st_mode & 0o777) == "0o600"
    source = export.read_text(encoding="utf-8").splitlines()

    target, results = _round_trip(f"sqlite:///{tmp_path / 'fresh.sqlite3'}", export)

    _same_rows(source, target)
    assert results == _search_results()
    assert results[0] and results[2] and results[-1]


@pytest.mark.slow
@pytest.mark.postgres
def test_it_round_trips_the_store_into_a_fresh_postgresql_database(seeded, tmp_path):
    admin_url = "postgresql://postgres@127.0.0.1:5432/postgres"
    name = f"tideline_move_{os.getpid()}"
    try:
        admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError:
        service_required("postgresql", "the round trip lands in a real PostgreSQL database")
    export = tmp_path / "store.jsonl"
    call_command("export", str(export), stderr=io.StringIO())
    source = export.read_text(encoding="utf-8").splitlines()
    admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        target, results = _round_trip(f"postgres://postgres@127.0.0.1:5432/{name}", export)
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()

    _same_rows(source, target)
    assert results == _search_results()


def test_it_exports_one_scope_with_what_its_rows_point_at(seeded, project_scope, global_scope):
    rows = _rows(_export(scope=project_scope))
    memories = {row["pk"]: row["fields"] for row in rows if row["model"] == "memory.memory"}
    own = set(Memory.objects.filter(scope=project_scope).values_list("pk", flat=True))

    assert own <= set(memories)
    assert {fields["scope"] for fields in memories.values()} == {project_scope.pk}
    assert {row["model"] for row in rows} & {"memory.apikey", "dream.topiccluster"} == set()
    # The project's fact belongs to the user profile; the profile and its scope come along.
    profiles = {row["pk"]: row["fields"] for row in rows if row["model"] == "memory.profile"}
    fact = Fact.objects.get(scope=project_scope)
    assert fact.profile_id in profiles
    scopes = {row["pk"] for row in rows if row["model"] == "memory.scope"}
    assert {project_scope.pk, profiles[fact.profile_id]["scope"]} <= scopes
    # Every evidence row of the scope's memories travels with it (the narrative's own, and the
    # one capture gave the candidate flushed from the user's turn).
    evidence = set(
        Evidence.objects.filter(memory__scope=project_scope).values_list("pk", flat=True)
    )
    assert evidence and evidence <= {row["pk"] for row in rows if row["model"] == "memory.evidence"}
    audited = [r["fields"] for r in rows if r["model"] == "memory.auditevent"]
    about_memories = [a for a in audited if a["target_type"] in ("narrative", "fact", "memory")]
    assert about_memories and {a["target_id"] for a in about_memories} <= set(memories)
    billing = Narrative.objects.get(gesture__startswith="The billing service")
    assert billing.pk not in memories


def test_it_refuses_to_export_a_scope_the_store_does_not_have(db, tmp_path):
    with pytest.raises(CommandError, match="names no scope"):
        call_command("export", str(tmp_path / "x.jsonl"), "--scope", "project:/nowhere/at/all")
    assert not (tmp_path / "x.jsonl").exists()


def test_it_leaves_vectors_out_when_asked(seeded):
    rows = _rows(_export(embeddings=False))
    memory_rows = [row for row in rows if row["model"] in ("memory.memory", "memory.contextturn")]
    assert memory_rows and not any("embedding" in row["fields"] for row in memory_rows)
    with_vectors = _rows(_export())
    ready = [r for r in with_vectors if r["model"] == "memory.memory" and r["fields"]["embedding"]]
    assert ready


@pytest.mark.slow
def test_it_imports_a_scope_without_vectors_into_a_fresh_database_and_leaves_them_pending(
    seeded, project_scope, tmp_path
):
    export = tmp_path / "project.jsonl"
    call_command(
        "export", str(export), "--scope", str(project_scope.pk), "--without-embeddings",
        stderr=io.StringIO(),
    )  # fmt: skip
    url = f"sqlite:///{tmp_path / 'fresh.sqlite3'}"
    _manage(url, "migrate", "--noinput", "-v0")
    _manage(url, "import_store", str(export))
    target = sqlite3.connect(tmp_path / "fresh.sqlite3")
    statuses = {row[0] for row in target.execute("SELECT embedding_status FROM memory_memory")}
    imported = target.execute("SELECT count(*) FROM memory_memory").fetchone()[0]
    target.close()
    assert statuses == {EmbeddingStatus.PENDING}
    assert imported == sum(1 for row in _rows(export.read_text().splitlines()) if row["model"] == "memory.memory")  # fmt: skip


def test_it_refuses_to_import_over_rows_that_hold_the_same_ids(seeded, tmp_path):
    export = tmp_path / "store.jsonl"
    export.write_text("\n".join(_export()) + "\n", encoding="utf-8")
    before = (Memory.objects.count(), AuditEvent.objects.count(), ContextTurn.objects.count())

    with pytest.raises(Conflict, match="import into a fresh database"):
        store_import(path=export)
    with pytest.raises(CommandError, match="already holds rows"):
        call_command("import_store", str(export))

    assert (
        Memory.objects.count(),
        AuditEvent.objects.count(),
        ContextTurn.objects.count(),
    ) == before


def test_it_refuses_a_truncated_export(seeded, tmp_path):
    lines = _export()
    export = tmp_path / "cut.jsonl"
    export.write_text("\n".join(lines[:-3]) + "\n", encoding="utf-8")
    with pytest.raises(CommandError, match="incomplete"):
        call_command("import_store", str(export))


def test_it_backs_up_a_live_sqlite_store_under_write_load(transactional_db, global_scope, tmp_path):
    if connection.vendor != "sqlite":
        pytest.skip("backup copies SQLite; on PostgreSQL it prints pg_dump guidance (tested too)")
    stop = threading.Event()
    written: list[int] = []
    errors: list[BaseException] = []

    def writer(worker: int) -> None:
        try:
            session = session_start(
                runtime="load", external_id=f"writer-{worker}", scope_id=global_scope.pk
            )
            n = 0
            while not stop.is_set():
                turns_record(
                    session_id=session.pk,
                    turns=[TurnInput(role="user", content=f"writer {worker} line {n} " * 20)],
                )
                n += 1
                written.append(n)
        except BaseException as exc:  # the assertion below reports it
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    try:
        while len(written) < 20:
            time.sleep(0.05)
        backups = [tmp_path / f"backup-{k}.sqlite3" for k in range(3)]
        for backup in backups:
            call_command("backup", str(backup), stdout=io.StringIO())
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)

    assert not errors, errors
    assert len(written) > 20
    for backup in backups:
        assert oct(backup.stat().st_mode & 0o777) == "0o600"
        copy = sqlite3.connect(backup)
        assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert copy.execute("SELECT count(*) FROM memory_contextturn").fetchone()[0] > 0
        copy.close()
    url = f"sqlite:///{backups[-1]}"
    _manage(url, "check")
    assert "No migrations to apply" in _manage(url, "migrate", "--noinput")


def test_it_refuses_to_back_up_over_the_live_database(db):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite only")
    with pytest.raises(CommandError, match="must not overwrite"):
        call_command("backup", connection.settings_dict["NAME"])


def test_it_prints_pg_dump_guidance_for_postgresql(db, tmp_path):
    if connection.vendor != "postgresql":
        pytest.skip("runs in the PostgreSQL pass of the suite")
    with pytest.raises(CommandError, match="pg_dump --format=custom") as refused:
        call_command("backup", str(tmp_path / "store.dump"))
    assert connection.settings_dict["NAME"] in str(refused.value)
    assert not (tmp_path / "store.dump").exists()


@pytest.mark.slow
def test_it_imports_a_scope_s_audit_rows_without_the_source_store_s_keys(
    seeded, project_scope, tmp_path
):
    source_key = ApiKey.objects.get(name="laptop")
    keyed = set(AuditEvent.objects.filter(key_id=source_key.pk).values_list("pk", flat=True))
    export = tmp_path / "project.jsonl"
    call_command("export", str(export), "--scope", str(project_scope.pk), stderr=io.StringIO())
    exported = {r["pk"] for r in _rows(export.read_text().splitlines())}
    assert keyed & exported
    database = tmp_path / "fresh.sqlite3"
    url = f"sqlite:///{database}"
    _manage(url, "migrate", "--noinput", "-v0")
    _manage(url, "import_store", str(export))

    target = sqlite3.connect(database)
    keys = target.execute(
        "SELECT key_id FROM memory_auditevent WHERE target_type != 'store'"
    ).fetchall()
    imported = target.execute(
        "SELECT after FROM memory_auditevent WHERE target_type = 'store'"
    ).fetchone()[0]
    target.close()
    assert {key_id for (key_id,) in keys} == {None}
    unlinked = json.loads(imported)["audit_rows_by_source_key"]
    assert set(unlinked[str(source_key.pk)]) == keyed & exported


@pytest.fixture
def sqlite_store(db):
    if connection.vendor != "sqlite":
        pytest.skip("backup copies SQLite; on PostgreSQL it prints pg_dump guidance")


def _leftovers(folder: Path) -> list[str]:
    return [path.name for path in folder.iterdir() if path.name.endswith(".partial")]


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
def test_it_refuses_to_back_up_over_the_live_database_s_journals(sqlite_store, suffix):
    journal = Path(connection.settings_dict["NAME"] + suffix)
    before = journal.read_bytes() if journal.exists() else None
    with pytest.raises(CommandError, match="live store's own files"):
        call_command("backup", str(journal), stdout=io.StringIO())
    assert (journal.read_bytes() if journal.exists() else None) == before
    assert Scope.objects.exists()


def test_it_refuses_to_back_up_over_the_stores_secret_key_but_beside_it(
    sqlite_store, settings, tmp_path
):
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    secret = settings.DATA_DIR / "secret_key"
    secret.write_text("the store's signing key")
    with pytest.raises(CommandError, match="live store's own files"):
        call_command("backup", str(secret), stdout=io.StringIO())
    assert secret.read_text() == "the store's signing key"
    # The README's own example keeps backups in the data directory, beside the store.
    call_command("backup", str(settings.DATA_DIR / "backup.sqlite3"), stdout=io.StringIO())
    assert sorted(p.name for p in settings.DATA_DIR.iterdir()) == ["backup.sqlite3", "secret_key"]


def test_it_refuses_to_back_up_over_what_is_not_a_regular_file(sqlite_store, tmp_path, monkeypatch):
    folder = tmp_path / "adir"
    folder.mkdir()
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    monkeypatch.chdir(folder)
    with pytest.raises(CommandError, match="is a directory"):
        call_command("backup", str(folder), stdout=io.StringIO())
    with pytest.raises(CommandError, match="is a directory"):
        call_command("backup", "", stdout=io.StringIO())
    with pytest.raises(CommandError, match="not a regular file"):
        call_command("backup", str(fifo), stdout=io.StringIO())
    assert _leftovers(tmp_path) == _leftovers(folder) == []
    assert folder.is_dir() and fifo.is_fifo()


def test_it_reports_a_backup_it_cannot_write_and_leaves_no_copy(sqlite_store, tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("a file, not a directory")
    with pytest.raises(CommandError, match="cannot write the backup"):
        call_command("backup", str(plain / "x.sqlite3"), stdout=io.StringIO())
    too_long = tmp_path / ("b" * 250)
    with pytest.raises(CommandError, match="cannot write the backup"):
        call_command("backup", str(too_long), stdout=io.StringIO())
    assert plain.read_text() == "a file, not a directory"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain"]


def _small_export(tmp_path: Path) -> list[str]:
    """A scope and a session no store here holds: an export this store can take."""
    scope = scope_ensure(kind=ScopeKind.PROJECT, key="/moving/elsewhere")
    session_start(runtime="test", external_id="moving-1", scope_id=scope.pk)
    rows = [
        r for r in _rows(_export(scope=scope)) if r["model"] in ("memory.scope", "memory.session")
    ]
    scope_row = next(r for r in rows if r["model"] == "memory.scope")
    session_row = next(r for r in rows if r["model"] == "memory.session")
    scope_row.update(pk=900001)
    scope_row["fields"]["key"] = "/moved/here"
    session_row.update(pk=900001)
    session_row["fields"].update(scope=900001, external_id="moved-1")
    header = {
        "format": "tideline-export",
        "version": 1,
        "scope": None,
        "embeddings": False,
        "counts": {"memory.scope": 1, "memory.session": 1},
    }
    return [json.dumps(line) for line in (header, scope_row, session_row)]


def _damaged(lines: list[str], damage: str) -> bytes:
    header, scope_row, session_row = (json.loads(line) for line in lines)
    fields = session_row["fields"]
    match damage:
        case "not utf-8":
            return "\n".join(lines).encode().replace(b"moved-1", b"moved-\xff") + b"\n"
        case "header is a list":
            header = [1]
        case "counts is a list":
            header["counts"] = []
        case "row without fields":
            del session_row["fields"]
        case "unknown field":
            fields["colour"] = "blue"
        case "bad datetime":
            fields["started_at"] = "2026-99-01T00:00:00Z"
        case "missing scope":
            fields["scope"] = 777777
        case "null required field":
            fields["external_id"] = None
        case "scope id out of range":
            fields["scope"] = 2**70
        case "lone surrogate":
            fields["external_id"] = "moved-\ud800"
        case "repeated row":
            header["counts"]["memory.session"] = 2
            return "\n".join([json.dumps(header), *lines[1:], lines[2]]).encode() + b"\n"
    return "\n".join(json.dumps(row) for row in (header, scope_row, session_row)).encode() + b"\n"


def test_it_imports_the_small_export_it_damages_below(db, tmp_path):
    export = tmp_path / "small.jsonl"
    export.write_text("\n".join(_small_export(tmp_path)) + "\n", encoding="utf-8")
    call_command("import_store", str(export), stdout=io.StringIO())
    assert Session.objects.get(external_id="moved-1").scope.key == "/moved/here"


@pytest.mark.parametrize(
    ("damage", "line"),
    [
        ("not utf-8", 3),
        ("header is a list", 1),
        ("counts is a list", 1),
        ("row without fields", 3),
        ("unknown field", 3),
        ("bad datetime", 3),
        ("missing scope", 3),
        ("null required field", 3),
        ("scope id out of range", 3),
        ("lone surrogate", 3),
        ("repeated row", 4),
    ],
)
def test_it_refuses_a_damaged_export_naming_its_line_and_changes_nothing(
    db, tmp_path, damage, line
):
    export = tmp_path / "damaged.jsonl"
    export.write_bytes(_damaged(_small_export(tmp_path), damage))
    before = (Scope.objects.count(), Session.objects.count(), AuditEvent.objects.count())

    with pytest.raises(CommandError, match=rf"damaged\.jsonl:{line} "):
        call_command("import_store", str(export), stdout=io.StringIO())

    assert (Scope.objects.count(), Session.objects.count(), AuditEvent.objects.count()) == before


def test_it_reports_an_export_it_cannot_write(db, tmp_path):
    (tmp_path / "adir").mkdir()
    (tmp_path / "plain").write_text("kept")
    (tmp_path / "taken.jsonl").write_text("kept")
    cases = {
        "nodir/x.jsonl": "cannot write",
        "plain/x.jsonl": "cannot write",
        "adir": "is a directory",
        "taken.jsonl": "exists; export never overwrites",
    }
    for name, message in cases.items():
        with pytest.raises(CommandError, match=message):
            call_command("export", str(tmp_path / name), stderr=io.StringIO())
    assert (tmp_path / "plain").read_text() == (tmp_path / "taken.jsonl").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "plain", "taken.jsonl"]


def test_it_exports_the_global_scope_by_its_id_and_its_label(db, global_scope, tmp_path):
    for number, spec in enumerate([str(global_scope.pk), global_scope.label, "global"]):
        export = tmp_path / f"global-{number}.jsonl"
        call_command("export", str(export), "--scope", spec, stderr=io.StringIO())
        header = json.loads(export.read_text().splitlines()[0])
        assert header["scope"]["kind"] == ScopeKind.GLOBAL
    with pytest.raises(CommandError, match="names no scope"):
        call_command("export", str(tmp_path / "bogus.jsonl"), "--scope", "bogus")


MOVED_KEY_SCRIPT = """
import json
from memory.models import Fact, MemoryStatus, Scope
from memory.models.memories import fact_stable_key
from memory.services.errors import Conflict
from memory.services.facts import FactInput, fact_write
from memory.services.lifecycle import memory_restore
moved = Scope.objects.get(key=PROJECT_KEY)
imported = Fact.objects.get(pk=IMPORTED_ID)
written = fact_write(data=FactInput(
    scope_id=moved.pk, profile_name="user", kind="fact", predicate="db_engine", value="MySQL 8",
))
try:
    memory_restore(memory_id=IMPORTED_ID)
    restore = "restored"
except Conflict:
    restore = "refused"
print(json.dumps({
    "scope": moved.pk,
    "key": imported.stable_key,
    "expected": fact_stable_key(
        scope_id=moved.pk, profile_id=imported.profile_id, predicate="db_engine"
    ),
    "restore": restore,
    "active": list(Fact.objects.filter(
        scope=moved, predicate="db_engine", status=MemoryStatus.ACTIVE
    ).values_list("pk", flat=True)),
    "written": written.pk,
}))
"""


@pytest.mark.slow
def test_it_keys_an_imported_fact_by_the_scope_id_it_lands_under(project_scope, tmp_path):
    old = fact_write(
        data=FactInput(
            scope_id=project_scope.pk,
            profile_name="user",
            kind="fact",
            predicate="db_engine",
            value="PostgreSQL 16",
        )
    )
    memory_expire(memory_id=old.pk, reason="the billing service moved off it")
    export = tmp_path / "project.jsonl"
    call_command("export", str(export), "--scope", str(project_scope.pk), stderr=io.StringIO())
    url = f"sqlite:///{tmp_path / 'fresh.sqlite3'}"
    _manage(url, "migrate", "--noinput", "-v0")
    _manage(
        url, "shell", "--no-imports", "-c",
        "from memory.models import Scope, ScopeKind\n"
        "from memory.services.scopes import scope_ensure\n"
        "first = scope_ensure(kind=ScopeKind.PROJECT, key='/first/here')\n"
        f"Scope.objects.filter(pk=first.pk).update(id={project_scope.pk})\n",
    )  # fmt: skip
    _manage(url, "import_store", str(export))

    found = json.loads(
        _manage(
            url, "shell", "--no-imports", "-c",
            f"PROJECT_KEY = {project_scope.key!r}\nIMPORTED_ID = {old.pk}\n{MOVED_KEY_SCRIPT}",
        )
    )  # fmt: skip

    assert found["scope"] != project_scope.pk
    assert found["key"] == found["expected"]
    assert found["restore"] == "refused" and found["active"] == [found["written"]]


def _memory_export() -> list[str]:
    """A scope and a narrative in it no store here holds: an export this store can take."""
    scope = scope_ensure(kind=ScopeKind.PROJECT, key="/moving/memory")
    narrative_write(data=NarrativeInput(scope_id=scope.pk, gesture="the archive moved"))
    rows = [
        r
        for r in _rows(_export(scope=scope))
        if r["model"] in ("memory.scope", "memory.memory", "memory.narrative")
    ]
    for row in rows:
        row["pk"] = 900002
    rows[0]["fields"]["key"] = "/moved/memory"
    rows[1]["fields"]["scope"] = 900002
    header = {
        "format": "tideline-export",
        "version": 1,
        "scope": None,
        "embeddings": False,
        "counts": {"memory.scope": 1, "memory.memory": 1, "memory.narrative": 1},
    }
    return [json.dumps(line) for line in (header, *rows)]


def test_it_imports_the_memory_export_it_damages_below(db, tmp_path):
    export = tmp_path / "memory.jsonl"
    export.write_text("\n".join(_memory_export()) + "\n", encoding="utf-8")
    call_command("import_store", str(export), stdout=io.StringIO())
    assert Narrative.objects.get(pk=900002).scope.key == "/moved/memory"


@pytest.mark.parametrize(
    ("line", "field", "value"),
    [
        (2, "kind", "bogus"),
        (3, "status", "bogus"),
        (3, "confidence", 5.0),
        (3, "importance", 99),
        (3, "depends_on", "path:/work"),
        (3, "depends_on", [1, {"path": "/work"}]),
        (3, "depends_on", ["somewhere"]),
        (4, "layer", "bogus"),
        (4, "weight", 2.0),
        (4, "tags", "archive"),
    ],
)
def test_it_refuses_a_value_its_model_refuses_naming_its_line_and_changes_nothing(
    db, tmp_path, line, field, value
):
    rows = [json.loads(text) for text in _memory_export()]
    rows[line - 1]["fields"][field] = value
    export = tmp_path / "invalid.jsonl"
    export.write_text("\n".join(json.dumps(row) for row in rows) + "\n", encoding="utf-8")
    before = (Scope.objects.count(), Memory.objects.count(), AuditEvent.objects.count())

    with pytest.raises(CommandError, match=rf"invalid\.jsonl:{line} .*{field}"):
        call_command("import_store", str(export), stdout=io.StringIO())

    assert (Scope.objects.count(), Memory.objects.count(), AuditEvent.objects.count()) == before


def test_it_ends_an_imported_row_that_ends_before_it_begins_where_it_begins(db, tmp_path):
    """An export of an older release may hold a row a backdated write left ending before it
    began; it lands repaired, with an audit row saying so."""
    lines = _memory_export()
    memory_row = json.loads(lines[2])
    memory_row["fields"]["valid_from"] = "2023-03-01T00:00:00Z"
    memory_row["fields"]["valid_to"] = "2019-01-01T00:00:00Z"
    lines[2] = json.dumps(memory_row)
    export = tmp_path / "memory.jsonl"
    export.write_text("\n".join(lines) + "\n", encoding="utf-8")

    call_command("import_store", str(export), stdout=io.StringIO())

    imported = Memory.objects.get(pk=900002)
    assert imported.valid_to == imported.valid_from
    [repair] = AuditEvent.objects.filter(target_id=900002, action="update")
    assert repair.before == {"valid_to": "2019-01-01T00:00:00+00:00"}


def test_it_refuses_a_header_count_that_is_no_number_naming_its_line(db, tmp_path):
    """A count of "1" compared unequal to the file's 1 row: the message said "has 1 rows, the
    header says 1"."""
    header, *rows = _small_export(tmp_path)
    damaged = json.loads(header)
    damaged["counts"]["memory.session"] = "1"
    export = tmp_path / "counts.jsonl"
    export.write_text("\n".join([json.dumps(damaged), *rows]) + "\n", encoding="utf-8")

    with pytest.raises(CommandError, match=r"counts\.jsonl:1 .*memory\.session.*'1'.*whole number"):
        call_command("import_store", str(export), stdout=io.StringIO())


def _turn_export(tmp_path: Path) -> list[str]:
    """_small_export with one turn of its session appended."""
    lines = _small_export(tmp_path)
    scope = scope_ensure(kind=ScopeKind.PROJECT, key="/moving/turns")
    session = session_start(runtime="test", external_id="moving-turns", scope_id=scope.pk)
    turns_record(session_id=session.pk, turns=[TurnInput(role="user", content="the archive")])
    turn = next(r for r in _rows(_export(scope=scope)) if r["model"] == "memory.contextturn")
    turn.update(pk=900001)
    turn["fields"].update(session=900001, scope=900001)
    header = json.loads(lines[0])
    header["counts"]["memory.contextturn"] = 1
    return [json.dumps(header), *lines[1:], json.dumps(turn)]


def test_it_imports_the_turn_export_it_damages_below(db, tmp_path):
    export = tmp_path / "turns.jsonl"
    export.write_text("\n".join(_turn_export(tmp_path)) + "\n", encoding="utf-8")
    call_command("import_store", str(export), stdout=io.StringIO())
    assert ContextTurn.objects.get(pk=900001).session.external_id == "moved-1"


def test_it_refuses_a_turn_of_a_session_neither_file_nor_store_holds_naming_its_line(db, tmp_path):
    """ContextTurn is ordered by its session's start: the check for dangling rows joined the
    sessions and so never saw a turn whose session is missing, and the commit failed on it."""
    lines = _turn_export(tmp_path)
    turn = json.loads(lines[3])
    turn["fields"]["session"] = 777777
    lines[3] = json.dumps(turn)
    export = tmp_path / "turns.jsonl"
    export.write_text("\n".join(lines) + "\n", encoding="utf-8")
    before = (Session.objects.count(), ContextTurn.objects.count(), AuditEvent.objects.count())

    with pytest.raises(CommandError, match=r"turns\.jsonl:4 points at a memory\.session row"):
        call_command("import_store", str(export), stdout=io.StringIO())

    assert (Session.objects.count(), ContextTurn.objects.count(), AuditEvent.objects.count()) == (
        before
    )


@pytest.mark.parametrize(
    ("model_id", "blob", "reason"),
    [
        ("some-other-model", b"\x00\x00\x80", "3 bytes"),
        (None, b"\x00\x00\x80?" * 3, "3 dimensions"),
    ],
)
def test_it_refuses_a_vector_of_the_wrong_size_naming_its_line(
    db, tmp_path, model_id, blob, reason
):
    """A vector of 3 bytes was stored, and every search after failed on it."""
    rows = [json.loads(text) for text in _memory_export()]
    rows[2]["fields"].update(
        embedding=base64.b64encode(blob).decode(),
        embedding_model=model_id or embedder_get().model_id,
        embedding_status=EmbeddingStatus.READY,
    )
    export = tmp_path / "vectors.jsonl"
    export.write_text("\n".join(json.dumps(row) for row in rows) + "\n", encoding="utf-8")

    with pytest.raises(CommandError, match=rf"vectors\.jsonl:3 .*embedding .*{reason}"):
        call_command("import_store", str(export), stdout=io.StringIO())

    assert not Memory.objects.filter(pk=900002).exists()


def test_it_refuses_vectors_of_one_model_with_two_sizes_naming_the_second(db, tmp_path):
    rows = [json.loads(text) for text in _memory_export()]
    second = json.loads(json.dumps(rows[2:]))
    for row in second:
        row["pk"] = 900003
    for row, size in ((rows[2], 2), (second[0], 3)):
        row["fields"].update(
            embedding=base64.b64encode(b"\x00\x00\x80?" * size).decode(),
            embedding_model="some-other-model",
            embedding_status=EmbeddingStatus.READY,
        )
    rows[0]["counts"]["memory.memory"] = rows[0]["counts"]["memory.narrative"] = 2
    lines = [rows[0], rows[1], rows[2], second[0], rows[3], second[1]]
    export = tmp_path / "vectors.jsonl"
    export.write_text("\n".join(json.dumps(row) for row in lines) + "\n", encoding="utf-8")

    with pytest.raises(CommandError, match=r"vectors\.jsonl:4 .*3 dimensions.* 2"):
        call_command("import_store", str(export), stdout=io.StringIO())


def test_it_searches_a_store_that_already_holds_a_vector_of_the_wrong_size(db, project_scope):
    """A store an earlier import damaged still answers, by its words, until reembed --all."""
    broken = narrative_write(
        data=NarrativeInput(scope_id=project_scope.pk, gesture="the archive moved to zstd")
    )
    Memory.objects.filter(pk=broken.pk).update(
        embedding=b"\x00\x00\x80",
        embedding_model=embedder_get().model_id,
        embedding_status=EmbeddingStatus.READY,
    )

    hits = memory_search(query="archive zstd", scope_ids=[project_scope.pk])

    assert [hit.memory.pk for hit in hits] == [broken.pk]
    # A plain reembed (not --all) embeds it again.
    call_command("reembed", stdout=io.StringIO())
    broken.refresh_from_db()
    assert len(bytes(broken.embedding)) == embedder_get().dim * 4
    assert memory_search(query="zstd compression", scope_ids=[project_scope.pk])[0].semantic


def _fact_export() -> list[str]:
    """A scope, a profile in it and a fact of that profile no store here holds."""
    scope = scope_ensure(kind=ScopeKind.PROJECT, key="/moving/facts")
    fact_write(
        data=FactInput(
            scope_id=scope.pk,
            profile_name="user",
            kind="fact",
            predicate="db_engine",
            value="PostgreSQL 16",
        )
    )
    wanted = ("memory.scope", "memory.profile", "memory.memory", "memory.fact")
    rows = sorted(
        (r for r in _rows(_export(scope=scope)) if r["model"] in wanted),
        key=lambda r: wanted.index(r["model"]),
    )
    for row in rows:
        row["pk"] = 900004
    rows[0]["fields"]["key"] = "/moved/facts"
    rows[1]["fields"]["scope"] = rows[2]["fields"]["scope"] = 900004
    rows[3]["fields"]["profile"] = 900004
    header = {
        "format": "tideline-export",
        "version": 1,
        "scope": None,
        "embeddings": False,
        "counts": {label: 1 for label in wanted},
    }
    return [json.dumps(line) for line in (header, *rows)]


def test_it_imports_the_fact_export_it_damages_below(db, tmp_path):
    export = tmp_path / "facts.jsonl"
    export.write_text("\n".join(_fact_export()) + "\n", encoding="utf-8")
    call_command("import_store", str(export), stdout=io.StringIO())
    assert Fact.objects.get(pk=900004).value == "PostgreSQL 16"


def test_it_refuses_a_current_fact_dated_ahead_naming_its_line(db, tmp_path):
    """Such a fact held its key while every read of the present passed it by; a write of it is
    refused for that reason."""
    lines = _fact_export()
    memory_row = json.loads(lines[3])
    memory_row["fields"]["valid_from"] = "2999-01-01T00:00:00Z"
    lines[3] = json.dumps(memory_row)
    export = tmp_path / "facts.jsonl"
    export.write_text("\n".join(lines) + "\n", encoding="utf-8")

    with pytest.raises(CommandError, match=r"facts\.jsonl:4 .*valid_from .*future"):
        call_command("import_store", str(export), stdout=io.StringIO())

    assert not Memory.objects.filter(pk=900004).exists()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_it_draws_the_export_and_import_progress_by_rows_on_a_terminal(db, tmp_path):
    export = tmp_path / "memory.jsonl"
    export.write_text("\n".join(_memory_export()) + "\n", encoding="utf-8")
    drawn = Terminal()

    call_command("import_store", str(export), stdout=io.StringIO(), stderr=drawn)
    call_command("export", str(tmp_path / "again.jsonl"), stderr=drawn)

    rows = sum(json.loads(export.read_text().splitlines()[0])["counts"].values())
    exported = sum(json.loads((tmp_path / "again.jsonl").open().readline())["counts"].values())
    assert "importing: 100%" in drawn.getvalue() and f"{rows}/{rows}" in drawn.getvalue()
    assert "exporting: 100%" in drawn.getvalue() and f"{exported}/{exported}" in drawn.getvalue()
