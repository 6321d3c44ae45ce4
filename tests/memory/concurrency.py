"""Real concurrent writers against the test database: separate processes (SQLite file or
PostgreSQL, whichever the suite runs on), released at one instant, and a real HTTP server."""

import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from threading import Barrier
from urllib import error, request

from django.conf import settings
from django.db import connection

# Long enough for every writer to have read its command before the first one starts.
START_DELAY_SECONDS = 0.5


def database_url() -> str:
    """The URL of the database this test process uses, for its writer processes."""
    database = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{database['NAME']}"
    password = f":{database['PASSWORD']}" if database["PASSWORD"] else ""
    return (
        f"postgres://{database['USER']}{password}@{database['HOST'] or '127.0.0.1'}:"
        f"{database['PORT'] or 5432}/{database['NAME']}"
    )


def writer_env(tmp_dir: Path, *, embedder: str = "none") -> dict:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tideline_site.settings",
        "TIDELINE_DATABASE_URL": database_url(),
        "TIDELINE_LLM_CONFIG_FILE": str(tmp_dir / "no-llm.json"),
        # The writers race on the store; embedding is not what most of them test, and eight
        # copies of the model would only slow the start.
        "TIDELINE_EMBEDDER": embedder,
        "TIDELINE_LOG_LEVEL": "WARNING",
    }


# (method, path, API key, JSON body)
Call = tuple[str, str, str, dict | None]


@dataclass(frozen=True)
class Outcome:
    ok: bool
    result: object = None
    error: str = ""
    message: str = ""


class Writers:
    """`count` writer processes (tests/memory/writer.py), started once and reused."""

    def __init__(self, *, count: int, tmp_dir: Path, embedder: str = "none") -> None:
        env = writer_env(tmp_dir, embedder=embedder)
        self.processes = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.memory.writer"],
                cwd=settings.BASE_DIR,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(count)
        ]
        for process in self.processes:
            ready = process.stdout.readline()
            if not ready:
                self.close()
                raise RuntimeError("a writer process died on start")

    def run(self, calls: list[tuple[str, dict]]) -> list[Outcome]:
        """Run one call per writer, all starting at the same instant; outcomes in call order."""
        assert len(calls) <= len(self.processes), "more calls than writers"
        start_at = time.time() + START_DELAY_SECONDS
        for process, (operation, args) in zip(self.processes, calls, strict=False):
            command = {"operation": operation, "args": args, "start_at": start_at}
            process.stdin.write(json.dumps(command) + "\n")
            process.stdin.flush()
        outcomes = []
        for process, _ in zip(self.processes, calls, strict=False):
            line = process.stdout.readline()
            if not line:
                raise RuntimeError("a writer process died")
            outcomes.append(Outcome(**json.loads(line)))
        return outcomes

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.stdin.close()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _json(body: bytes) -> dict:
    """The answer's JSON; an HTML error page (a 500) is kept as text so the test can show it."""
    try:
        return json.loads(body or b"{}")
    except ValueError:
        return {"body": body.decode(errors="replace")[:500]}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    """uvicorn serving tideline_site.asgi on a loopback port with several worker processes, so
    requests really run at the same time."""

    def __init__(self, *, tmp_dir: Path, workers: int) -> None:
        self.port = free_port()
        self.log = tmp_dir / "uvicorn.log"
        self._log_file = self.log.open("w")
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [
                *(sys.executable, "-m", "uvicorn", "tideline_site.asgi:application"),
                *("--host", "127.0.0.1", "--port", str(self.port), "--workers", str(workers)),
                *("--log-level", "warning", "--no-access-log", "--timeout-graceful-shutdown", "1"),
            ],
            cwd=settings.BASE_DIR,
            env=writer_env(tmp_dir),
            stdout=subprocess.DEVNULL,
            # A file, not a pipe: nobody reads the log while the server runs, and a full pipe
            # would stall it.
            stderr=self._log_file,
        )
        self._wait_until_up(workers)

    def _wait_until_up(self, workers: int) -> None:
        deadline = time.monotonic() + 60
        answered = 0
        while time.monotonic() < deadline and self.process.poll() is None:
            status, _ = self.call("GET", "/api/v1/stats", key="", body=None)
            answered += status in (401, 403)
            if answered >= workers:
                return
            time.sleep(0.1)
        self.close()
        raise RuntimeError(f"uvicorn did not come up:\n{self.log.read_text()[-2000:]}")

    def call(self, method: str, path: str, *, key: str, body: dict | None) -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        try:
            with request.urlopen(
                request.Request(self.base_url + path, data=data, method=method, headers=headers),
                timeout=60,
            ) as answer:
                return answer.status, _json(answer.read())
        except error.HTTPError as answer:
            return answer.code, _json(answer.read())
        except (error.URLError, ConnectionError):
            return 0, {}

    def concurrently(self, clients: list[list[Call]]) -> list[tuple[int, dict]]:
        """One thread per client, released together; each sends its calls one after another, as
        an agent does. Answers in order, client by client. A client per thread (not per call)
        keeps the open connections within what one PostgreSQL server allows."""
        gate = Barrier(len(clients))

        def client(calls: list[Call]) -> list[tuple[int, dict]]:
            gate.wait()
            return [
                self.call(method, path, key=key, body=body) for method, path, key, body in calls
            ]

        with ThreadPoolExecutor(max_workers=len(clients)) as pool:
            return [answer for answers in pool.map(client, clients) for answer in answers]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log_file.close()
