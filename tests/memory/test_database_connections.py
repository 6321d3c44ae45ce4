"""Under ASGI each request runs in a thread of its own: a database connection must not outlive
its request unless a bounded pool keeps it, or a busy server exhausts PostgreSQL's connection
limit."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.conf import settings
from django.db import connection

from injection.services.access import apikey_create
from memory.models import ScopeKind
from memory.services.scopes import scope_ensure
from tests.conftest import database_url


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# The server's connections carry this name, so the test's own (its pool's too) are not counted.
SERVER_APPLICATION = "tideline-connection-test"


def _server_connections() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = %s",
            [SERVER_APPLICATION],
        )
        return cursor.fetchone()[0]


@pytest.mark.parametrize("pool_size", [0, 3])
def test_it_holds_no_more_connections_than_its_pool_however_many_requests_run(
    transactional_db, tmp_path, pool_size
):
    if connection.vendor != "postgresql":
        pytest.skip("runs in the PostgreSQL pass: SQLite has no connection limit to exhaust")
    project_dir = tmp_path / "harbour"
    project_dir.mkdir()
    scope = scope_ensure(kind=ScopeKind.PROJECT, key=str(project_dir))
    _, key = apikey_create(name="connections", scope_ids=[scope.pk])
    port = _free_port()
    server = subprocess.Popen(
        [
            *(sys.executable, "-m", "uvicorn", "tideline_site.asgi:application"),
            *("--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"),
        ],
        cwd=settings.BASE_DIR,
        env={
            **os.environ,
            "TIDELINE_DATABASE_URL": f"{database_url()}?application_name={SERVER_APPLICATION}",
            "TIDELINE_EMBEDDER": "none",
            "TIDELINE_WARM_ON_START": "0",
            "TIDELINE_POSTGRES_POOL_SIZE": str(pool_size),
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()[-2000:]
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.2)
        body = {"cwd": str(project_dir), "session_id": "c1", "content": "where is the crane"}

        def turn(_: int) -> int:
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/api/v1/turn",
                data=json.dumps(body | {"record": False}).encode(),
                headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=60) as reply:
                return reply.status

        peak = 0
        with ThreadPoolExecutor(max_workers=8) as clients:
            replies = [clients.submit(turn, number) for number in range(48)]
            while not all(reply.done() for reply in replies):
                peak = max(peak, _server_connections())
                time.sleep(0.02)
            assert {reply.result() for reply in replies} == {200}

        if pool_size:
            # Eight clients at once grow the pool to its bound, never past it, and it keeps them.
            assert peak <= pool_size
            assert _server_connections() == pool_size
        else:
            # Each request closes its own; one may still be closing when this looks.
            assert _server_connections() <= 1
    finally:
        server.terminate()
        server.wait(timeout=20)


# Sequential requests, each in its own thread as a server's would be.
REQUESTS = 6


def _backend_in_a_new_thread() -> tuple[int, str]:
    """What a request thread sees: its own Django connection, closed when it ends (as Django does
    at the end of every request)."""
    seen: list[tuple[int, str]] = []

    def request() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid(), current_database()")
                seen.append(cursor.fetchone())
        finally:
            connection.close()

    thread = threading.Thread(target=request)
    thread.start()
    thread.join()
    return seen[0]


@pytest.mark.django_db
def test_it_reuses_pooled_postgres_backends_across_requests_of_the_test_database():
    if connection.vendor != "postgresql":
        pytest.skip("runs in the PostgreSQL pass: the connection pool is PostgreSQL's")

    seen = [_backend_in_a_new_thread() for _ in range(REQUESTS)]

    # Without the pool every request would open its own backend. With it they reuse the few the
    # pool holds: the test's own connection keeps one busy, so the first request grows the pool,
    # and that growth runs in the pool's background worker, which under load can add a second
    # before the next request asks (one pair of requests once saw two backends this way).
    assert len({backend for backend, _ in seen}) <= 2
    # The pool was built for the test database, not the one the settings named before the test
    # run switched to it.
    assert {database for _, database in seen} == {connection.settings_dict["NAME"]}
