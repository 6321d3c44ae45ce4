"""Capture end to end, through the REST API: what the user says is recorded, captured into the
inbox in the same transaction, judged by flush_inbox, filed in the scope its kind belongs to, and
injected where it matters."""

import json
from io import StringIO

from django.core.management import call_command
from django.test import Client

from injection.services.access import apikey_create
from memory.models import ContextTurn, Evidence, Fact, InboxItem, InboxStatus, Memory, ScopeKind
from memory.services.scopes import scope_ensure, scope_global


def _post(client, path, body):
    response = client.post(path, data=json.dumps(body), content_type="application/json")
    assert response.status_code == 200, response.content
    return response.json()


def _turns(client, cwd, session, turns, **extra):
    return _post(
        client,
        "/api/v1/turns",
        {"session_id": session, "cwd": str(cwd), "turns": turns, **extra},
    )


def test_it_turns_a_preference_said_in_a_project_into_a_global_fact_injected_elsewhere(
    db, tmp_path, django_capture_on_commit_callbacks
):
    repo = tmp_path / "archive-manager"
    (repo / ".git").mkdir(parents=True)
    elsewhere = tmp_path / "notes"
    elsewhere.mkdir()
    project = scope_ensure(kind=ScopeKind.PROJECT, key=str(repo))
    _, key = apikey_create(name="laptop", scope_ids=[project.pk])
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")

    # No broker: the flush that capture schedules runs in-process once the turns commit.
    with django_capture_on_commit_callbacks(execute=True):
        _turns(
            client,
            repo,
            "s-1",
            [
                {"role": "user", "content": "以后都用简体中文回复。", "turn_id": "u1"},
                {"role": "assistant", "content": "好的。", "turn_id": "a1"},
                {"role": "user", "content": "<command-name>/clear</command-name>", "turn_id": "c1"},
            ],
        )
    captured = list(InboxItem.objects.all())

    assert [item.content for item in captured] == ["以后都用简体中文回复。"]
    assert InboxItem.objects.get().result["errors"] == []
    assert InboxItem.objects.get().status == InboxStatus.PROCESSED
    fact = Fact.objects.get(predicate="responds_in")
    assert fact.scope == scope_global() and fact.value == "简体中文"
    # The way back stays with the owner: the inbox item links the turn, but a global fact keeps
    # no evidence in the project, which other projects would otherwise be led back to.
    assert InboxItem.objects.get().turn.external_id == "u1"
    assert not Evidence.objects.filter(memory=fact).exists()
    block = _post(client, "/api/v1/session/start", {"session_id": "s-2", "cwd": str(elsewhere)})
    assert "简体中文" in block["block"]


def test_it_keeps_a_project_statement_in_that_project(db, tmp_path):
    repo, other = tmp_path / "archive", tmp_path / "billing"
    for path in (repo, other):
        (path / ".git").mkdir(parents=True)
    scopes = [scope_ensure(kind=ScopeKind.PROJECT, key=str(path)) for path in (repo, other)]
    _, key = apikey_create(name="laptop", scope_ids=[scope.pk for scope in scopes])
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")

    _turns(
        client,
        repo,
        "s-1",
        [
            {
                "role": "user",
                "content": "The archive index now uses zstd level 19 blobs.",
                "turn_id": "u1",
            }
        ],
    )
    call_command("flush_inbox", stdout=StringIO())

    item = InboxItem.objects.get()
    assert item.result["memory_ids"] and item.result["errors"] == []
    assert Evidence.objects.filter(memory_id=item.result["memory_ids"][0], turn=item.turn).exists()
    here = _post(client, "/api/v1/session/start", {"session_id": "s-2", "cwd": str(repo)})
    there = _post(client, "/api/v1/surface", {"cwd": str(other), "text": "zstd level 19 blobs"})
    assert "zstd" not in there["block"]
    assert InboxItem.objects.get().scope == scopes[0]
    assert here["session"]["scope_id"] == scopes[0].pk


def test_it_captures_nothing_from_a_subagent(db, tmp_path):
    repo = tmp_path / "archive"
    (repo / ".git").mkdir(parents=True)
    project = scope_ensure(kind=ScopeKind.PROJECT, key=str(repo))
    _, key = apikey_create(name="laptop", scope_ids=[project.pk])
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")

    _turns(
        client,
        repo,
        "child",
        [{"role": "user", "content": "以后都用英文回复。", "turn_id": "u1"}],
        origin="subagent",
        delegation_depth=1,
    )

    assert not InboxItem.objects.exists()


def test_it_keeps_small_talk_said_over_and_over_out_of_memory(
    db, tmp_path, django_capture_on_commit_callbacks
):
    """Before, every "continue" and "sounds good" became a candidate, and saying them again in the
    same session promoted them: the next turn about the deployment checklist got "continue" as
    its top memory."""
    repo = tmp_path / "deploy"
    (repo / ".git").mkdir(parents=True)
    project = scope_ensure(kind=ScopeKind.PROJECT, key=str(repo))
    _, key = apikey_create(name="laptop", scope_ids=[project.pk])
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    said = ["hi", "continue", "sounds good", "hmm", "lol", "好的，继续吧", "了解です", "sigue"] * 2

    with django_capture_on_commit_callbacks(execute=True):
        _turns(
            client,
            repo,
            "s-1",
            [{"role": "user", "content": text, "turn_id": f"u{n}"} for n, text in enumerate(said)],
        )
    turn = _post(
        client,
        "/api/v1/turn",
        {
            "session_id": "s-2",
            "cwd": str(repo),
            "content": "let's continue with the deployment checklist",
            "record": False,
        },
    )

    assert not any(turn["sections"].values()), turn["block"]
    assert not Memory.objects.exists()
    assert InboxItem.objects.filter(status=InboxStatus.SKIPPED).count() == len(said)


def test_it_records_a_pasted_turn_longer_than_the_inbox_takes_without_capturing_it(db, tmp_path):
    """Before, a 60,000-character paste was queued whole for the rules (or the LLM) to read,
    while the inbox refuses more than 20,000 characters from an agent."""
    repo = tmp_path / "archive"
    (repo / ".git").mkdir(parents=True)
    project = scope_ensure(kind=ScopeKind.PROJECT, key=str(repo))
    _, key = apikey_create(name="laptop", scope_ids=[project.pk])
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    paste = "ERROR disk full on /var/lib/archive while indexing shard 7\n" * 1000

    _turns(
        client,
        repo,
        "s1",
        [
            {"role": "user", "content": paste, "turn_id": "u1"},
            {"role": "user", "content": "I prefer helix as my editor", "turn_id": "u2"},
        ],
    )

    assert ContextTurn.objects.filter(content=paste).exists()
    assert list(InboxItem.objects.values_list("content", flat=True)) == [
        "I prefer helix as my editor"
    ]
