"""MCP start-up latency: stdio initialise and first tool call, and HTTP first tool call after start.

What an MCP client waits for, measured with the SDK's own client against `manage.py mcp` child
processes on a scratch SQLite store (never the configured one):
- stdio: spawn → `initialize` answered (the handshake must not wait for the embedder), then the
  first `memory_search` (which loads the embedder and the index on demand) and a second one;
- HTTP: spawn → port listening, then the first `memory_search` over a fresh connection
  (initialise + call), which the server's background warm-up should already have paid for.
"""

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from django.conf import settings
from django.core.management.base import CommandError

QUERY = {"q": "which editor does the user prefer", "limit": 5}


def add_arguments(parser) -> None:
    parser.add_argument("--stdio-runs", type=int, default=10, help="stdio processes to time")
    parser.add_argument("--http-runs", type=int, default=3, help="HTTP servers to time")


def _child_env(data_dir: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "TIDELINE_DATA_DIR": str(data_dir),
        "TIDELINE_DATABASE_URL": f"sqlite:///{data_dir / 'tideline.sqlite3'}",
        "TIDELINE_LOG_LEVEL": "ERROR",
    }
    env.pop("CELERY_BROKER_URL", None)
    return env


def _manage(env: dict[str, str], *arguments: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *arguments],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise CommandError(f"manage.py {' '.join(arguments)} failed: {done.stderr.strip()[-500:]}")
    return done.stdout


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _search_ok(result) -> None:
    if result.is_error:
        raise CommandError(f"memory_search failed: {result.content[0].text}")


async def _stdio_once(env: dict[str, str], cwd: str) -> dict[str, float]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "mcp", "--cwd", cwd],
        cwd=str(settings.BASE_DIR),
        env=env,
    )
    started = time.perf_counter()
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        initialised = time.perf_counter()
        _search_ok(await session.call_tool("memory_search", {**QUERY, "cwd": cwd}))
        first = time.perf_counter()
        _search_ok(await session.call_tool("memory_search", {**QUERY, "cwd": cwd}))
        second = time.perf_counter()
    return {
        "initialise": initialised - started,
        "first_call": first - initialised,
        "second_call": second - first,
    }


async def _http_call(url: str, key: str) -> float:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    started = time.perf_counter()
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    async with (
        client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        _search_ok(await session.call_tool("memory_search", QUERY))
    return time.perf_counter() - started


def _http_once(env: dict[str, str], key: str) -> dict[str, float]:
    port = _free_port()
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "manage.py", "mcp", "--http", "--port", str(port)],
        cwd=settings.BASE_DIR,
        env=env,
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
                if process.poll() is not None:
                    detail = process.stderr.read().decode(errors="replace")[-500:]
                    raise CommandError(f"the MCP server exited: {detail}") from None
                if time.monotonic() > deadline:
                    raise CommandError("the MCP server did not listen within 60 s") from None
                time.sleep(0.02)
        listening = time.perf_counter()
        url = f"http://127.0.0.1:{port}/mcp"
        first = anyio.run(_http_call, url, key)
        second = anyio.run(_http_call, url, key)
        return {"listening": listening - started, "first_call": first, "second_call": second}
    finally:
        process.terminate()
        process.wait(timeout=10)


def _line(out, label: str, samples: list[float]) -> None:
    ordered = sorted(samples)
    out.write(
        f"  {label:<26} median {statistics.median(ordered) * 1000:7.0f} ms   "
        f"min {ordered[0] * 1000:6.0f}   max {ordered[-1] * 1000:6.0f}   (n={len(ordered)})"
    )


def run(command, options) -> None:
    stdio_runs, http_runs = options["stdio_runs"], options["http_runs"]
    if stdio_runs < 1 or http_runs < 0:
        raise CommandError("--stdio-runs must be at least 1 and --http-runs at least 0")
    out = command.stdout
    with tempfile.TemporaryDirectory(prefix="tideline-mcp-bench-") as scratch:
        data_dir = Path(scratch) / "data"
        project = Path(scratch) / "project"
        project.mkdir()
        env = _child_env(data_dir)
        _manage(env, "migrate", "-v0")
        key = _manage(env, "apikey", "create", "--scope", "global", "--name", "bench").split()[-1]

        stdio: list[dict[str, float]] = []
        bar = command.progress(total=stdio_runs + http_runs, desc="mcp start-ups", unit="runs")
        for _ in range(stdio_runs):
            stdio.append(anyio.run(_stdio_once, env, str(project)))
            bar.update(1)
        http: list[dict[str, float]] = []
        for _ in range(http_runs):
            http.append(_http_once(env, key))
            bar.update(1)
        bar.close()

    load = os.getloadavg()[0]
    out.write(f"MCP start-up ({os.cpu_count()} cores, load average {load:.2f})")
    out.write("stdio (spawn → answer):")
    for part in ("initialise", "first_call", "second_call"):
        _line(out, part.replace("_", " "), [run[part] for run in stdio])
    if http:
        out.write("HTTP (spawn → listening, then a new client's initialise + memory_search):")
        for part in ("listening", "first_call", "second_call"):
            _line(out, part.replace("_", " "), [run[part] for run in http])
