"""Request heads against the live server, by raw socket: one that never completes, one that
drips, one too large. Each must end on its own, answered in JSON, without costing anyone else a
slot (`./tideline up` serves at most --limit-concurrency connections)."""

import contextlib
import json
import select
import socket
import time

import pytest

from tests.reliability.conftest import Instance

HEAD_TIMEOUT_S = 1.0
SLOTS = 256  # --limit-concurrency in UVICORN_FLAGS, as `./tideline up`


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    made = Instance(
        data_dir=tmp_path_factory.mktemp("heads") / "data",
        extra_env={"TIDELINE_HEAD_TIMEOUT": str(HEAD_TIMEOUT_S)},
    ).prepare()
    made.start()
    yield made
    made.stop()


def _connect(port: int) -> socket.socket:
    # Long enough for any deadline here to pass, short enough that a server holding a connection
    # fails the test instead of hanging it.
    return socket.create_connection(("127.0.0.1", port), timeout=HEAD_TIMEOUT_S + 4)


def _read_until_closed(conn: socket.socket) -> bytes:
    answer = b""
    while True:
        try:
            data = conn.recv(65536)
        except (ConnectionResetError, TimeoutError):
            return answer
        if not data:
            return answer
        answer += data


def _one_answer(conn: socket.socket) -> bytes:
    """One whole answer on a connection that stays open: its head, then content-length bytes."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        data = conn.recv(65536)
        assert data, f"the connection closed without a whole answer: {answer[:200]!r}"
        answer += data
    head, _, body = answer.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.lower().split(b"\r\n")
        if line.startswith(b"content-length:")
    )
    while len(body) < length:
        body += conn.recv(65536)
    return head + b"\r\n\r\n" + body


def _stats(port: int, key: str) -> tuple[int, dict]:
    with _connect(port) as conn:
        conn.sendall(_stats_head(key))
        return _json_answer(_one_answer(conn))


def _json_answer(raw: bytes) -> tuple[int, dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert b"content-type: application/json" in head.lower(), head
    return status, json.loads(body)


def _stats_head(key: str) -> bytes:
    return (
        b"GET /api/v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + f"Authorization: Bearer {key}\r\n\r\n".encode()
    )


def test_it_frees_every_slot_that_half_heads_and_silent_connections_held(server):
    holders = []
    try:
        for n in range(SLOTS):
            holders.append(_connect(server.port))
            if n % 2:
                holders[-1].sendall(b"GET /api/v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        time.sleep(0.3)
        status, busy = _stats(server.port, server.key)
        assert status == 503 and "connection limit" in busy["detail"]  # every slot is held

        time.sleep(HEAD_TIMEOUT_S + 1.5)

        assert _stats(server.port, server.key)[0] == 200
        endings = [_read_until_closed(conn) for conn in holders]
    finally:
        for conn in holders:
            conn.close()
    assert all(ending == b"" for ending in endings[::2])  # nothing sent, nothing answered
    half_heads = [_json_answer(ending) for ending in endings[1::2]]
    assert {status for status, _ in half_heads} == {408}
    assert "request head did not arrive within 1 s" in half_heads[0][1]["detail"]


def test_it_does_not_let_a_dripping_head_extend_its_deadline(server):
    head = _stats_head(server.key)
    began = time.monotonic()
    with _connect(server.port) as conn:
        for byte in head[:-1]:
            conn.sendall(bytes([byte]))
            if select.select([conn], [], [], 0.05)[0]:
                break  # answered
        answered_after = time.monotonic() - began
        status, answer = _json_answer(_read_until_closed(conn))
    assert status == 408 and "request head" in answer["detail"]
    assert answered_after < HEAD_TIMEOUT_S + 1


def test_it_answers_a_slow_head_that_completes_in_time(server):
    head = _stats_head(server.key)
    with _connect(server.port) as conn:
        conn.sendall(head[:20])
        time.sleep(HEAD_TIMEOUT_S / 2)
        conn.sendall(head[20:])
        answer = _one_answer(conn)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]


def test_it_times_the_next_head_on_a_kept_alive_connection(server):
    head = _stats_head(server.key)
    with _connect(server.port) as conn:
        conn.sendall(head)
        first = _one_answer(conn)
        # Past the first head's deadline, within the 5 s keep-alive: the second head gets its own.
        time.sleep(HEAD_TIMEOUT_S + 0.5)
        conn.sendall(head)
        second = _one_answer(conn)
        time.sleep(0.2)
        conn.sendall(head[:30])
        began = time.monotonic()
        status, answer = _json_answer(_read_until_closed(conn))
    assert first.startswith(b"HTTP/1.1 200") and second.startswith(b"HTTP/1.1 200")
    assert status == 408 and "request head" in answer["detail"]
    assert time.monotonic() - began < HEAD_TIMEOUT_S + 2


@pytest.mark.parametrize("header_bytes", [40 * 1024, 1024 * 1024])
def test_it_refuses_a_head_over_16_kb_with_431_in_json(server, header_bytes):
    head = (
        b"GET /api/v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + f"Authorization: Bearer {server.key}\r\n".encode()
        + b"X-Padding: "
        + b"a" * header_bytes
        + b"\r\n\r\n"
    )
    with _connect(server.port) as conn:
        # Answered and drained; a reset only if the server stopped draining first.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            conn.sendall(head)
        status, answer = _json_answer(_read_until_closed(conn))
    assert status == 431 and "larger than 16384 bytes" in answer["detail"]
    assert server.request("GET", "/api/v1/stats")[0] == 200


def test_it_refuses_a_malformed_request_line_in_json(server):
    with _connect(server.port) as conn:
        conn.sendall(b"GET /api/v1/stats NOT-HTTP\r\n\r\n")
        status, answer = _json_answer(_read_until_closed(conn))
    assert status == 400 and "not valid HTTP/1.1" in answer["detail"]
