"""Load: how many concurrent agents one server holds, over the real ASGI server, on this database.

It seeds a scratch database (never the configured store; SQLite or PostgreSQL, whichever
TIDELINE_DATABASE_URL names) the way `bench inject` does, serves it with uvicorn on a free loopback
port with each of `--workers`, and for each number of `--agents` runs that many simulated agents
for `--seconds`: each agent loops (keep-alive connection, `--think` seconds between requests) over
90% per-turn injection (`POST /api/v1/turn`, record=false, as the hook asks) and 10% writes
(narratives, facts) and turn syncs (`POST /api/v1/turns`). Reported per step: throughput, per-turn
and write p50/p95/p99, errors, the RSS of every server process and the load average (other work on
the machine counts). A worker count stops climbing once per-turn p95 passes 4× `--target-ms` or an
error appears; the verdict is the most agents held, with every smaller step also held, at per-turn
p95 ≤ `--target-ms` and 0 errors.
"""

import http.client
import json
import os
import random
import shutil
import tempfile
import threading
import time
from pathlib import Path

from django.core.management.base import CommandError
from django.db import connection

from memory.bench.server import (
    children,
    database_maintain,
    database_size_mb,
    free_port,
    ingest_rates,
    percentile,
    rss_mb,
    server_start,
    server_stop,
)

MAX_AGENTS = 512
MAX_SECONDS = 120
MAX_WORKERS = 8
GIVE_UP_FACTOR = 4


def add_arguments(parser) -> None:
    parser.add_argument("--size", type=int, default=10_000, help="narratives in the scratch store")
    parser.add_argument("--workers", default="1,2,4", help="uvicorn worker counts to measure")
    parser.add_argument(
        "--agents", default="1,2,4,8,16,32,64", help="concurrent agents per step, ascending"
    )
    parser.add_argument("--seconds", type=float, default=15.0, help="measured seconds per step")
    parser.add_argument(
        "--think", type=float, default=1.0, help="seconds an agent waits between requests"
    )
    parser.add_argument("--target-ms", type=float, default=100.0, help="per-turn p95 to hold")
    parser.add_argument(
        "--ingest", type=int, default=1000, help="turns recorded to time ingest (0: skip)"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--in-place",
        action="store_true",
        help="seed the configured database instead of a scratch one (tests use this)",
    )


class Agent(threading.Thread):
    """One simulated agent: its own session and keep-alive connection, a fixed mix of requests."""

    def __init__(self, *, number: int, port: int, key: str, cwd: str, think: float, seed: int):
        super().__init__(daemon=True)
        self.number, self.port, self.key, self.cwd, self.think = number, port, key, cwd, think
        self.rng = random.Random(seed * 1000 + number)
        self.turns: list[float] = []
        self.writes: list[float] = []
        self.errors: list[str] = []
        self.measuring = threading.Event()
        self.stopping = threading.Event()
        self.sent = 0

    def _post(self, conn: http.client.HTTPConnection, path: str, body: dict) -> float:
        began = time.perf_counter()
        conn.request(
            "POST",
            path,
            body=json.dumps(body),
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
        )
        response = conn.getresponse()
        payload = response.read()
        elapsed = (time.perf_counter() - began) * 1000
        if not 200 <= response.status < 300:
            raise RuntimeError(f"{path} answered {response.status}: {payload[:160]!r}")
        return elapsed

    def _one(self, conn: http.client.HTTPConnection) -> tuple[str, float]:
        from injection.bench import OBJECTS, QUERIES, SUBJECTS

        session = {"cwd": self.cwd, "runtime": "load", "session_id": f"agent-{self.number}"}
        roll = self.rng.random()
        self.sent += 1
        if roll < 0.90:
            query = f"{self.rng.choice(QUERIES)} ({self.sent})"
            return "turn", self._post(
                conn, "/api/v1/turn", {**session, "content": query, "record": False}
            )
        if roll < 0.95:
            turns = [
                {"role": "user", "content": self.rng.choice(QUERIES), "turn_id": f"{self.sent}u"},
                {"role": "assistant", "content": "noted, looking", "turn_id": f"{self.sent}a"},
            ]
            return "write", self._post(conn, "/api/v1/turns", {**session, "turns": turns})
        if roll < 0.98:
            gesture = f"{self.rng.choice(SUBJECTS)} noted {self.rng.choice(OBJECTS)} #{self.sent}"
            body = {"cwd": self.cwd, "gesture": gesture, "tags": [f"agent{self.number}"]}
            return "write", self._post(conn, "/api/v1/narratives", body)
        body = {
            "cwd": self.cwd,
            "profile_name": f"agent {self.number}",
            "profile_kind": "person",
            "kind": "fact",
            "predicate": f"step_{self.sent % 7}",
            "value": f"step {self.sent}",
        }
        return "write", self._post(conn, "/api/v1/facts", body)

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        # Agents do not start in lockstep.
        time.sleep(self.rng.uniform(0, self.think))
        while not self.stopping.is_set():
            try:
                kind, ms = self._one(conn)
                if self.measuring.is_set():
                    (self.turns if kind == "turn" else self.writes).append(ms)
            except Exception as exc:
                if self.measuring.is_set():
                    self.errors.append(f"{type(exc).__name__}: {exc}"[:200])
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            if self.think:
                time.sleep(self.rng.uniform(0.5, 1.5) * self.think)
        conn.close()


def _step(agents: int, *, port: int, key: str, cwd: str, options, server) -> dict:
    crowd = [
        Agent(number=n, port=port, key=key, cwd=cwd, think=options["think"], seed=options["seed"])
        for n in range(agents)
    ]
    for agent in crowd:
        agent.start()
    time.sleep(min(3.0, options["seconds"] / 3) + options["think"])  # ramp-up, not measured
    for agent in crowd:
        agent.measuring.set()
    started = time.perf_counter()
    time.sleep(options["seconds"])
    for agent in crowd:
        agent.measuring.clear()
    elapsed = time.perf_counter() - started
    rss = {"master": rss_mb(server.pid)} | {
        f"worker {pid}": rss_mb(pid) for pid in children(server.pid)
    }
    for agent in crowd:
        agent.stopping.set()
    for agent in crowd:
        agent.join(timeout=70)
    turns = [ms for agent in crowd for ms in agent.turns]
    writes = [ms for agent in crowd for ms in agent.writes]
    errors = [error for agent in crowd for error in agent.errors]
    return {
        "agents": agents,
        "throughput": (len(turns) + len(writes)) / elapsed,
        "turns": turns,
        "writes": writes,
        "errors": errors,
        "rss": rss,
        "load": os.getloadavg()[0],
    }


def _report_step(figures: dict, out) -> None:
    turns, writes = figures["turns"], figures["writes"]
    workers_rss = [mb for name, mb in figures["rss"].items() if name != "master"]
    out(
        f"  {figures['agents']:>4} agents  {figures['throughput']:6.1f} req/s  "
        f"turn p50/p95/p99 {percentile(turns, 0.5):6.1f}/{percentile(turns, 0.95):6.1f}/"
        f"{percentile(turns, 0.99):6.1f} ms (n={len(turns)})  "
        f"write p50/p95 {percentile(writes, 0.5):6.1f}/{percentile(writes, 0.95):6.1f} ms (n={len(writes)})  "
        f"errors {len(figures['errors'])}  "
        f"RSS master {figures['rss'].get('master', 0):.0f} MB, workers "
        f"{'/'.join(f'{mb:.0f}' for mb in workers_rss) or '-'} MB  load {figures['load']:.2f}"
    )
    for error in sorted(set(figures["errors"]))[:3]:
        out(f"         error: {error}")


def _parse(options) -> tuple[list[int], list[int]]:
    try:
        workers = [int(w) for w in options["workers"].split(",") if w.strip()]
        agents = [int(a) for a in options["agents"].split(",") if a.strip()]
    except ValueError as exc:
        raise CommandError("--workers and --agents take comma-separated integers") from exc
    if not workers or not agents or min(workers) < 1 or max(workers) > MAX_WORKERS:
        raise CommandError(f"--workers must be 1..{MAX_WORKERS}")
    if min(agents) < 1 or max(agents) > MAX_AGENTS or agents != sorted(agents):
        raise CommandError(f"--agents must ascend within 1..{MAX_AGENTS}")
    if not 1 <= options["seconds"] <= MAX_SECONDS or options["think"] < 0:
        raise CommandError(f"--seconds must be 1..{MAX_SECONDS} and --think ≥ 0")
    if options["size"] < 100:
        raise CommandError("--size must be ≥ 100")
    return workers, agents


def run(command, options) -> None:
    from injection.bench import _seed_narratives, _seed_rest
    from injection.services.access import apikey_create
    from memory.models import ScopeKind
    from memory.services.scopes import scope_ensure

    workers_list, agents_list = _parse(options)
    out = command.stdout.write
    rng = random.Random(options["seed"])
    old_name = connection.settings_dict["NAME"]
    out(f"bench load on {connection.vendor}, {options['size']:,} narratives, {os.cpu_count()} CPUs")
    if not options["in_place"]:
        out("creating a scratch database (the configured store is untouched)…")
        connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    project_dir = tempfile.mkdtemp(prefix="tideline-load-project-")
    log = Path(tempfile.mkdtemp(prefix="tideline-load-log-")) / "server.log"
    held: dict[int, int] = {}
    try:
        scope = scope_ensure(kind=ScopeKind.PROJECT, key=str(project_dir))
        ids = _seed_narratives(options["size"], scope.pk, rng, out)
        _seed_rest(scope.pk, ids, rng)
        _, key = apikey_create(name="load", scope_ids=[scope.pk])
        if options["ingest"]:
            with_embeddings, without = ingest_rates(options["ingest"], scope.pk)
            out(
                f"  ingest: {with_embeddings:,.0f} turns/s with embeddings, {without:,.0f} "
                f"without ({options['ingest']:,} turns each, 10 per sync)"
            )
        database_maintain()
        out(f"  database size: {database_size_mb():,.0f} MB")
        connection.close()
        for workers in workers_list:
            port = free_port()
            out(f"\n{workers} worker(s): starting uvicorn and waiting for every worker's warm-up…")
            began = time.perf_counter()
            server = server_start(workers, port, log)
            out(f"  cold start (every worker warm): {time.perf_counter() - began:.1f} s")
            held[workers] = 0
            failed = False
            try:
                for agents in agents_list:
                    figures = _step(
                        agents, port=port, key=key, cwd=project_dir, options=options, server=server
                    )
                    _report_step(figures, out)
                    p95 = percentile(figures["turns"], 0.95)
                    if figures["errors"] or p95 > options["target_ms"]:
                        failed = True
                    elif not failed:
                        held[workers] = agents
                    # Past a clear overload more agents only queue; the curve is known.
                    if figures["errors"] or p95 > GIVE_UP_FACTOR * options["target_ms"]:
                        break
            finally:
                server_stop(server)
            text = log.read_text(errors="replace")
            if "Traceback" in text:
                out("  the server logged errors; the last one:")
                out(
                    "    "
                    + text[text.rindex("Traceback") :].strip()[-3000:].replace("\n", "\n    ")
                )
    finally:
        shutil.rmtree(project_dir, ignore_errors=True)
        shutil.rmtree(log.parent, ignore_errors=True)
        if not options["in_place"]:
            connection.creation.destroy_test_db(old_name, verbosity=0)
    out("")
    for workers, agents in held.items():
        out(
            f"{workers} worker(s): holds {agents} agents (think {options['think']} s) at per-turn "
            f"p95 ≤ {options['target_ms']:.0f} ms with 0 errors"
            + (" (the largest step tried)" if agents == agents_list[-1] else "")
        )
    best = max(held.items(), key=lambda item: (item[1], -item[0]))
    out(f"this machine on {connection.vendor}: {best[1]} agents, with {best[0]} worker(s)")
