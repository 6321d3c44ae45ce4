"""Every audit row a request writes says who (actor), with which key (key_id) and in which request
(request_id): over REST (where an X-Request-Id header is what lands in the row), over MCP on
streamable HTTP with a key, and in-process through the tools."""

import anyio
from django.test import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from injection.mcp_server import mcp_server_build
from injection.services.access import apikey_authenticate, apikey_create
from memory.models import Actor, AuditEvent
from tests.injection.interfaces import McpDriver, inline_worker_threads, rest_call
from tests.injection.test_mcp import http_server  # noqa: F401  (the fixture)


def _rows_after(pk: int) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(pk__gt=pk).order_by("pk"))


def _last_pk() -> int:
    return AuditEvent.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


def test_it_stamps_rest_audit_rows_with_the_key_and_the_callers_request_id(project, project_dir):
    key, raw = apikey_create(name="stamped agent", scope_ids=[project.pk])
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    mark = _last_pk()

    written = rest_call(
        client,
        ("POST", "/api/v1/narratives"),
        {"gesture": "chose zstd for the archive blobs", "cwd": str(project_dir)},
        request_id="req-isolation-0001",
    )
    assert written.ok, written.text
    expired = rest_call(
        client,
        ("DELETE", "/api/v1/memories/{memory_id}"),
        {"memory_id": written.body["id"], "reason": "stamping test"},
        request_id="req-isolation-0002",
    )
    assert expired.ok, expired.text

    rows = _rows_after(mark)
    assert {row.request_id for row in rows} == {"req-isolation-0001", "req-isolation-0002"}
    assert {(row.actor, row.key_id) for row in rows} == {(Actor.AGENT, key.pk)}


def test_it_gives_a_rest_request_without_a_header_one_fresh_request_id(project, project_dir):
    key, raw = apikey_create(name="stamped agent", scope_ids=[project.pk])
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    ids = set()
    for gesture in ("first decision about zstd", "second decision about lz4"):
        mark = _last_pk()
        answer = rest_call(client, ("POST", "/api/v1/narratives"), {"gesture": gesture})
        assert answer.ok, answer.text
        rows = _rows_after(mark)
        assert rows and all(row.request_id and row.key_id == key.pk for row in rows)
        assert len({row.request_id for row in rows}) == 1
        ids |= {row.request_id for row in rows}
    assert len(ids) == 2


def test_it_stamps_in_process_mcp_audit_rows_with_the_key(project, project_dir, monkeypatch):
    inline_worker_threads(monkeypatch)
    key, raw = apikey_create(name="mcp agent", scope_ids=[project.pk])
    driver = McpDriver(mcp_server_build())
    mark = _last_pk()

    answer = driver.call(
        "memory_write",
        {"gesture": "picked zstd level 19", "cwd": str(project_dir)},
        principal=apikey_authenticate(raw=raw),
    )

    assert answer.ok, answer.text
    rows = _rows_after(mark)
    assert rows and all(
        row.actor == Actor.AGENT and row.key_id == key.pk and row.request_id for row in rows
    )


def test_it_stamps_mcp_audit_rows_over_http_with_the_key_and_a_request_id(
    http_server,  # noqa: F811
    project,
    project_dir,
):
    key, raw = apikey_create(name="http agent", scope_ids=[project.pk])
    mark = _last_pk()

    async def scenario():
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {raw}"})
        async with (
            client,
            streamable_http_client(http_server, http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            first = await session.call_tool(
                "memory_write", {"gesture": "chose zstd over http", "cwd": str(project_dir)}
            )
            second = await session.call_tool(
                "memory_write_thread", {"content": "revisit lz4", "cwd": str(project_dir)}
            )
            return first, second

    first, second = anyio.run(scenario)

    assert not first.is_error and not second.is_error, (first.content, second.content)
    rows = _rows_after(mark)
    assert len(rows) >= 2
    assert {(row.actor, row.key_id) for row in rows} == {(Actor.AGENT, key.pk)}
    assert all(row.request_id for row in rows)
    assert len({row.request_id for row in rows}) >= 2, "two tool calls share one request id"
