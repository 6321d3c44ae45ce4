"""A subagent that names the user's session is still a subagent for that call."""

import json

import pytest
from django.test import Client

from injection.services.access import apikey_create
from memory.models import ContextTurn, InboxItem, Session
from tests.injection.conftest import narrative_seed, weights_set

pytestmark = pytest.mark.django_db

SUBAGENT = {"origin": "subagent", "delegation_depth": 1}


def _post(client, path, body):
    response = client.post(path, data=json.dumps(body), content_type="application/json")
    assert response.status_code == 200, response.content
    return response.json()


def test_it_neither_injects_nor_captures_a_subagent_in_the_users_session(api, project, project_dir):
    """Before, the stored session answered for the call: a subagent naming the user's session id
    got the full block and its turns were recorded and captured as the user's."""
    weights_set({narrative_seed(project, "proja migrates its database to postgres"): 0.9})
    main = {"session_id": "main", "cwd": str(project_dir)}
    _post(api, "/api/v1/turn", {**main, "content": "let us plan the postgres migration"})
    held = ContextTurn.objects.count(), InboxItem.objects.count()

    start = _post(api, "/api/v1/session/start", {**main, **SUBAGENT})
    turn = _post(
        api,
        "/api/v1/turn",
        {**main, **SUBAGENT, "content": "the staging cluster runs Kubernetes 1.29 on three nodes"},
    )
    batch = _post(
        api,
        "/api/v1/turns",
        {**main, **SUBAGENT, "turns": [{"role": "user", "content": "subagent chatter"}]},
    )

    assert start["block"] == "" and "subagent" in start["skipped"]
    assert turn["block"] == "" and "subagent" in turn["skipped"] and turn["recorded"] is False
    assert batch["captured"] is False and batch["recorded"] == 0
    assert (ContextTurn.objects.count(), InboxItem.objects.count()) == held
    # The stored session is not rewritten: the user's next call is the user's again.
    assert Session.objects.get(external_id="main").origin == "user"
    again = _post(api, "/api/v1/session/start", main)
    assert "postgres" in again["block"] and again["session"]["subagent"] is False


def test_it_gives_a_read_only_subagent_no_block_for_the_users_session(api, project, project_dir):
    weights_set({narrative_seed(project, "proja migrates its database to postgres"): 0.9})
    main = {"session_id": "main", "cwd": str(project_dir)}
    _post(api, "/api/v1/session/start", main)
    _, raw = apikey_create(name="reader", scope_ids=[project.pk], can_write=False)
    reader = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")

    start = _post(reader, "/api/v1/session/start", {**main, **SUBAGENT})

    assert start["block"] == "" and "subagent" in start["skipped"]
    assert "postgres" in _post(reader, "/api/v1/session/start", main)["block"]
