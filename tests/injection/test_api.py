import json
import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client

from injection.mcp_server import mcp_server_build
from injection.services.access import apikey_create
from memory.models import (
    ApiKey,
    AuditEvent,
    ContextTurn,
    Memory,
    MemoryStatus,
    Narrative,
    ScopeKind,
    Session,
)
from memory.services.embedding import memories_embed
from memory.services.facts import FactInput, fact_write
from memory.services.narratives import NarrativeInput, narrative_write
from memory.services.scopes import scope_ensure, scope_global, scope_resolve_for_write
from memory.services.timeline import segment_external_id
from tests.injection.conftest import narrative_seed, weights_set
from tests.injection.interfaces import McpDriver, inline_worker_threads

pytestmark = pytest.mark.django_db

ROUTES = [
    ("post", "/api/v1/session/start"),
    ("post", "/api/v1/turn"),
    ("post", "/api/v1/turns"),
    ("post", "/api/v1/facts"),
    ("post", "/api/v1/narratives"),
    ("get", "/api/v1/memories"),
    ("get", "/api/v1/memories/1"),
    ("patch", "/api/v1/memories/1"),
    ("delete", "/api/v1/memories/1"),
    ("get", "/api/v1/self-concept"),
    ("post", "/api/v1/self-concept"),
    ("get", "/api/v1/threads"),
    ("post", "/api/v1/threads"),
    ("patch", "/api/v1/threads/1"),
    ("get", "/api/v1/snapshots"),
    ("post", "/api/v1/snapshots"),
    ("get", "/api/v1/search?q=x"),
    ("get", "/api/v1/stats"),
    ("get", "/api/v1/attention"),
]


def _post(api, path, body):
    return api.post(path, data=json.dumps(body), content_type="application/json")


@pytest.mark.parametrize("method,path", ROUTES)
@pytest.mark.parametrize("header", [None, "Bearer tl_deadbeef_not-a-key", "Basic abc"])
def test_it_refuses_every_route_without_a_valid_key(db, method, path, header):
    client = Client(HTTP_AUTHORIZATION=header) if header else Client()

    if method == "get":
        response = client.get(path)
    else:
        response = getattr(client, method)(path, data="{}", content_type="application/json")

    assert response.status_code == 401
    assert "detail" in response.json()


def test_it_lists_every_route_in_the_openapi_schema(api):
    schema = api.get("/api/openapi.json").json()
    documented = {
        (method, path) for path, operations in schema["paths"].items() for method in operations
    }
    for method, path in ROUTES:
        template = path.split("?")[0].replace("/1", "/{memory_id}", 1)
        template = template.replace("/threads/1", "/threads/{thread_id}").replace(
            "threads/{memory_id}", "threads/{thread_id}"
        )
        assert (method, template) in documented
    assert api.get("/api/docs").status_code == 200


def test_it_starts_a_session_with_the_block(api, project, project_dir):
    weights_set({narrative_seed(project, "moved the index to trigram"): 0.9})

    response = _post(api, "/api/v1/session/start", {"session_id": "s1", "cwd": str(project_dir)})

    assert response.status_code == 200
    body = response.json()
    assert body["session"]["scope_id"] == project.pk
    assert "moved the index to trigram" in body["block"]
    assert body["sections"]["t2"][0]["text"] == "moved the index to trigram"
    assert body["tokens"] <= body["budget"]


def test_it_refuses_another_projects_scope(api, other_project, other_dir):
    foreign = narrative_seed(other_project, "billing plan")

    by_cwd = _post(api, "/api/v1/session/start", {"session_id": "s2", "cwd": str(other_dir)})
    by_id = api.get(f"/api/v1/memories?scope_id={other_project.pk}")
    by_memory = api.get(f"/api/v1/memories/{foreign.pk}")
    expire = api.delete(f"/api/v1/memories/{foreign.pk}")
    write = _post(
        api,
        "/api/v1/facts",
        {
            "scope_id": other_project.pk,
            "profile_name": "u",
            "kind": "fact",
            "predicate": "plan",
            "value": "x",
        },
    )

    assert by_cwd.status_code == 403
    assert by_id.status_code == 403
    assert by_memory.status_code == 404
    assert expire.status_code == 404
    assert write.status_code == 403
    assert Memory.objects.get(pk=foreign.pk).status == MemoryStatus.ACTIVE
    assert not Session.objects.filter(external_id="s2").exists()


def test_it_refuses_a_scope_it_may_not_use_as_one_that_does_not_exist(api, other_project):
    """Before, the refusal named the scope ("may not use the scope 项目·billing-service") and an
    unknown id answered "unknown scope": a key could list the store's projects by id."""
    missing = other_project.pk + 1000
    answers = [
        (api.get(f"/api/v1/memories?scope_id={scope_id}"), scope_id)
        for scope_id in (other_project.pk, missing)
    ] + [
        (_post(api, "/api/v1/narratives", {"scope_id": scope_id, "gesture": "x"}), scope_id)
        for scope_id in (other_project.pk, missing)
    ]

    assert {response.status_code for response, _ in answers} == {403}
    assert len({response.json()["detail"] for response, _ in answers}) == 1
    assert "billing" not in answers[0][0].json()["detail"]


def test_it_searches_only_what_the_key_holds(api, project, other_project):
    mine = narrative_seed(project, "the archive uses zstd compression")
    theirs = narrative_seed(other_project, "the billing uses zstd compression too")
    memories_embed(memory_ids=[mine.pk, theirs.pk])

    hits = api.get("/api/v1/search?q=zstd compression").json()

    assert [hit["memory"]["scope_id"] for hit in hits] == [project.pk]
    assert hits[0]["why"]


def test_it_gives_a_subagent_session_no_injection_and_does_not_capture_it(
    api, project, project_dir
):
    weights_set({narrative_seed(project, "heavy memory"): 0.9})
    child = {
        "session_id": "child",
        "cwd": str(project_dir),
        "origin": "subagent",
        "delegation_depth": 1,
    }

    start = _post(api, "/api/v1/session/start", child).json()
    turn = _post(api, "/api/v1/turn", {**child, "content": "heavy memory please"}).json()

    assert start["block"] == "" and turn["block"] == ""
    assert start["session"]["subagent"] is True
    assert turn["recorded"] is False
    assert not ContextTurn.objects.filter(session__external_id="child").exists()


def test_it_records_the_turn_and_returns_the_per_turn_block(api, project, project_dir):
    narrative_seed(project, "边界检查放在解析器里")

    response = _post(
        api,
        "/api/v1/turn",
        {
            "session_id": "s3",
            "cwd": str(project_dir),
            "content": "边界怎么处理比较好",
            "turn_id": "u1",
        },
    )

    body = response.json()
    assert response.status_code == 200, body
    assert body["recorded"] is True
    assert "边界检查放在解析器里" in body["block"]
    assert ContextTurn.objects.filter(session__external_id="s3", role="user").count() == 1


def test_it_syncs_turns_idempotently(api, project_dir):
    payload = {
        "session_id": "s4",
        "cwd": str(project_dir),
        "turns": [
            {"role": "user", "content": "hello", "turn_id": "a"},
            {"role": "assistant", "content": "hi there", "turn_id": "b"},
        ],
    }

    first = _post(api, "/api/v1/turns", payload).json()
    second = _post(api, "/api/v1/turns", payload).json()

    assert (first["recorded"], first["skipped"]) == (2, 0)
    assert (second["recorded"], second["skipped"]) == (0, 2)
    assert ContextTurn.objects.filter(session__external_id="s4").count() == 2


def test_it_updates_by_supersede_and_deletes_by_expiry(api, project):
    created = _post(
        api,
        "/api/v1/facts",
        {
            "scope_id": project.pk,
            "profile_name": "user",
            "kind": "preference",
            "predicate": "editor",
            "value": "vim",
        },
    ).json()

    updated = api.patch(
        f"/api/v1/memories/{created['id']}",
        data=json.dumps({"changes": {"value": "neovim"}}),
        content_type="application/json",
    ).json()
    deleted = api.delete(f"/api/v1/memories/{updated['id']}?reason=wrong")

    assert updated["value"] == "neovim" and updated["supersedes"] == created["id"]
    assert Memory.objects.get(pk=created["id"]).status == MemoryStatus.SUPERSEDED
    assert deleted.json()["status"] == MemoryStatus.EXPIRED
    assert Memory.objects.filter(pk=updated["id"]).exists()


def test_it_refuses_a_delete_whose_reason_is_in_a_body_it_would_not_read(api, project):
    """Before, the body's reason was dropped for "deleted through the API" and the delete done."""
    narrative = narrative_seed(project, "Release notes go out on Fridays", tags=["release"])

    refused = api.delete(
        f"/api/v1/memories/{narrative.pk}",
        data=json.dumps({"reason": "probe delete"}),
        content_type="application/json",
    )

    assert refused.status_code == 422 and "takes no body" in str(refused.json()["detail"])
    assert Memory.objects.get(pk=narrative.pk).status == MemoryStatus.ACTIVE
    deleted = api.delete(f"/api/v1/memories/{narrative.pk}?reason=probe delete")
    assert deleted.status_code == 200
    assert AuditEvent.objects.filter(target_id=narrative.pk, reason="probe delete").exists()


def test_it_edits_a_narrative_into_a_successor(api, project):
    narrative = narrative_seed(project, "first wording", tags=["x"])

    response = api.patch(
        f"/api/v1/memories/{narrative.pk}",
        data=json.dumps({"changes": {"gesture": "second wording"}}),
        content_type="application/json",
    )

    body = response.json()
    assert body["gesture"] == "second wording" and body["supersedes"] == narrative.pk
    old = Memory.objects.get(pk=narrative.pk)
    assert (old.status, old.superseded_by_id) == (MemoryStatus.SUPERSEDED, body["id"])


def test_it_writes_and_reads_threads_snapshots_and_self_concept(api, project):
    thread = _post(api, "/api/v1/threads", {"scope_id": project.pk, "content": "why decay?"}).json()
    _post(api, "/api/v1/snapshots", {"scope_id": project.pk, "content": "half done"})
    _post(api, "/api/v1/self-concept", {"field": "terrain", "content": "I work in small steps"})

    closed = api.patch(
        f"/api/v1/threads/{thread['id']}",
        data=json.dumps({"status": "explored"}),
        content_type="application/json",
    ).json()

    assert closed["status"] == "explored"
    assert api.get(f"/api/v1/snapshots?scope_id={project.pk}").json()[0]["content"] == "half done"
    assert api.get("/api/v1/self-concept").json()["terrain"]["content"] == "I work in small steps"
    assert api.get(f"/api/v1/threads?scope_id={project.pk}").json() == []


def test_it_reports_stats_and_attention(api, project):
    fact_write(
        data=FactInput(
            scope_id=project.pk, profile_name="u", kind="fact", predicate="os", value="debian"
        )
    )

    stats = api.get("/api/v1/stats").json()
    attention = api.get("/api/v1/attention?days=7").json()

    assert stats["memories"]["fact"]["active"] == 1
    assert len(attention["days"]) == 7


def test_it_refuses_a_key_without_global_the_self_concept(project):
    _, raw = apikey_create(name="narrow", scope_ids=[project.pk], include_global=False)

    response = Client(HTTP_AUTHORIZATION=f"Bearer {raw}").get("/api/v1/self-concept")

    assert response.status_code == 403


def test_it_refuses_writes_with_a_read_only_key(project):
    _, raw = apikey_create(name="reader", scope_ids=[project.pk], can_write=False)

    response = _post(
        Client(HTTP_AUTHORIZATION=f"Bearer {raw}"),
        "/api/v1/snapshots",
        {"scope_id": project.pk, "content": "nope"},
    )

    assert response.status_code == 403


def test_it_answers_malformed_json_with_a_4xx_message(api):
    response = api.post("/api/v1/session/start", data="{not json", content_type="application/json")

    assert 400 <= response.status_code < 500
    assert response.json()["detail"]


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"session_id": ""},
        {"session_id": "x", "delegation_depth": -1},
        {"session_id": "x", "origin": "robot"},
    ],
)
def test_it_rejects_invalid_fields(api, body):
    response = _post(api, "/api/v1/session/start", body)

    assert response.status_code == 422
    assert response.json()["detail"]


def test_it_refuses_oversized_bodies(api, settings):
    settings.TIDELINE_API_MAX_BODY_BYTES = 2048

    response = _post(
        api,
        "/api/v1/turns",
        {"session_id": "big", "turns": [{"role": "user", "content": "x" * 5000}]},
    )

    assert response.status_code == 413
    assert not Session.objects.filter(external_id="big").exists()


def test_it_answers_bad_edits_with_a_message(api, project):
    narrative = narrative_seed(project, "something")

    unknown = api.patch(
        f"/api/v1/memories/{narrative.pk}",
        data=json.dumps({"changes": {"weight": 1}}),
        content_type="application/json",
    )
    api.delete(f"/api/v1/memories/{narrative.pk}")
    twice = api.delete(f"/api/v1/memories/{narrative.pk}")

    assert unknown.status_code == 422 and "weight" in str(unknown.json()["detail"])
    assert twice.status_code == 409 and "already expired" in twice.json()["detail"]


def test_it_answers_every_write_with_the_decision_and_its_reason(api, project):
    fact = {
        "scope_id": project.pk,
        "profile_name": "user",
        "kind": "preference",
        "predicate": "editor",
        "value": "nvim",
    }

    inserted = _post(api, "/api/v1/facts", fact).json()
    again = _post(api, "/api/v1/facts", fact).json()
    changed = _post(api, "/api/v1/facts", {**fact, "value": "helix"}).json()
    rejected = _post(
        api, "/api/v1/narratives", {"scope_id": project.pk, "gesture": "要小心"}
    ).json()

    assert inserted["decision"]["action"] == "insert"
    assert again["decision"]["action"] == "skip" and again["id"] == inserted["id"]
    assert changed["decision"]["action"] == "invalidate"
    assert f"#{inserted['id']}" in changed["decision"]["reason"]
    assert rejected["status"] == "rejected"
    assert rejected["decision"]["action"] == "reject" and rejected["decision"]["reason"]


def test_it_stamps_audit_rows_with_the_key_and_the_request_id(api, project, api_key):
    response = api.post(
        "/api/v1/facts",
        data=json.dumps(
            {
                "scope_id": project.pk,
                "profile_name": "user",
                "kind": "fact",
                "predicate": "home_city",
                "value": "Lisbon",
            }
        ),
        content_type="application/json",
        HTTP_X_REQUEST_ID="req-from-the-client-1",
    )

    row = AuditEvent.objects.get(target_type="fact", target_id=response.json()["id"])
    assert row.actor == "agent"
    assert row.request_id == "req-from-the-client-1"
    assert row.key_id == ApiKey.objects.get(prefix=api_key.split("_")[1]).pk


def test_it_files_the_users_preference_globally_and_a_project_fact_in_its_project(
    api, project, project_dir
):
    preference = _post(
        api,
        "/api/v1/facts",
        {
            "cwd": str(project_dir),
            "profile_name": "user",
            "kind": "preference",
            "predicate": "responds_in",
            "value": "简体中文",
        },
    ).json()
    project_fact = _post(
        api,
        "/api/v1/facts",
        {
            "cwd": str(project_dir),
            "profile_name": "archive-manager",
            "profile_kind": "project",
            "kind": "fact",
            "predicate": "compression",
            "value": "zstd level 19",
        },
    ).json()
    narrative = _post(
        api, "/api/v1/narratives", {"cwd": str(project_dir), "gesture": "用户希望回复用简体中文"}
    ).json()

    assert preference["scope"] == scope_global().label
    assert "user" in preference["scope_chosen"]["why"]
    assert narrative["scope"] == scope_global().label
    assert project_fact["scope_id"] == project.pk


def test_it_keeps_a_preference_in_the_project_when_the_key_holds_no_global(project, project_dir):
    _, raw = apikey_create(name="no global", scope_ids=[project.pk], include_global=False)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")

    written = _post(
        client,
        "/api/v1/facts",
        {
            "cwd": str(project_dir),
            "profile_name": "user",
            "kind": "preference",
            "predicate": "editor",
            "value": "nvim",
        },
    ).json()

    assert written["scope_id"] == project.pk
    assert "does not hold" in written["scope_chosen"]["why"]


def _patch(api, memory_id, changes):
    return api.patch(
        f"/api/v1/memories/{memory_id}",
        data=json.dumps({"changes": changes}),
        content_type="application/json",
    )


def test_it_keeps_every_field_an_edit_does_not_change(api, project, tmp_path):
    written = _post(
        api,
        "/api/v1/narratives",
        {
            "scope_id": project.pk,
            "gesture": "moved the search index to trigram tables",
            "depends_on": [f"path:{tmp_path}"],
            "tags": ["search"],
            "importance": 4,
            "pinned": True,
        },
    ).json()

    edited = _patch(api, written["id"], {"gesture": "moved the search index to FTS5 trigram"})

    assert edited.status_code == 200, edited.json()
    body = edited.json()
    assert body["supersedes"] == written["id"]
    assert body["depends_on"] == [f"path:{tmp_path}"]
    assert body["tags"] == ["search"] and body["importance"] == 4 and body["pinned"] is True
    assert "FTS5" in body["summary"] and body["summary"] != written["summary"]
    old = api.get(f"/api/v1/memories/{written['id']}").json()
    assert old["status"] == "superseded" and old["superseded_by"] == body["id"]


def test_it_applies_create_limits_to_edits(api, project):
    written = _post(
        api,
        "/api/v1/narratives",
        {"scope_id": project.pk, "gesture": "The team chose zstd level 19"},
    ).json()

    for changes in ({"importance": 9}, {"tags": "abc"}, {"gesture": "x" * 501}, {"valence": 3}):
        answer = _patch(api, written["id"], changes)
        assert answer.status_code == 422, (changes, answer.json())
    assert Memory.objects.filter(status=MemoryStatus.ACTIVE).count() == 1


def test_it_takes_the_secret_flag_and_never_gives_the_memory_back(api, project):
    secret = _post(
        api,
        "/api/v1/facts",
        {
            "scope_id": project.pk,
            "profile_name": "user",
            "profile_kind": "person",
            "kind": "fact",
            "predicate": "door_code",
            "value": "canary-secret-4471",
            "secret": True,
        },
    ).json()
    public = _post(
        api, "/api/v1/narratives", {"scope_id": project.pk, "gesture": "the user said hello"}
    ).json()

    reads = [
        api.get(f"/api/v1/memories/{secret['id']}"),
        api.get(f"/api/v1/memories?scope_id={project.pk}&status="),
        api.get("/api/v1/search?q=canary-secret-4471 door_code"),
        api.get("/api/v1/profiles"),
    ]
    flagged = _patch(api, public["id"], {"secret": True})

    assert Memory.objects.get(pk=secret["id"]).secret is True
    assert reads[0].status_code == 404
    assert all("canary-secret-4471" not in r.content.decode() for r in reads[1:])
    assert flagged.status_code == 200 and Memory.objects.get(pk=public["id"]).secret is True
    assert api.get(f"/api/v1/memories/{public['id']}").status_code == 404


def test_it_follows_a_session_that_moves_into_another_project(
    project, project_dir, other_project, other_dir
):
    _, raw = apikey_create(name="both", scope_ids=[project.pk, other_project.pk])
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    narrative_seed(project, "canary-archive-31 the archive uses zstd")
    narrative_seed(other_project, "canary-billing-77 billing rounds half up")

    here = _post(
        client,
        "/api/v1/turns",
        {
            "session_id": "moving",
            "cwd": str(project_dir),
            "turns": [{"role": "user", "content": "a"}],
        },
    )
    there = _post(
        client,
        "/api/v1/turns",
        {
            "session_id": "moving",
            "cwd": str(other_dir),
            "turns": [{"role": "user", "content": "b"}],
        },
    )
    block = _post(
        client,
        "/api/v1/turn",
        {"session_id": "moving", "cwd": str(other_dir), "content": "how does billing round?"},
    )

    assert here.status_code == there.status_code == block.status_code == 200
    first, second = here.json()["session"], there.json()["session"]
    assert first["scope_id"] == project.pk and second["scope_id"] == other_project.pk
    assert Session.objects.get(pk=second["id"]).parent_id == first["id"]
    # The segment is answered under the id the runtime gave it, not the stored "moving@scope-N"
    # that would tell the agent the id is in use in another scope.
    assert first["external_id"] == second["external_id"] == "moving"
    assert set(
        ContextTurn.objects.filter(session_id=second["id"]).values_list("scope_id", flat=True)
    ) == {other_project.pk}
    assert "canary-billing-77" in block.json()["block"]
    assert "canary-archive-31" not in block.json()["block"]


def test_it_refuses_an_unknown_query_parameter(api, project):
    misspelt = api.get(f"/api/v1/memories?scope_id={project.pk}&stauts=expired")
    fine = api.get(f"/api/v1/memories?scope_id={project.pk}&status=expired")

    assert misspelt.status_code == 422 and "stauts" in str(misspelt.json()["detail"])
    assert fine.status_code == 200


def test_it_names_a_session_by_runtime_and_id_only_when_the_runtime_is_given(
    api, project, project_dir, monkeypatch
):
    inline_worker_threads(monkeypatch)
    where = {"session_id": "cc-42", "cwd": str(project_dir)}
    started = _post(api, "/api/v1/session/start", {**where, "runtime": "claude-code"})
    assert started.status_code == 200, started.json()

    # No runtime: the session this id already names, over REST and over MCP.
    assert _post(api, "/api/v1/turn", {**where, "content": "the parser first"}).status_code == 200
    mcp = McpDriver(mcp_server_build(default_cwd=str(project_dir)))
    recorded = mcp.call(
        "context_record", {**where, "role": "user", "content": "then the cache"}, principal=None
    )
    assert recorded.status == 200, recorded.text
    session = Session.objects.get()
    assert (session.runtime, session.turns.count()) == ("claude-code", 2)

    # A runtime given is part of the name: the same id from Hermes is another session.
    other = _post(api, "/api/v1/turn", {**where, "runtime": "hermes", "content": "hola"})
    assert other.status_code == 200, other.json()
    assert sorted(Session.objects.values_list("runtime", flat=True)) == ["claude-code", "hermes"]

    # Now the bare id is ambiguous: 409 naming both, and nothing recorded.
    ambiguous = _post(api, "/api/v1/turn", {**where, "content": "which one?"})
    assert ambiguous.status_code == 409
    assert "claude-code, hermes" in ambiguous.json()["detail"]
    assert ContextTurn.objects.count() == 3

    # An id nobody has used yet opens under the caller's default runtime.
    fresh = mcp.call("memory_session_start", {"session_id": "new-1"}, principal=None)
    assert fresh.status == 200, fresh.text
    assert Session.objects.get(external_id="new-1").runtime == "mcp"


def test_it_expires_what_depends_on_a_removed_directory_after_edits_through_rest_and_mcp(
    api, project, project_dir, tmp_path, monkeypatch
):
    inline_worker_threads(monkeypatch)
    build = tmp_path / "build-cache"
    build.mkdir()
    depends = [f"path:{build}"]
    fact = _post(
        api,
        "/api/v1/facts",
        {
            "scope_id": project.pk,
            "profile_name": "archive-manager",
            "profile_kind": "project",
            "kind": "fact",
            "predicate": "build_cache_dir",
            "value": "build-cache/",
            "depends_on": depends,
        },
    ).json()
    mcp = McpDriver(mcp_server_build(default_cwd=str(project_dir)))
    narrative = mcp.call(
        "memory_write",
        {"gesture": "we warm the build cache before tests", "depends_on": depends},
        principal=None,
    )
    assert narrative.status == 200, narrative.text

    # Edits through each interface keep the dependency they do not mention.
    assert "id" in fact, fact
    edited_fact = _patch(api, fact["id"], {"value": "build-cache/v2"})
    assert edited_fact.status_code == 200, edited_fact.json()
    edited_narrative = mcp.call(
        "memory_update",
        {"memory_id": narrative.body["id"], "changes": {"gesture": "we warm the cache nightly"}},
        principal=None,
    )
    assert edited_narrative.status == 200, edited_narrative.text
    successors = {edited_fact.json()["id"], edited_narrative.body["id"]}
    for memory in Memory.objects.filter(pk__in=successors):
        assert memory.depends_on == depends and memory.status == MemoryStatus.ACTIVE

    build.rmdir()
    planned = StringIO()
    call_command("maintain", "--dry-run", stdout=planned)
    listed = re.findall(r"^would expire: #(\d+) .*\(scope-gone\)", planned.getvalue(), re.M)
    assert {int(pk) for pk in listed} == successors, planned.getvalue()
    assert Memory.objects.filter(pk__in=successors, status=MemoryStatus.ACTIVE).count() == 2

    call_command("maintain", stdout=StringIO())
    for memory in Memory.objects.filter(pk__in=successors):
        assert (memory.status, memory.expired_by) == (MemoryStatus.EXPIRED, "scope-gone")
    gone = api.get(f"/api/v1/memories/{edited_fact.json()['id']}").json()
    assert gone["status"] == "expired"


def test_it_drops_nul_characters_instead_of_failing_the_write(api, project, project_dir):
    written = _post(
        api,
        "/api/v1/narratives",
        {"scope_id": project.pk, "gesture": "pasted a log\x00 with a NUL", "tags": ["lo\x00g"]},
    )
    assert written.status_code == 200, written.json()
    narrative = Narrative.objects.get(pk=written.json()["id"])
    assert (narrative.gesture, narrative.tags) == ("pasted a log with a NUL", ["log"])

    turn = _post(
        api,
        "/api/v1/turn",
        {"session_id": "nul-1", "cwd": str(project_dir), "content": "error:\x00 disk full"},
    )
    assert turn.status_code == 200, turn.json()
    assert ContextTurn.objects.get(session__external_id="nul-1").content == "error: disk full"


def test_it_shows_no_link_to_a_secret_that_replaced_a_value(api, project):
    """The owner's history keeps the link; an agent reading the old plain value sees no
    successor, as if the secret had never been written."""
    fact = {
        "scope_id": project.pk,
        "profile_name": "user",
        "kind": "fact",
        "predicate": "door_code",
    }
    plain = _post(api, "/api/v1/facts", {**fact, "value": "1234"}).json()
    secret = _post(api, "/api/v1/facts", {**fact, "value": "4821", "secret": True}).json()

    listed = api.get(f"/api/v1/memories?scope_id={project.pk}&status=").json()
    recalled = api.get(f"/api/v1/memories/{plain['id']}").json()

    assert Memory.objects.get(pk=plain["id"]).superseded_by_id == secret["id"]
    assert [(row["id"], row["superseded_by"]) for row in listed] == [(plain["id"], None)]
    assert recalled["status"] == "superseded" and recalled["superseded_by"] is None


def test_it_records_a_session_whose_id_a_subagent_uses_in_another_project(project, other_project):
    """Session ids are the runtime's, so two keys can pick the same one. Before, the second
    project's session became a segment of the first and took its origin: a subagent there made
    this ordinary session a subagent, and its turns went unrecorded."""
    _, raw_other = apikey_create(name="other tenant", scope_ids=[other_project.pk])
    _, raw_here = apikey_create(name="this tenant", scope_ids=[project.pk])
    body = {"session_id": "main", "turns": [{"role": "user", "content": "hello"}]}
    there = _post(
        Client(HTTP_AUTHORIZATION=f"Bearer {raw_other}"),
        "/api/v1/turns",
        {**body, "scope_id": other_project.pk, "origin": "subagent", "delegation_depth": 1},
    )
    here = _post(
        Client(HTTP_AUTHORIZATION=f"Bearer {raw_here}"),
        "/api/v1/turns",
        {**body, "scope_id": project.pk},
    )

    assert there.json()["captured"] is False  # subagents are not captured by default
    assert here.status_code == 200, here.content
    assert here.json()["captured"] is True and here.json()["recorded"] == 1
    assert here.json()["session"]["subagent"] is False
    assert ContextTurn.objects.filter(scope=project, content="hello").count() == 1


def test_it_reads_a_session_by_its_runtime_id_when_another_project_uses_it_too(
    project, other_project
):
    """The session is stored as a segment ("main@scope-N") because another project used "main"
    first; its own key still reads it as "main", as a read-only key's block does."""
    _, raw_other = apikey_create(name="other tenant", scope_ids=[other_project.pk])
    _, raw_here = apikey_create(name="this tenant", scope_ids=[project.pk])
    _, raw_reader = apikey_create(name="reader", scope_ids=[project.pk], can_write=False)
    body = {"session_id": "main", "turns": [{"role": "user", "content": "canary-here-5"}]}
    _post(
        Client(HTTP_AUTHORIZATION=f"Bearer {raw_other}"),
        "/api/v1/turns",
        {**body, "scope_id": other_project.pk, "turns": [{"role": "user", "content": "there"}]},
    )
    here = Client(HTTP_AUTHORIZATION=f"Bearer {raw_here}")
    recorded = _post(here, "/api/v1/turns", {**body, "scope_id": project.pk}).json()

    timeline = here.get(f"/api/v1/timeline?scope_id={project.pk}&session_id=main")
    block = _post(
        Client(HTTP_AUTHORIZATION=f"Bearer {raw_reader}"),
        "/api/v1/session/start",
        {"scope_id": project.pk, "session_id": "main"},
    )

    assert Session.objects.get(pk=recorded["session"]["id"]).external_id != "main"
    assert timeline.status_code == 200, timeline.content
    assert [turn["content"] for turn in timeline.json()] == ["canary-here-5"]
    assert block.status_code == 200, block.content
    assert block.json()["session"]["id"] == recorded["session"]["id"]


def test_it_refuses_a_session_id_that_names_a_segment_so_no_key_can_take_anothers(
    project, other_project
):
    """Before, key B could open "T…@scope-<A>" itself; when A's key then used "T…" after B had,
    A's segment id was B's session: A's turns failed with a RecursionError (at 200 characters
    the suffix was cut and re-added) or were stored under B's session as its child."""
    _, raw_other = apikey_create(name="other tenant", scope_ids=[other_project.pk])
    _, raw_here = apikey_create(name="this tenant", scope_ids=[project.pk])
    there = Client(HTTP_AUTHORIZATION=f"Bearer {raw_other}")
    here = Client(HTTP_AUTHORIZATION=f"Bearer {raw_here}")
    turn = [{"role": "user", "content": "b"}]
    taken = []
    for session_id in ("T" * 200, "main1"):
        _post(there, "/api/v1/turns", {"session_id": session_id, "turns": turn})
        forged = segment_external_id(external_id=session_id, scope_id=project.pk)
        refused = _post(there, "/api/v1/turns", {"session_id": forged, "turns": turn})
        assert refused.status_code == 400, refused.content
        assert "@scope-" in refused.json()["detail"]
        taken.append(_post(here, "/api/v1/turns", {"session_id": session_id, "turns": turn}))

    for session_id, response in zip(("T" * 200, "main1"), taken, strict=True):
        assert response.status_code == 200, response.content
        assert response.json()["recorded"] == 1
        assert response.json()["session"]["external_id"] == session_id
        timeline = here.get(f"/api/v1/timeline?session_id={session_id}")
        assert [turn["content"] for turn in timeline.json()] == ["b"]


def test_it_keeps_two_long_session_ids_with_one_prefix_apart_in_another_project(
    project, other_project
):
    _, raw_other = apikey_create(name="other tenant", scope_ids=[other_project.pk])
    _, raw_here = apikey_create(name="this tenant", scope_ids=[project.pk])
    there = Client(HTTP_AUTHORIZATION=f"Bearer {raw_other}")
    here = Client(HTTP_AUTHORIZATION=f"Bearer {raw_here}")
    ids = ("L" * 199 + "1", "L" * 199 + "2")
    for session_id in ids:
        _post(
            there,
            "/api/v1/turns",
            {"session_id": session_id, "turns": [{"role": "user", "content": "x"}]},
        )
    recorded = [
        _post(
            here,
            "/api/v1/turns",
            {"session_id": session_id, "turns": [{"role": "user", "content": session_id[-1]}]},
        ).json()
        for session_id in ids
    ]

    assert recorded[0]["session"]["id"] != recorded[1]["session"]["id"]
    assert [body["session"]["external_id"] for body in recorded] == list(ids)
    for session_id in ids:
        timeline = here.get(f"/api/v1/timeline?session_id={session_id}").json()
        assert [turn["content"] for turn in timeline] == [session_id[-1]]


def test_it_links_a_subagent_only_to_a_parent_session_of_its_own_scope(project, other_project):
    _, raw_other = apikey_create(name="other tenant", scope_ids=[other_project.pk])
    _, raw_here = apikey_create(name="this tenant", scope_ids=[project.pk])
    turn = [{"role": "user", "content": "hi"}]
    _post(
        Client(HTTP_AUTHORIZATION=f"Bearer {raw_other}"),
        "/api/v1/turns",
        {"session_id": "lead", "turns": turn},
    )
    here = Client(HTTP_AUTHORIZATION=f"Bearer {raw_here}")
    child = {
        "turns": turn,
        "origin": "subagent",
        "delegation_depth": 1,
        "parent_session_id": "lead",
    }
    stranger = _post(here, "/api/v1/turns", {**child, "session_id": "helper-1"}).json()
    _post(here, "/api/v1/turns", {"session_id": "lead", "turns": turn})
    own = _post(here, "/api/v1/turns", {**child, "session_id": "helper-2"}).json()

    assert Session.objects.get(pk=stranger["session"]["id"]).parent_id is None
    lead_here = Session.objects.get(scope=project, parent__isnull=False, origin="user")
    assert Session.objects.get(pk=own["session"]["id"]).parent_id == lead_here.pk


def test_it_takes_a_memory_dependency_only_on_a_memory_the_key_may_read(
    api, project, other_project
):
    own = narrative_seed(project, "the billing job runs at dawn")
    secret = narrative_seed(project, "the deploy token sits in the vault", secret=True)
    elsewhere = narrative_seed(other_project, "billing-service pins postgres 15")
    refusals = {}
    for dependency in (
        f"memory:{secret.pk}",
        f"memory:{elsewhere.pk}",
        "memory:999999",
        "memory:" + "9" * 30,
        "memory:²",
    ):
        response = _post(
            api,
            "/api/v1/narratives",
            {"scope_id": project.pk, "gesture": "reruns follow it", "depends_on": [dependency]},
        )
        assert response.status_code == 400, (dependency, response.json())
        refusals[dependency] = response.json()["detail"]

    taken = _post(
        api,
        "/api/v1/narratives",
        {"scope_id": project.pk, "gesture": "reruns follow it", "depends_on": [f"memory:{own.pk}"]},
    )

    assert taken.status_code == 200, taken.json()
    assert taken.json()["depends_on"] == [f"memory:{own.pk}"]
    # A secret, another project's memory and a missing one are refused alike.
    shapes = {text.replace(dependency, "…") for dependency, text in refusals.items()}
    assert len(shapes) <= 2, shapes
    assert not any("secret" in text or "billing-service" in text for text in refusals.values())


def test_it_keeps_an_edited_memorys_dependency_on_a_secret_the_key_may_not_read(api, project):
    secret = narrative_seed(project, "the deploy token sits in the vault", secret=True)
    written = narrative_write(
        data=NarrativeInput(
            scope_id=project.pk,
            gesture="deploys read the vault first",
            depends_on=[f"memory:{secret.pk}"],
        ),
        writer_sees_secrets=True,
    )

    edited = _patch(api, written.pk, {"gesture": "deploys read the vault before anything else"})

    assert edited.status_code == 200, edited.json()
    assert Memory.objects.get(pk=edited.json()["id"]).depends_on == [f"memory:{secret.pk}"]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/v1/narratives", {"gesture": "x", "valid_from": "9999-12-31T23:59:59-23:59"}),
        ("/api/v1/narratives", {"gesture": "x", "expires_at": "0001-01-01T00:00:00+14:00"}),
        (
            "/api/v1/facts",
            {
                "profile_name": "u",
                "kind": "fact",
                "predicate": "plan",
                "value": "x",
                "valid_from": "9999-12-31T00:00:00Z",
            },
        ),
        (
            "/api/v1/turns",
            {
                "session_id": "far-future",
                "turns": [
                    {"role": "user", "content": "x", "occurred_at": "9999-12-31T23:59:59-23:59"}
                ],
            },
        ),
    ],
)
def test_it_refuses_a_moment_the_store_cannot_hold_and_stores_nothing(api, project, path, body):
    """Before, these answered 500 (OverflowError converting the time zone or adding a TTL), and the
    turns left an empty session behind."""
    response = _post(api, path, body)

    assert response.status_code == 422, response.content
    assert "between" in json.dumps(response.json()["detail"])
    assert not Memory.objects.exists() and not Session.objects.exists()


def test_it_leaves_no_session_behind_for_turns_it_refuses(api, project):
    response = _post(
        api, "/api/v1/turns", {"session_id": "blank", "turns": [{"role": "user", "content": "  "}]}
    )

    assert response.status_code == 400, response.content
    assert not Session.objects.exists()


def test_it_records_a_transcripts_good_lines_past_the_bad_ones(api, project):
    def line(text, **extra):
        return json.dumps(
            {"type": "user", "uuid": f"u-{len(text)}", "message": {"content": text}, **extra}
        )

    lines = [
        "[" * 100_000 + "]" * 100_000,
        json.dumps(
            {"type": "user", "uuid": "n", "message": {"content": [{"type": "text", "text": 123}]}}
        ),
        line("\u0000\u0000"),
        line("the far future", timestamp="9999-12-31T23:59:59-23:59"),
        line("a lone \ud800 surrogate"),
        line("the migration moved to Tuesday"),
    ]

    response = _post(api, "/api/v1/transcripts", {"session_id": "cc-9", "lines": lines})

    assert response.status_code == 200, response.content
    assert response.json()["recorded"] == 3
    assert sorted(ContextTurn.objects.values_list("content", flat=True)) == [
        "a lone ? surrogate",
        "the far future",
        "the migration moved to Tuesday",
    ]


def test_it_reads_a_moment_without_a_time_zone_as_utc_in_its_answer_too(api, project):
    written = _post(
        api,
        "/api/v1/narratives",
        {"gesture": "the lease ends in spring", "expires_at": "2030-01-01T00:00:00"},
    )

    assert written.status_code == 200, written.content
    assert written.json()["expires_at"] == "2030-01-01T00:00:00+00:00"
    assert (
        api.get(f"/api/v1/memories/{written.json()['id']}").json()["expires_at"]
        == (written.json()["expires_at"])
    )


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
def test_it_refuses_a_number_that_is_not_finite_as_such(api, project, number):
    response = api.post(
        "/api/v1/narratives",
        data=f'{{"gesture": "x", "confidence": {number}}}',
        content_type="application/json",
    )

    assert response.status_code == 422
    assert "finite" in json.dumps(response.json()["detail"])


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("get", "/api/v1/nope", 404),
        ("get", "/api/v1/stats/", 404),
        ("put", "/api/v1/facts", 405),
    ],
)
def test_it_answers_a_route_it_does_not_serve_with_json(api, method, path, status):
    response = getattr(api, method)(path)

    assert response.status_code == status
    assert response.json()["detail"]


def test_it_skips_turns_resent_after_the_session_moved_into_another_project(
    project, other_project, project_dir, other_dir
):
    """Before, a runtime re-sending its history after a cwd move recorded every turn again in
    the new project's segment, and the inbox made the old project's words the new one's memories."""
    _, key = apikey_create(name="both projects", scope_ids=[project.pk, other_project.pk])
    _, other_key = apikey_create(name="other project only", scope_ids=[other_project.pk])
    both, other_only = (Client(HTTP_AUTHORIZATION=f"Bearer {raw}") for raw in (key, other_key))
    turns = [
        {"role": "user", "content": "We chose PostgreSQL for the billing ledger", "turn_id": "t1"},
        {"role": "assistant", "content": "Noted: PostgreSQL for the ledger", "turn_id": "t2"},
    ]

    first = _post(
        both, "/api/v1/turns", {"session_id": "s1", "cwd": str(project_dir), "turns": turns}
    )
    moved = _post(
        both, "/api/v1/turns", {"session_id": "s1", "cwd": str(other_dir), "turns": turns}
    )
    # A key that cannot read the first project learns nothing from it: its turns are its own.
    unseen = _post(
        other_only, "/api/v1/turns", {"session_id": "s1", "cwd": str(other_dir), "turns": turns}
    )

    assert (first.json()["recorded"], first.json()["skipped"]) == (2, 0)
    assert (moved.json()["recorded"], moved.json()["skipped"]) == (0, 2)
    assert (unseen.json()["recorded"], unseen.json()["skipped"]) == (2, 0)
    assert ContextTurn.objects.filter(scope=project).count() == 2


def test_it_never_files_a_write_from_a_place_it_cannot_read_in_global(db, project_dir):
    """Before, a cwd this machine does not have (the agent in a container, a typo) or a remote
    spelled "github.com/owner/repo" filed the memory in global, and every other project's session
    start then showed it, with "scope_chosen": "about the work in the place it was said in"."""
    remote = scope_ensure(kind=ScopeKind.PROJECT, key="github.com/probe/proja")
    _, raw = apikey_create(name="agent", scope_ids=[remote.pk])
    api = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    said = {"gesture": "The Stripe webhook secret rotates on Friday"}

    elsewhere = _post(api, "/api/v1/narratives", said | {"cwd": "/home/alice/src/proja"})
    relative = _post(api, "/api/v1/narratives", said | {"cwd": "src/proja"})
    malformed = _post(api, "/api/v1/narratives", said | {"git_remote": "proja"})
    bare = _post(api, "/api/v1/narratives", said | {"git_remote": "github.com/probe/projA"})

    assert elsewhere.status_code == 403
    assert relative.status_code == 400
    assert "cwd must be an absolute path" in relative.json()["detail"]
    assert malformed.status_code == 400
    assert "git_remote 'proja' is not a git remote URL" in malformed.json()["detail"]
    assert bare.status_code == 200, bare.content
    assert bare.json()["scope"] == remote.label
    assert not Memory.objects.filter(scope=scope_global()).exists()
    assert ContextTurn.objects.count() == 0


def test_it_reads_from_a_directory_this_machine_does_not_have_where_writes_from_it_went(
    project,
):
    """Before, a write from a cwd this machine lacks (the agent in a container) was filed in a
    project of that path, while a read from the same cwd resolved to global: the agent's own
    search and surface never found what it had just written."""
    container = scope_ensure(kind=ScopeKind.PROJECT, key="/container/app")
    _, raw = apikey_create(name="container", scope_ids=[container.pk])
    _, other = apikey_create(name="other project", scope_ids=[project.pk])
    api, elsewhere = (Client(HTTP_AUTHORIZATION=f"Bearer {key}") for key in (raw, other))
    here = {"cwd": "/container/app"}

    written = _post(
        api, "/api/v1/narratives", {**here, "gesture": "The app queues jobs in Redis streams"}
    )
    found = api.get("/api/v1/search", {"q": "Redis streams", **here})
    deeper = api.get("/api/v1/search", {"q": "Redis streams", "cwd": "/container/app/src"})
    surfaced = _post(api, "/api/v1/surface", {**here, "text": "how are jobs queued in Redis?"})
    refused = elsewhere.get("/api/v1/search", {"q": "Redis streams", **here})

    assert written.status_code == 200, written.content
    assert written.json()["scope"] == container.label
    assert [hit["memory"]["id"] for hit in found.json()] == [written.json()["id"]]
    assert [hit["memory"]["id"] for hit in deeper.json()] == [written.json()["id"]]
    assert "Redis streams" in surfaced.json()["block"]
    assert refused.status_code == 403


def test_it_keeps_a_directory_this_machine_does_not_have_as_a_project_of_its_own(
    project, project_dir, tmp_path
):
    away = scope_resolve_for_write(cwd="/home/alice/src/proja")
    deeper = scope_resolve_for_write(cwd="/home/alice/src/proja/billing")
    outside = tmp_path / "notes"
    outside.mkdir()

    assert (away.kind, away.key) == (ScopeKind.PROJECT, "/home/alice/src/proja")
    assert deeper.pk == away.pk
    assert scope_resolve_for_write(cwd=str(project_dir / "src")).pk == project.pk
    assert scope_resolve_for_write(cwd=str(outside)).kind == ScopeKind.GLOBAL
