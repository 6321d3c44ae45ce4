"""Data scale: one store grown to `--narratives` narratives and each of `--turns` turns, measured at
every step on the configured database (SQLite or PostgreSQL, in a scratch database).

At each step it reports:
- ingest: turns/s through the write service (`turns_record`, 10 turns per sync, one transaction
  each) with the configured embedder inline and with embeddings off;
- the database's size on disk;
- a fresh web worker (uvicorn, one worker, warm-up on start): spawn → warm seconds, with the
  warm-up's own split (embedder, indexes), and its first request after warm-up;
- over HTTP on a keep-alive connection: per-turn injection (`POST /api/v1/turn`, record=false, as
  the hook asks), turn search (`GET /api/v1/timeline/search`) and memory search (`GET /api/v1/search`)
  p50/p95, and how many turn-id queries did not rank their own turn first;
- the worker's RSS after those requests: on PostgreSQL with pgvector no process holds a copy of the
  corpus, so it stays flat as the store grows; SQLite's and PostgreSQL-without-pgvector's
  per-process index grow with it.

Rows are bulk-inserted (the search indexes still maintain themselves: FTS5 triggers on SQLite,
the commit-time apply on PostgreSQL); each turn is one of a few thousand sentence templates plus a
unique turn id, and its vector is the configured embedder's vector of its template (computed once
per template: embedding a million distinct turns would take an hour here, and no measured query
path depends on the values). On PostgreSQL the store is VACUUM ANALYZEd after each bulk step, as
autovacuum does on a store that grew gradually. Nothing is written to the configured store
(unless `--in-place`).
"""

import json
import os
import random
import shutil
import statistics
import tempfile
import time
import urllib.parse
from datetime import timedelta
from pathlib import Path

import numpy as np
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.utils import timezone

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

MAX_TURNS = 5_000_000
TURNS_PER_SESSION = 100
SPEAKERS = ["Amy", "Bart", "Chen Wei", "Yuki", "Lucía"]
OPENINGS = [
    "I think",
    "yesterday",
    "honestly",
    "remember that",
    "我觉得",
    "昨天",
    "たぶん",
    "creo que",
    "so",
    "the plan is that",
]
TURN_QUERIES = [
    "what did Amy say about the nightly backup",
    "when did we talk about the crawler retry policy",
    "neovim for editing code",
    "边界条件的兜底逻辑",
    "テストの自動化について",
    "el despliegue con Docker",
    "rate limits on the public API",
    "who mentioned dark mode",
]


def add_arguments(parser) -> None:
    parser.add_argument(
        "--narratives", type=int, default=100_000, help="narratives seeded before the turns"
    )
    parser.add_argument(
        "--turns",
        default="10000,100000,1000000",
        help="turn counts to grow the store through and measure at, ascending",
    )
    parser.add_argument("--queries", type=int, default=100, help="timed requests of each kind")
    parser.add_argument(
        "--ingest", type=int, default=500, help="turns written through the service per step"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--in-place",
        action="store_true",
        help="seed the configured database instead of a scratch one (tests use this)",
    )


def _steps(options) -> list[int]:
    try:
        steps = [int(part) for part in str(options["turns"]).split(",") if part.strip()]
    except ValueError as exc:
        raise CommandError("--turns takes ascending turn counts such as 10000,100000") from exc
    if not steps or steps != sorted(set(steps)) or steps[0] < 1 or steps[-1] > MAX_TURNS:
        raise CommandError(f"--turns must ascend within 1..{MAX_TURNS:,}")
    if options["narratives"] < 100 or options["queries"] < 1 or options["ingest"] < 0:
        raise CommandError("--narratives must be ≥ 100, --queries ≥ 1 and --ingest ≥ 0")
    return steps


def _templates(rng: random.Random) -> list[str]:
    from injection.bench import ACTIONS, DETAILS, OBJECTS, SUBJECTS

    sentences = [
        f"{opening} {subject} {action} {thing} {detail}".strip()
        for opening in OPENINGS
        for subject in SUBJECTS
        for action in ACTIONS
        for thing in OBJECTS
        for detail in DETAILS
    ]
    rng.shuffle(sentences)
    return sentences[:3000]


def _turns_grow(
    *, start: int, stop: int, scope_id: int, templates: list[str], vectors: np.ndarray, progress
) -> float:
    """Append turns start..stop-1 in sessions of TURNS_PER_SESSION; returns rows/s."""
    from memory.models import ContextTurn, EmbeddingStatus, Session
    from memory.services.embedding import embedder_get, vector_to_bytes

    model_id = embedder_get().model_id
    blobs = [vector_to_bytes(vector) for vector in vectors]
    epoch = timezone.now() - timedelta(days=365)
    began = time.perf_counter()
    bar = progress(total=stop - start, desc=f"turns → {stop:,}", unit="turns")
    batch = 2000
    for first in range(start, stop, batch):
        last = min(stop, first + batch)
        with transaction.atomic():
            sessions = {
                number: Session(
                    external_id=f"scale-{number}",
                    runtime="bench",
                    scope_id=scope_id,
                    started_at=epoch + timedelta(minutes=number * TURNS_PER_SESSION),
                )
                for number in range(first // TURNS_PER_SESSION, (last - 1) // TURNS_PER_SESSION + 1)
            }
            existing = {
                session.external_id: session
                for session in Session.objects.filter(
                    runtime="bench", external_id__in=[s.external_id for s in sessions.values()]
                )
            }
            Session.objects.bulk_create(
                [s for s in sessions.values() if s.external_id not in existing]
            )
            for number, session in sessions.items():
                if session.external_id in existing:
                    sessions[number] = existing[session.external_id]
            rows = []
            for position in range(first, last):
                template = position % len(templates)
                speaker = SPEAKERS[position % len(SPEAKERS)]
                rows.append(
                    ContextTurn(
                        session=sessions[position // TURNS_PER_SESSION],
                        scope_id=scope_id,
                        seq=position % TURNS_PER_SESSION + 1,
                        role="user" if position % 2 == 0 else "assistant",
                        speaker=speaker,
                        content=f"{templates[template]} (turn tn-{position})",
                        occurred_at=epoch + timedelta(minutes=position),
                        embedding=blobs[template],
                        embedding_model=model_id,
                        embedding_status=EmbeddingStatus.READY,
                    )
                )
            ContextTurn.objects.bulk_create(rows)
        bar.update(last - first)
    bar.close()
    return (stop - start) / (time.perf_counter() - began)


def _server_run(*, key: str, cwd: str, options, rng: random.Random) -> dict:
    """A fresh one-worker server: its cold start, timed requests and RSS."""
    from injection.bench import QUERIES, _post

    log = Path(tempfile.mkdtemp(prefix="tideline-scale-log-")) / "server.log"
    port = free_port()
    began = time.perf_counter()
    server = server_start(1, port, log)
    figures: dict = {"cold_s": time.perf_counter() - began}
    try:
        warm_line = next(line for line in log.read_text().splitlines() if "warm-up done" in line)
        figures["warm"] = warm_line.split("warm-up done: ", 1)[1]
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        session = {"cwd": cwd, "runtime": "scale", "session_id": "scale-probe"}
        first, _ = _post(conn, key, "/api/v1/turn", {**session, "content": QUERIES[0]})
        figures["first_ms"] = first
        turn_ms, turn_search_ms, search_ms = [], [], []
        misses = 0
        top = options["top_turn"]
        for number in range(options["queries"]):
            query = f"{rng.choice(QUERIES)} ({number})"
            body = {**session, "content": query, "record": False}
            turn_ms.append(_post(conn, key, "/api/v1/turn", body)[0])
            if number % 2 == 0:
                wanted = rng.randrange(top)
                text = f"tn-{wanted}"
            else:
                wanted, text = None, rng.choice(TURN_QUERIES)
            elapsed, hits = _get(conn, key, "/api/v1/timeline/search", {"q": text, "cwd": cwd})
            turn_search_ms.append(elapsed)
            if wanted is not None and (
                not hits or f"(turn tn-{wanted})" not in hits[0]["turn"]["content"]
            ):
                misses += 1
            search_ms.append(
                _get(conn, key, "/api/v1/search", {"q": rng.choice(QUERIES), "cwd": cwd})[0]
            )
        conn.close()
        figures |= {
            "turn": turn_ms,
            "turn_search": turn_search_ms,
            "search": search_ms,
            "misses": misses,
            "rss": max(rss_mb(pid) for pid in children(server.pid) or [server.pid]),
        }
    finally:
        server_stop(server)
        shutil.rmtree(log.parent, ignore_errors=True)
    return figures


def _get(conn, key: str, path: str, params: dict) -> tuple[float, list]:
    began = time.perf_counter()
    conn.request(
        "GET",
        f"{path}?{urllib.parse.urlencode(params)}",
        headers={"Authorization": f"Bearer {key}"},
    )
    response = conn.getresponse()
    payload = response.read()
    elapsed = (time.perf_counter() - began) * 1000
    if response.status != 200:
        raise CommandError(f"{path} answered {response.status}: {payload[:300]!r}")
    return elapsed, json.loads(payload)


def _report(step: dict, out) -> None:
    out(f"\n{step['turns']:,} turns, {step['narratives']:,} narratives on {step['backend']}")
    out(f"  bulk growth {step['grow_rate']:,.0f} turns/s (search index maintained)")
    if "ingest" in step:
        with_e, without = step["ingest"]
        out(
            f"  ingest through the service: {with_e:,.0f} turns/s with embeddings, {without:,.0f} without"
        )
    out(f"  database size {step['size_mb']:,.0f} MB")
    out(
        f"  fresh worker: spawn → warm {step['cold_s']:.1f} s ({step['warm']}), "
        f"first per-turn request {step['first_ms']:.0f} ms"
    )
    for label, key in (
        ("per-turn injection", "turn"),
        ("turn search", "turn_search"),
        ("memory search", "search"),
    ):
        values = step[key]
        out(
            f"  {label:<18} p50 {statistics.median(values):6.1f} ms   p95 {percentile(values, 0.95):6.1f} ms"
            f"   (n={len(values)}, HTTP incl. query embedding)"
        )
    out(f"  turn-id queries not ranked first: {step['misses']}")
    out(f"  web worker RSS after the requests: {step['rss']:,.0f} MB")
    out(f"  machine load average (1/5/15 min): {step['load']} on {os.cpu_count()} cores")


def run(command, options) -> None:
    from injection.bench import _seed_narratives, _seed_rest
    from injection.services.access import apikey_create
    from memory.models import ScopeKind
    from memory.search import postgres
    from memory.services.embedding import embedder_get
    from memory.services.scopes import scope_ensure

    steps = _steps(options)
    embedder = embedder_get()
    if embedder is None:
        raise CommandError("the scale bench needs an embedder (TIDELINE_EMBEDDER is none)")
    out = command.stdout.write
    rng = random.Random(options["seed"])
    old_name = connection.settings_dict["NAME"]
    if not options["in_place"]:
        out("creating a scratch database (the configured store is untouched)…")
        connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    project_dir = tempfile.mkdtemp(prefix="tideline-scale-project-")
    backend = connection.vendor
    if backend == "postgresql":
        vectors_where = "pgvector" if postgres.capabilities()["vector"] else "in-process matrix"
        backend += f" ({'native' if postgres.native_active() else 'in-process'} search, "
        backend += f"vectors: {vectors_where})"
    steps_done = []
    try:
        scope = scope_ensure(kind=ScopeKind.PROJECT, key=str(project_dir))
        began = time.perf_counter()
        ids = _seed_narratives(options["narratives"], scope.pk, rng, out)
        _seed_rest(scope.pk, ids, rng)
        out(f"  seeded {options['narratives']:,} narratives in {time.perf_counter() - began:.0f} s")
        _, key = apikey_create(name="scale", scope_ids=[scope.pk])
        templates = _templates(rng)
        vectors = np.concatenate(
            [embedder.embed(templates[i : i + 500]) for i in range(0, len(templates), 500)]
        )
        stored = 0
        for turns in steps:
            grow_rate = _turns_grow(
                start=stored,
                stop=turns,
                scope_id=scope.pk,
                templates=templates,
                vectors=vectors,
                progress=command.progress,
            )
            stored = turns
            step = {
                "turns": turns,
                "narratives": options["narratives"],
                "backend": backend,
                "grow_rate": grow_rate,
            }
            if options["ingest"]:
                step["ingest"] = ingest_rates(options["ingest"], scope.pk, tag=str(turns))
            database_maintain()
            step["size_mb"] = database_size_mb()
            connection.close()
            step |= _server_run(
                key=key, cwd=project_dir, options={**options, "top_turn": turns}, rng=rng
            )
            step["load"] = " ".join(f"{value:.1f}" for value in os.getloadavg())
            _report(step, out)
            steps_done.append(step)
    finally:
        shutil.rmtree(project_dir, ignore_errors=True)
        if not options["in_place"]:
            connection.creation.destroy_test_db(old_name, verbosity=0)
    out("\nsummary (p50/p95 ms over HTTP; RSS of the one web worker)")
    out("  turns       size MB  cold s  per-turn       turn search    memory search  RSS MB")
    for step in steps_done:
        out(
            f"  {step['turns']:>9,}  {step['size_mb']:>7,.0f}  {step['cold_s']:>6.1f}  "
            + "  ".join(
                f"{statistics.median(step[key]):5.1f}/{percentile(step[key], 0.95):6.1f}"
                for key in ("turn", "turn_search", "search")
            )
            + f"  {step['rss']:>6,.0f}"
        )
