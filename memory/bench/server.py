"""What the HTTP benches share: the scratch database's URL, a real uvicorn server on a free loopback
port, process RSS, database size, and ingest through the write service."""

import os
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError
from django.db import connection, transaction

WARM_TIMEOUT_S = 900


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile (share 0.5 → p50), NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def database_url() -> str:
    """The URL of the database this process uses now (the scratch one), options included: a
    socket directory (pgserver) travels as `?host=`."""
    database = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{database['NAME']}"
    credentials = urllib.parse.quote(database["USER"] or "")
    if database["PASSWORD"]:
        credentials += ":" + urllib.parse.quote(database["PASSWORD"])
    netloc = f"{credentials}@{database['HOST'] or ''}"
    if database["PORT"]:
        netloc += f":{database['PORT']}"
    query = urllib.parse.urlencode(database.get("OPTIONS") or {})
    return f"postgres://{netloc}/{database['NAME']}" + (f"?{query}" if query else "")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def server_start(workers: int, port: int, log: Path) -> subprocess.Popen:
    """uvicorn on the scratch database, returned once every worker logged its warm-up."""
    env = {
        **os.environ,
        "TIDELINE_DATABASE_URL": database_url(),
        "TIDELINE_LOG_LEVEL": "INFO",
        "TIDELINE_WARM_ON_START": "1",
    }
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "uvicorn", "tideline_site.asgi:application"),
            *("--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)),
            *("--no-access-log", "--log-level", "warning", "--lifespan", "off"),
        ],
        cwd=settings.BASE_DIR,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )
    # Every worker warms up (embedder, jieba, index) in the background; measure only after all did.
    deadline = time.monotonic() + WARM_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise CommandError(f"the server exited: {log.read_text()[-2000:]}")
        if log.read_text().count("warm-up done") >= workers:
            return process
        time.sleep(0.3)
    server_stop(process)
    raise CommandError(f"{workers} workers did not warm up within {WARM_TIMEOUT_S} s")


def server_stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def database_maintain() -> None:
    """On PostgreSQL, what autovacuum does for a store that grew gradually: fresh planner
    statistics, GIN pending lists merged, visibility maps set. A bulk-seeded store measured
    without it is planned blind (and this machine's PostgreSQL 15 runs with autovacuum off)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")


def database_size_mb() -> float:
    if connection.vendor == "sqlite":
        path = Path(connection.settings_dict["NAME"])
        return (
            sum(f.stat().st_size for f in path.parent.glob(f"{path.name}*") if f.is_file()) / 2**20
        )
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_database_size(current_database())")
        return cursor.fetchone()[0] / 2**20


def ingest_rates(turns: int, scope_id: int, *, tag: str = "") -> tuple[float, float]:
    """Turns per second through the write service (10 per sync, each sync one transaction,
    alternately the user's and the assistant's), with the configured embedder (inline, as eager
    Celery does) and with embeddings off, after the warm-up a server does. Without a broker the user's turns also pay capture: the
    inbox flush after each commit (gate, consolidation, a narrative per utterance)."""
    from django.test import override_settings

    from injection.services.warmup import server_warm
    from memory.services.timeline import TurnInput, session_start, turns_record

    # A server has built its indexes before its first write; the figure is the steady state's.
    server_warm(drain_pending=False)
    rates = []
    for embedder in (settings.TIDELINE_EMBEDDER, "none"):
        with override_settings(TIDELINE_EMBEDDER=embedder):
            session = session_start(
                runtime="ingest", external_id=f"ingest-{embedder}{tag}", scope_id=scope_id
            )
            began = time.perf_counter()
            for start in range(0, turns, 10):
                batch = [
                    TurnInput(
                        role=("user", "assistant")[k % 2],
                        content=f"ingest turn {start + k}: the crawler retried",
                    )
                    for k in range(min(10, turns - start))
                ]
                with transaction.atomic():
                    turns_record(session_id=session.pk, turns=batch)
            rates.append(turns / (time.perf_counter() - began))
    return rates[0], rates[1]
