"""The MCP server over streamable HTTP reads its callers' headers as the SDK's transport does:
a header it decides on (the key, the session id) comes once, and X-Request-Id is the request id
the audit log keeps, as over REST."""

import http.client
import json
from urllib.parse import urlsplit

import anyio
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from injection.services.access import apikey_create
from memory.models import AuditEvent, Memory, MemoryStatus
from tests.injection.test_mcp import (
    INITIALIZE,
    _raw_request,
    http_server,  # noqa: F401  (the fixture)
)

LISTING = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}


def _sent_with_repeats(url: str, method: str, headers: list[tuple[str, str]], message=None):
    """A request whose headers may repeat, which urllib and httpx merge or refuse."""
    where = urlsplit(url)
    body = json.dumps(message).encode() if message else b""
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=10)
    connection.putrequest(method, where.path, skip_host=True, skip_accept_encoding=True)
    for name, value in [
        ("Host", where.netloc),
        ("Accept", "application/json, text/event-stream"),
        ("Content-Type", "application/json"),
        ("Mcp-Protocol-Version", HANDSHAKE_PROTOCOL_VERSIONS[-1]),
        ("Content-Length", str(len(body))),
        *headers,
    ]:
        connection.putheader(name, value)
    connection.endheaders(body)
    response = connection.getresponse()
    answer = response.status, response.read()
    connection.close()
    return answer


def _session_opened(url: str, key: str) -> str:
    status, headers = _raw_request(
        url, method="POST", headers={"Authorization": f"Bearer {key}"}, message=INITIALIZE
    )
    assert status == 200
    return headers["mcp-session-id"]


def test_it_refuses_two_session_ids_so_no_key_reaches_anothers_session(
    http_server,  # noqa: F811
    project,
    other_project,
):
    """Before, key B sending key A's session id first and any other second closed A's session
    (the check read the second, the transport the first), and a POST that way was served in A's
    session."""
    _, key_a = apikey_create(name="agent a", scope_ids=[project.pk])
    _, key_b = apikey_create(name="agent b", scope_ids=[other_project.pk])
    session_a = _session_opened(http_server, key_a)
    session_b = _session_opened(http_server, key_b)
    as_b = [("Authorization", f"Bearer {key_b}")]

    answers = [
        _sent_with_repeats(
            http_server,
            method,
            [*as_b, ("Mcp-Session-Id", session_a), ("Mcp-Session-Id", second)],
            LISTING if method == "POST" else None,
        )
        for second in (session_b, "not-a-session")
        for method in ("POST", "DELETE")
    ]
    listed_by_a = _sent_with_repeats(
        http_server,
        "POST",
        [("Authorization", f"Bearer {key_a}"), ("Mcp-Session-Id", session_a)],
        LISTING,
    )

    assert [status for status, _ in answers] == [400] * 4, answers
    assert all(b"more than one mcp-session-id header" in body for _, body in answers)
    assert listed_by_a[0] == 200 and b"memory_write" in listed_by_a[1]


def test_it_refuses_two_keys_in_one_request(http_server, project, other_project):  # noqa: F811
    _, key_a = apikey_create(name="agent a", scope_ids=[project.pk])
    _, key_b = apikey_create(name="agent b", scope_ids=[other_project.pk])

    status, body = _sent_with_repeats(
        http_server,
        "POST",
        [("Authorization", f"Bearer {key_a}"), ("Authorization", f"Bearer {key_b}")],
        INITIALIZE,
    )

    assert status == 400 and b"more than one authorization header" in body


def test_it_stamps_audit_rows_with_the_http_callers_request_id(
    http_server,  # noqa: F811
    project,
    project_dir,
):
    """Before, every MCP call over HTTP got a fresh request id whatever X-Request-Id said."""
    _, key = apikey_create(name="http agent", scope_ids=[project.pk])
    mark = AuditEvent.objects.order_by("-pk").values_list("pk", flat=True).first() or 0

    async def scenario():
        client = create_mcp_http_client(
            headers={"Authorization": f"Bearer {key}", "X-Request-Id": "req-mcp-0001"}
        )
        async with (
            client,
            streamable_http_client(http_server, http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await session.call_tool(
                "memory_write", {"gesture": "chose zstd over http", "cwd": str(project_dir)}
            )

    written = anyio.run(scenario)

    assert not written.is_error, written.content
    assert Memory.objects.filter(status=MemoryStatus.ACTIVE).exists()
    rows = AuditEvent.objects.filter(pk__gt=mark)
    assert rows.exists()
    assert {row.request_id for row in rows} == {"req-mcp-0001"}
