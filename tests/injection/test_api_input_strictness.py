"""Input the REST API and the MCP tools must refuse as such rather than read loosely: query
strings too long to parse, ids that are not plain digits, booleans where a number belongs (and
numbers or words where a boolean does), query parameters on a route that reads a body, and a
Host header this server does not answer to."""

import json
import logging

import pytest
from django.test import Client

from injection.mcp_server import mcp_server_build
from injection.services.access import apikey_authenticate, apikey_create
from memory.models import Memory, MemoryStatus, Narrative, Thread
from memory.services.threads import thread_write
from memory.services.timeline import TurnInput, session_start, turns_record
from tests.injection.conftest import narrative_seed
from tests.injection.interfaces import McpDriver, inline_worker_threads

pytestmark = pytest.mark.django_db


def _post(api, path, body, method="post"):
    return getattr(api, method)(path, data=json.dumps(body), content_type="application/json")


def _loose_spellings(number: int) -> list[str]:
    """Ways of writing `number` that Python's int() or a lax parser reads as it."""
    return [f"+{number}.0", f"{number}.0", f"%20{number}", f"0{number}", f"0_{number}"]


@pytest.mark.parametrize(
    ("method", "path"), [("get", "/api/v1/stats"), ("delete", "/api/v1/memories/1")]
)
def test_it_answers_too_many_query_parameters_with_a_400_message(api, method, path):
    """Before, Django's TooManyFieldsSent escaped the API as a 500."""
    many = "&".join(f"a={n}" for n in range(1001))

    response = getattr(api, method)(f"{path}?{many}")

    assert response.status_code == 400
    assert "parameters" in response.json()["detail"]


def test_it_still_answers_a_body_over_either_limit_with_413(api, project, settings):
    settings.TIDELINE_API_MAX_BODY_BYTES = 2048
    declared = _post(api, "/api/v1/narratives", {"scope_id": project.pk, "gesture": "x" * 5000})
    settings.TIDELINE_API_MAX_BODY_BYTES = 1_000_000
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048
    read = _post(api, "/api/v1/narratives", {"scope_id": project.pk, "gesture": "x" * 5000})

    assert declared.status_code == 413 and read.status_code == 413, read.content
    assert "larger than" in read.json()["detail"]
    assert not Narrative.objects.exists()


def test_it_refuses_a_memory_id_in_the_path_that_is_not_plain_digits(api, project):
    """Before, `DELETE /memories/+669.0` expired memory 669, and `03`, `3.0`, ` 3` and `0_3` all
    named memory 3."""
    memory = narrative_seed(project, "chose zstd for the archive blobs")

    answers = {
        (method, spelling): (
            _post(api, path, {"changes": {"importance": 5}}, method="patch")
            if method == "patch"
            else getattr(api, method)(path + ("?reason=x" if method == "delete" else ""))
        ).status_code
        for spelling in _loose_spellings(memory.pk)
        for path in [f"/api/v1/memories/{spelling}"]
        for method in ("get", "patch", "delete")
    }

    assert set(answers.values()) == {422}, answers
    assert Memory.objects.get(pk=memory.pk).status == MemoryStatus.ACTIVE
    assert api.get(f"/api/v1/memories/{memory.pk}").status_code == 200


def test_it_refuses_a_thread_id_in_the_path_that_is_not_plain_digits(api, project):
    thread = thread_write(scope_id=project.pk, content="revisit lz4")

    answers = {
        spelling: _post(
            api, f"/api/v1/threads/{spelling}", {"status": "explored"}, method="patch"
        ).status_code
        for spelling in _loose_spellings(thread.pk)
    }

    assert set(answers.values()) == {422}, answers
    assert Thread.objects.get(pk=thread.pk).status == "open"


@pytest.mark.parametrize(
    "loose",
    [
        {"scope_id": True},
        {"scope_id": 1.0},
        {"pinned": "yes"},
        {"pinned": 1},
        {"secret": "true"},
        {"confidence": True},
        {"confidence": "0.8"},
        {"importance": True},
        {"importance": 4.0},
        {"source_turn_ids": [True]},
    ],
)
def test_it_refuses_a_body_field_given_as_the_wrong_kind_of_value(api, project, loose):
    """Before, `"scope_id": true` wrote into scope 1 (global), `[true]` cited turn 1 and
    `"pinned": "yes"` pinned."""
    response = _post(api, "/api/v1/narratives", {"gesture": "chose zstd", **loose})

    assert response.status_code == 422, response.content
    assert [name for name in loose] == [
        name for name in response.json()["detail"][0]["loc"] if name in loose
    ]
    assert not Narrative.objects.exists()


def test_it_still_takes_numbers_and_flags_sent_as_json_numbers_and_booleans(api, project):
    session = session_start(runtime="generic", external_id="s-1", scope_id=project.pk)
    turns = turns_record(session_id=session.pk, turns=[TurnInput(role="user", content="zstd?")])
    turn_ids = [turn.pk for turn in turns]

    written = _post(
        api,
        "/api/v1/narratives",
        {
            "scope_id": project.pk,
            "gesture": "chose zstd for the archive blobs",
            "confidence": 0.8,
            "valence": 0,
            "importance": 4,
            "pinned": True,
            "secret": False,
            "source_turn_ids": turn_ids,
        },
    )
    listed = api.get(f"/api/v1/memories?scope_id={project.pk}&limit=10&offset=0")
    timeline = api.get(f"/api/v1/timeline?scope_id={project.pk}&around_turn_id={turn_ids[0]}")

    assert written.status_code == 200, written.content
    assert written.json()["pinned"] is True
    assert listed.status_code == 200 and len(listed.json()) == 1
    assert timeline.status_code == 200 and timeline.json()


@pytest.mark.parametrize(
    "query",
    ["limit=5.0", "limit=+5", "limit=%205", "limit=05", "limit=5_0", "offset=-0", "scope_id=True"],
)
def test_it_refuses_a_query_number_that_is_not_plain_digits(api, project, query):
    response = api.get(f"/api/v1/memories?{query}")

    assert response.status_code == 422, response.content
    assert response.json()["detail"][0]["loc"][-1] == query.split("=")[0]


@pytest.mark.parametrize("method", ["post", "patch"])
def test_it_refuses_query_parameters_on_a_route_that_reads_a_body(api, project, method):
    """Before, `POST /narratives?secret=true` answered 200 and stored the memory not secret."""
    memory = narrative_seed(project, "chose zstd")
    path = "/api/v1/narratives" if method == "post" else f"/api/v1/memories/{memory.pk}"
    body = (
        {"scope_id": project.pk, "gesture": "a secret plan"}
        if method == "post"
        else {"changes": {"gesture": "a secret plan"}}
    )

    response = _post(api, f"{path}?secret=true&scope_id=999", body, method=method)

    assert response.status_code == 422, response.content
    named = {tuple(error["loc"]) for error in response.json()["detail"]}
    assert named == {("query", "scope_id"), ("query", "secret")}
    assert not Memory.objects.filter(narrative__gesture="a secret plan").exists()


def test_it_logs_a_foreign_host_in_one_line_without_a_traceback(api_key, caplog):
    """Before, Django logged a traceback at ERROR for every request naming another Host."""
    client = Client(HTTP_AUTHORIZATION=f"Bearer {api_key}", HTTP_HOST="attacker.example")

    with caplog.at_level(logging.WARNING, logger="django.security"):
        response = client.get("/api/v1/stats")

    assert response.status_code == 400
    refused = [r for r in caplog.records if r.name == "django.security.DisallowedHost"]
    assert refused and all(record.exc_info is None for record in refused)


def test_it_answers_a_foreign_host_under_the_api_in_json(api_key):
    """Before, the API answered Django's HTML 400 page."""
    client = Client(HTTP_AUTHORIZATION=f"Bearer {api_key}", HTTP_HOST="attacker.example")

    response = client.get("/api/v1/stats")

    assert response.status_code == 400
    assert "Host" in response.json()["detail"]


@pytest.mark.parametrize(
    "arguments",
    [
        lambda memory_id: {"memory_id": f"{memory_id}.0", "reason": "x"},
        lambda memory_id: {"memory_id": float(memory_id), "reason": "x"},
        lambda memory_id: {"memory_id": f"0{memory_id}", "reason": "x"},
        lambda memory_id: {"memory_id": True, "reason": "x"},
    ],
    ids=["string float", "float", "leading zero", "bool"],
)
def test_it_refuses_a_loose_memory_id_over_mcp(project, monkeypatch, arguments):
    """Before, memory_expire {"memory_id": "3.0"} expired memory 3, and `true` memory 1."""
    inline_worker_threads(monkeypatch)
    _, raw = apikey_create(name="mcp agent", scope_ids=[project.pk])
    memory = narrative_seed(project, "chose zstd for the archive blobs")
    driver = McpDriver(mcp_server_build())
    principal = apikey_authenticate(raw=raw)

    answer = driver.call("memory_expire", arguments(memory.pk), principal=principal)
    plain = driver.call("memory_recall", {"memory_id": memory.pk}, principal=principal)

    assert answer.refused, answer.text
    assert Memory.objects.get(pk=memory.pk).status == MemoryStatus.ACTIVE
    assert plain.ok, plain.text


@pytest.mark.parametrize(
    "loose", [{"pinned": "yes"}, {"confidence": True}, {"scope_id": True}, {"importance": "4.0"}]
)
def test_it_refuses_a_loose_flag_or_number_over_mcp(project, monkeypatch, loose):
    inline_worker_threads(monkeypatch)
    driver = McpDriver(mcp_server_build())
    _, raw = apikey_create(name="mcp agent", scope_ids=[project.pk])
    principal = apikey_authenticate(raw=raw)

    answer = driver.call(
        "memory_write",
        {"scope_id": project.pk, "gesture": "chose zstd", **loose},
        principal=principal,
    )

    assert answer.refused, answer.text
    assert not Narrative.objects.exists()
