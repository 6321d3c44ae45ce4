"""Under ASGI each request runs in a thread of its own: a database connection must not outlive
its request, or a busy server exhausts PostgreSQL's connection limit."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

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


def _connections_to_this_database() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def test_it_leaves_no_connection_open_per_served_request(transactional_db, tmp_path):
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
            "TIDELINE_DATABASE_URL": database_url(),
            "TIDELINE_EMBEDDER": "none",
            "TIDELINE_WARM_ON_START": "0",
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
        for _ in range(30):
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/api/v1/turn",
                data=json.dumps(body | {"record": False}).encode(),
                headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=30) as reply:
                assert reply.status == 200

        assert _connections_to_this_database() <= 2
    finally:
        server.terminate()
        server.wait(timeout=20)
