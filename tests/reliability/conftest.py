"""The reliability suite: real processes on a real SQLite file, killed and misconfigured on purpose.

Each test gets its own Tideline instance: a fresh data dir, `manage.py migrate`, an API key, and
the REST server served by uvicorn on a loopback port with the flags `./tideline up` uses. Nothing
is faked but the LLM endpoint (tests/fakes/llm_server.py). Short variants run by default; set
TIDELINE_RELIABILITY_LONG=1 for the long ones (more kills, more requests).
"""

import contextlib
import http.client
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings

LONG = os.environ.get("TIDELINE_RELIABILITY_LONG", "").lower() in {"1", "true", "yes"}
BASE_DIR = Path(settings.BASE_DIR)
UVICORN_FLAGS = [
    "--no-access-log",
    "--lifespan",
    "off",
    "--http",
    "tideline_site.http_protocol:EdgeH11Protocol",
    "--no-proxy-headers",
    "--timeout-keep-alive",
    "5",
    "--limit-concurrency",
    "256",
    "--log-level",
    "warning",
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Instance:
    data_dir: Path
    port: int = field(default_factory=free_port)
    extra_env: dict = field(default_factory=dict)
    process: subprocess.Popen | None = None
    key: str = ""

    @property
    def db_path(self) -> Path:
        return self.data_dir / "tideline.sqlite3"

    @property
    def env(self) -> dict:
        inherited = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(("TIDELINE_", "CELERY_", "DJANGO_"))
        }
        return {
            **inherited,
            "DJANGO_SETTINGS_MODULE": "tideline_site.settings",
            "TIDELINE_DATA_DIR": str(self.data_dir),
            "TIDELINE_DATABASE_URL": f"sqlite:///{self.db_path}",
            "TIDELINE_EMBEDDER": "none",
            "TIDELINE_WARM_ON_START": "0",
            "TIDELINE_LOG_LEVEL": "ERROR",
            **self.extra_env,
        }

    def manage(self, *args: str, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(BASE_DIR / "manage.py"), *args],
            cwd=BASE_DIR,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            **kwargs,
        )

    def prepare(self) -> "Instance":
        migrated = self.manage("migrate", "--noinput", "-v0")
        assert migrated.returncode == 0, migrated.stderr
        created = self.manage("apikey", "create", "--scope", "global", "--name", "reliability")
        assert created.returncode == 0, created.stderr
        self.key = created.stdout.strip().splitlines()[-1]
        return self

    @property
    def log_path(self) -> Path:
        return self.data_dir / "server.log"

    def start(self, timeout: float = 60) -> None:
        # A file, not a pipe: a pipe nobody reads fills up, and the server's logging then blocks
        # every thread that logs.
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "tideline_site.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                *UVICORN_FLAGS,
            ],
            cwd=BASE_DIR,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"server exited: {self.log_path.read_text()[-2000:]}")
            try:
                status, _ = self.request("GET", "/api/v1/stats", timeout=2)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError("the server did not answer within the timeout")

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)
        self.process = None

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None

    def request(
        self,
        method: str,
        path: str,
        body: dict | None = None,
        *,
        key: str | None = None,
        headers: dict | None = None,
        timeout: float = 30,
    ) -> tuple[int, dict]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request(
                method,
                path,
                body=json.dumps(body) if body is not None else None,
                headers={
                    "Authorization": f"Bearer {self.key if key is None else key}",
                    "Content-Type": "application/json",
                    **(headers or {}),
                },
            )
            response = connection.getresponse()
            data = response.read()
            return response.status, json.loads(data) if data else {}
        finally:
            connection.close()

    def sql(self, query: str, params: tuple = ()) -> list[tuple]:
        with contextlib.closing(sqlite3.connect(self.db_path, timeout=30)) as db:
            return db.execute(query, params).fetchall()

    def db_copy(self, *, source: Path, target: Path) -> None:
        """A consistent copy of a SQLite database (its WAL included), through SQLite itself."""
        with (
            contextlib.closing(sqlite3.connect(source)) as origin,
            contextlib.closing(sqlite3.connect(target)) as copy,
        ):
            origin.backup(copy)


@pytest.fixture
def instance(tmp_path):
    made = Instance(data_dir=tmp_path / "data").prepare()
    yield made
    made.stop()


@pytest.fixture
def served(instance):
    instance.start()
    return instance


@pytest.fixture(scope="module")
def shared_instance(tmp_path_factory):
    """One prepared instance for a module's tests that do not depend on each other's writes."""
    made = Instance(data_dir=tmp_path_factory.mktemp("shared") / "data").prepare()
    yield made
    made.stop()


@pytest.fixture(scope="module")
def shared_server(shared_instance):
    shared_instance.start()
    return shared_instance
