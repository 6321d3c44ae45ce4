"""Hostile input against the live server: guessed keys, oversized chunked bodies, short bodies,
forged forwarding headers; and the modes of the files it keeps."""

import contextlib
import os
import socket
import sqlite3
import stat
import time

from tests.reliability.conftest import LONG

GUESSES = 5000 if LONG else 1000


def raw_exchange(port: int, head: bytes, chunks: list[bytes], *, timeout: float = 20) -> bytes:
    """Send a request by hand (so nothing corrects it) and return what the server answered,
    stopping the upload as soon as an answer arrives."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(head)
        conn.setblocking(False)
        answer = b""
        for chunk in chunks:
            with contextlib.suppress(BlockingIOError):
                answer += conn.recv(65536)
            if answer:
                break
            try:
                conn.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError, BlockingIOError):
                break
        conn.setblocking(True)
        deadline = time.monotonic() + timeout
        while b"\r\n\r\n" not in answer and time.monotonic() < deadline:
            try:
                data = conn.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not data:
                break
            answer += data
        return answer


def test_it_answers_429_to_a_flood_of_wrong_keys(shared_server, record_property):
    statuses = [
        shared_server.request("GET", "/api/v1/stats", key=f"tl_guess_{n}")[0]
        for n in range(GUESSES)
    ]
    first_429 = statuses.index(429)
    throttled = statuses.count(429)
    record_property("throttled", throttled)
    print(f"wrong keys: {GUESSES}, 401: {statuses.count(401)}, 429: {throttled}")

    assert set(statuses[:first_429]) == {401}
    assert first_429 <= 30 and throttled >= GUESSES - 60
    status, answer = shared_server.request("GET", "/api/v1/stats", key="tl_guess_again")
    assert status == 429 and "too many requests" in answer["detail"]
    assert shared_server.request("GET", "/api/v1/stats")[0] == 200  # the owner's key still works


def test_it_cannot_be_spoofed_through_x_forwarded_for(shared_server):
    statuses = [
        shared_server.request(
            "GET", "/api/v1/stats", key=f"tl_spoof_{n}", headers={"X-Forwarded-For": f"10.0.{n}.1"}
        )[0]
        for n in range(60)
    ]
    assert statuses.count(429) >= 30


def test_it_refuses_a_2_mb_chunked_body_with_413(shared_server):
    head = (
        b"POST /api/v1/facts HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + f"Authorization: Bearer {shared_server.key}\r\n".encode()
        + b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    piece = b"x" * 65536
    chunks = [b"%x\r\n%s\r\n" % (len(piece), piece)] * 32 + [b"0\r\n\r\n"]

    answer = raw_exchange(shared_server.port, head, chunks)

    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_it_answers_408_to_a_body_shorter_than_its_length(shared_server):
    head = (
        b"POST /api/v1/facts HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + f"Authorization: Bearer {shared_server.key}\r\n".encode()
        + b"Content-Type: application/json\r\nContent-Length: 500\r\n\r\n"
    )
    began = time.monotonic()
    answer = raw_exchange(shared_server.port, head + b'{"profile_name": "u', [], timeout=30)
    waited = time.monotonic() - began

    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert waited < 15  # TIDELINE_BODY_TIMEOUT (10 s), not a connection held open


def test_it_keeps_its_files_private(shared_server, record_property):
    # A reader holding the database open keeps -wal and -shm on disk while the server writes;
    # SQLite gives them the database file's mode, whatever this process's umask.
    previous = os.umask(0o022)
    try:
        with contextlib.closing(sqlite3.connect(shared_server.db_path)) as reader:
            reader.execute("SELECT COUNT(*) FROM memory_memory").fetchall()
            fact = {
                "profile_name": "user",
                "kind": "preference",
                "predicate": "pager",
                "value": "less",
            }
            assert shared_server.request("POST", "/api/v1/facts", fact)[0] == 200
            data_dir = shared_server.data_dir
            modes = {
                path.name: stat.S_IMODE(path.stat().st_mode)
                for path in [data_dir, *sorted(data_dir.iterdir())]
                if path.name.startswith(("data", "tideline.sqlite3", "secret_key"))
            }
    finally:
        os.umask(previous)
    record_property("modes", modes)
    print("file modes: " + ", ".join(f"{name} {mode:04o}" for name, mode in modes.items()))

    assert set(modes) == {
        "data",
        "secret_key",
        "tideline.sqlite3",
        "tideline.sqlite3-wal",
        "tideline.sqlite3-shm",
    }
    assert modes.pop("data") == 0o700
    assert set(modes.values()) == {0o600}
