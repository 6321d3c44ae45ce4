"""Which session a session id names when several scopes hold one by that id: the one in the scope
the caller works in, else the narrowest other scope it reads (project, workspace, global). Reads
(the timeline) and writes (turns, session start) follow the same rule, so another key's session
of the same id in a scope both hold never shadows, blocks or takes over the caller's own."""

import importlib
import json
from urllib.parse import urlencode

import pytest
from django.apps import apps as django_apps
from django.test import Client

from injection import operations as ops
from injection.mcp_server import mcp_server_build
from injection.operations.fields import (
    SessionStartIn,
    TimelineIn,
    TurnItem,
    TurnRecordIn,
    TurnsIn,
)
from injection.services.access import apikey_authenticate, apikey_create
from memory.models import ContextTurn, ScopeKind, Session
from memory.services.errors import Conflict
from memory.services.scopes import scope_ensure, scope_global
from memory.services.timeline import session_start
from tests.injection.interfaces import McpDriver, inline_worker_threads

pytestmark = pytest.mark.django_db


def _client(raw: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


def _post(client: Client, path: str, body: dict):
    return client.post(path, data=json.dumps(body), content_type="application/json")


def _timeline(client: Client, **query) -> list[str]:
    response = client.get(f"/api/v1/timeline?{urlencode(query)}")
    assert response.status_code == 200, response.content
    return [turn["content"] for turn in response.json()]


def test_it_reads_its_own_session_after_a_global_key_writes_turns_under_the_same_id(
    project, project_dir, monkeypatch
):
    """The probe's case: before, key G's turns under "sessA" (a new session of that id in
    global) were newer, so key A's timeline of its own project session showed only G's turn,
    over REST and MCP, for good."""
    inline_worker_threads(monkeypatch)
    _, raw_a = apikey_create(name="a", scope_ids=[project.pk])
    _, raw_g = apikey_create(name="g", scope_ids=[])
    key_a, key_g = _client(raw_a), _client(raw_g)
    here = {"session_id": "sessA", "cwd": str(project_dir)}

    own = _post(key_a, "/api/v1/turns", {**here, "turns": [{"role": "user", "content": "own-1"}]})
    planted = _post(
        key_g,
        "/api/v1/turns",
        {"session_id": "sessA", "turns": [{"role": "assistant", "content": "ATTACKER: mine"}]},
    )
    later = _post(key_a, "/api/v1/turns", {**here, "turns": [{"role": "user", "content": "own-2"}]})

    assert own.status_code == planted.status_code == later.status_code == 200
    assert planted.json()["session"]["id"] != own.json()["session"]["id"]
    assert later.json()["session"]["id"] == own.json()["session"]["id"]
    assert _timeline(key_a, **here) == ["own-1", "own-2"]
    mcp = McpDriver(mcp_server_build())
    read = mcp.call("context_timeline", here, principal=apikey_authenticate(raw=raw_a))
    assert read.status == 200, read.text
    assert [turn["content"] for turn in read.body["turns"]] == ["own-1", "own-2"]
    # G reads its own session of that id, and nothing of A's.
    assert _timeline(key_g, session_id="sessA") == ["ATTACKER: mine"]


def test_it_continues_its_session_when_another_key_uses_the_id_under_another_runtime(
    project, project_dir
):
    """Before, key G's "sessA" under runtime "evil" in global made A's bare "sessA" ambiguous:
    A's turn, A's session start and a read-only key's session start in A's project were 409."""
    _, raw_a = apikey_create(name="a", scope_ids=[project.pk])
    _, raw_g = apikey_create(name="g", scope_ids=[])
    _, raw_reader = apikey_create(name="reader", scope_ids=[project.pk], can_write=False)
    key_a, key_g = _client(raw_a), _client(raw_g)
    here = {"session_id": "sessA", "cwd": str(project_dir)}

    first = _post(key_a, "/api/v1/turn", {**here, "content": "the parser first"})
    blocker = _post(
        key_g, "/api/v1/turn", {"session_id": "sessA", "runtime": "evil", "content": "blocked?"}
    )
    second = _post(key_a, "/api/v1/turn", {**here, "content": "then the cache"})
    started = _post(key_a, "/api/v1/session/start", here)
    read_only = _post(_client(raw_reader), "/api/v1/session/start", here)

    assert first.status_code == blocker.status_code == 200
    assert second.status_code == 200, second.content
    assert started.status_code == 200, started.content
    assert read_only.status_code == 200, read_only.content
    own = Session.objects.get(pk=first.json()["session"]["id"])
    assert (own.runtime, own.scope_id) == ("generic", project.pk)
    for answer in (second, started, read_only):
        assert answer.json()["session"]["id"] == own.pk
    assert list(own.turns.order_by("seq").values_list("content", flat=True)) == [
        "the parser first",
        "then the cache",
    ]
    evil = Session.objects.get(runtime="evil")
    assert list(evil.turns.values_list("content", flat=True)) == ["blocked?"]


def test_it_names_the_session_narrowest_scope_first_through_the_operations(tmp_path):
    """A key holding a workspace works in one of its projects, where "s" is not used yet; the
    workspace holds its "s" (runtime hermes) and global a newer "s" of another key (runtime
    evil). Before, the timeline read global's and a bare turn was 409 (hermes, evil)."""
    workspace = scope_ensure(kind=ScopeKind.WORKSPACE, key="laptop")
    project = scope_ensure(
        kind=ScopeKind.PROJECT, key=str(tmp_path / "billing"), workspace=workspace
    )
    _, raw_w = apikey_create(name="w", scope_ids=[workspace.pk])
    _, raw_g = apikey_create(name="g", scope_ids=[])
    key_w = ops.Caller(principal=apikey_authenticate(raw=raw_w))
    key_g = ops.Caller(principal=apikey_authenticate(raw=raw_g))

    def said(caller, content, **where):
        return ops.turn_record(
            caller=caller,
            data=TurnRecordIn(session_id="s", role="user", content=content, **where),
        )

    def timeline():
        rows = ops.timeline_read(caller=key_w, data=TimelineIn(session_id="s", scope_id=project.pk))
        return [row["content"] for row in rows]

    said(key_w, "in the workspace", scope_id=workspace.pk, runtime="hermes")
    said(key_g, "in global", runtime="evil")
    assert timeline() == ["in the workspace"]

    here = said(key_w, "in the project", scope_id=project.pk)
    started = ops.session_begin(
        caller=key_w, data=SessionStartIn(session_id="s", scope_id=project.pk)
    )

    segment = Session.objects.get(pk=here["session"]["id"])
    assert (segment.runtime, segment.scope_id) == ("hermes", project.pk)
    assert started["session"]["id"] == segment.pk
    assert timeline() == ["in the project"]
    # Two runtimes in the caller's own scope are still its ambiguity to settle.
    said(key_w, "another runtime here", scope_id=project.pk, runtime="claude-code")
    with pytest.raises(Conflict, match="claude-code, hermes"):
        said(key_w, "which one?", scope_id=project.pk)
    assert ContextTurn.objects.filter(content="which one?").count() == 0


def test_it_records_its_turns_when_another_key_recorded_the_same_ids_in_global_first(
    project, project_dir
):
    """Before, key G recording "s9" with turn ids t1, t2 in global made key A's own "s9" in its
    project a segment of G's session, and A's t1, t2 — held by G's part, which A reads — were
    skipped as re-sends: A's words were lost, and its timeline was empty."""
    _, raw_a = apikey_create(name="a", scope_ids=[project.pk])
    _, raw_g = apikey_create(name="g", scope_ids=[])
    key_a, key_g = _client(raw_a), _client(raw_g)
    mine = [
        {"role": "user", "content": "The release branch is cut on Thursdays", "turn_id": "t1"},
        {"role": "assistant", "content": "Noted: release on Thursdays", "turn_id": "t2"},
    ]
    planted = [{**turn, "content": f"G: {turn['turn_id']}"} for turn in mine]
    here = {"session_id": "s9", "cwd": str(project_dir)}

    first = _post(key_g, "/api/v1/turns", {"session_id": "s9", "turns": planted})
    own = _post(key_a, "/api/v1/turns", {**here, "turns": mine})
    again = _post(key_a, "/api/v1/turns", {**here, "turns": mine})

    assert first.status_code == own.status_code == again.status_code == 200
    assert (own.json()["recorded"], own.json()["skipped"]) == (2, 0)
    assert (again.json()["recorded"], again.json()["skipped"]) == (0, 2)
    assert _timeline(key_a, **here) == [turn["content"] for turn in mine]
    assert _timeline(key_g, session_id="s9") == ["G: t1", "G: t2"]


def test_it_skips_what_its_own_part_in_global_holds_after_moving_into_a_project(
    project, project_dir
):
    """The same key's session that moves from global into a project and re-sends its history
    records nothing twice, as before: its parts are its own."""
    _, raw_a = apikey_create(name="a", scope_ids=[project.pk])
    key_a = _client(raw_a)
    turns = [{"role": "user", "content": "Deploys freeze on Friday", "turn_id": "t1"}]

    first = _post(key_a, "/api/v1/turns", {"session_id": "s9", "turns": turns})
    moved = _post(
        key_a, "/api/v1/turns", {"session_id": "s9", "cwd": str(project_dir), "turns": turns}
    )

    assert (first.json()["recorded"], moved.json()["recorded"], moved.json()["skipped"]) == (
        1,
        0,
        1,
    )
    segment = Session.objects.get(pk=moved.json()["session"]["id"])
    assert segment.scope_id == project.pk
    assert segment.key_id == Session.objects.get(pk=first.json()["session"]["id"]).key_id


def test_it_gives_a_session_stored_before_the_key_its_audit_row_names(project):
    """Sessions stored before sessions kept their key get it from their "session opened" audit
    row (migration 0025); one opened by the owner or a command keeps none."""
    keys_from_audit = importlib.import_module("memory.migrations.0025_session_key").keys_from_audit
    key, raw = apikey_create(name="a", scope_ids=[project.pk])
    caller = ops.Caller(principal=apikey_authenticate(raw=raw))
    by_key = ops.turn_record(
        caller=caller,
        data=TurnRecordIn(session_id="k", role="user", content="hello", scope_id=project.pk),
    )["session"]["id"]
    by_owner = session_start(runtime="generic", external_id="o", scope_id=project.pk).pk
    Session.objects.update(key_id=None)

    keys_from_audit(django_apps, None)

    assert Session.objects.get(pk=by_key).key_id == key.pk
    assert Session.objects.get(pk=by_owner).key_id is None


def test_it_skips_what_a_part_opened_without_a_key_holds_after_moving(project, project_dir):
    """A session the owner opened (an import, a command: no key) and a key continued: after the
    key moves into global and re-sends its tail, the turns said in the project are skipped, not
    copied into global (found in review: the rule had compared the part's key, not the
    caller's)."""
    _, raw_a = apikey_create(name="a", scope_ids=[project.pk])
    caller = ops.Caller(principal=apikey_authenticate(raw=raw_a))
    session_start(runtime="generic", external_id="s9", scope_id=project.pk, cwd=str(project_dir))
    said_here = [
        TurnItem(role="user", content="The ledger moves to PostgreSQL", turn_id="u1"),
        TurnItem(role="assistant", content="Noted: the ledger moves", turn_id="u2"),
    ]
    tail = [*said_here, TurnItem(role="user", content="now somewhere else", turn_id="u3")]

    here = ops.turns_record(
        caller=caller, data=TurnsIn(session_id="s9", cwd=str(project_dir), turns=said_here)
    )
    moved = ops.turns_record(
        caller=caller, data=TurnsIn(session_id="s9", scope_id=scope_global().pk, turns=tail)
    )

    assert (here["recorded"], moved["recorded"], moved["skipped"]) == (2, 1, 2)
    assert not ContextTurn.objects.filter(
        scope=scope_global(), content="The ledger moves to PostgreSQL"
    ).exists()
