"""Injection latency end to end over HTTP, and the token size of each block.

For each size (default 10k and 100k memories) it builds a scratch database (never the configured
store), seeds it — narratives in bulk with real embeddings (one per distinct sentence template),
plus profiles, facts, self-concept, threads, a snapshot, topic clusters and a few earlier sessions
through the services — starts the real ASGI server on a free loopback port, and times
`POST /api/v1/session/start` and `POST /api/v1/turn` from a keep-alive HTTP client (the per-turn
figure includes recording the turn and embedding it). It also times the Claude Code hook process,
start to exit, against that server and against a dead port.
"""

import http.client
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta

import numpy as np
from django.conf import settings
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.utils import timezone

from memory.bench.server import percentile

SUBJECTS = ["the user", "the agent", "our team", "用户", "团队", "ユーザー", "el equipo"]
ACTIONS = ["prefers", "decided to use", "migrated from", "fixed a bug in", "喜欢用", "决定迁移到"]
OBJECTS = [
    "neovim for editing code",
    "PostgreSQL for the archive",
    "a nightly backup at 3 am",
    "the retry policy of the crawler",
    "边界条件的兜底逻辑",
    "简体中文的回复",
    "テストの自動化",
    "el despliegue con Docker",
    "rate limits on the public API",
    "the scope resolver",
]
DETAILS = ["after the outage", "because it is faster", "因为更稳定", "来年から", ""]
DIRECTIONS = ["check it again next week", "下次先看日志", "ask before changing it", ""]
TAGS = [f"topic{n}" for n in range(200)]
QUERIES = [
    "which editor does the user like for writing code?",
    "what did we decide about the archive database",
    "when does the backup run every night",
    "边界条件怎么兜底",
    "用户喜欢什么样的回复",
    "テストはどうなっている？",
    "¿qué prefiere el equipo para desplegar?",
    "how should the crawler retry after rate limits",
    "the scope resolver keeps picking global, why",
    "let's continue with the parser refactor",
]


def add_arguments(parser) -> None:
    parser.add_argument(
        "--sizes", default="10000,100000", help="comma-separated memory counts to measure"
    )
    parser.add_argument("--turns", type=int, default=200, help="timed per-turn requests per size")
    parser.add_argument("--starts", type=int, default=30, help="timed session starts per size")
    parser.add_argument("--hook-runs", type=int, default=20, help="timed hook processes")
    parser.add_argument("--seed", type=int, default=7)


def _seed_narratives(n: int, scope_id: int, rng: random.Random, out) -> list[int]:
    from memory.models import EmbeddingStatus, Memory, MemoryType, Narrative, NarrativeTag
    from memory.services.embedding import embedder_get, vector_to_bytes

    embedder = embedder_get()
    if embedder is None:
        raise CommandError("bench inject needs an embedder (TIDELINE_EMBEDDER is none)")
    templates = [
        f"{s} {a} {o} {d}".strip()
        for s in SUBJECTS
        for a in ACTIONS
        for o in OBJECTS
        for d in DETAILS
    ]
    started = time.perf_counter()
    vectors = np.concatenate(
        [embedder.embed(templates[i : i + 500]) for i in range(0, len(templates), 500)]
    )
    out(f"  embedded {len(templates):,} sentence templates ({time.perf_counter() - started:.0f} s)")
    now = timezone.now()
    fields = Narrative._meta.local_concrete_fields
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    ids: list[int] = []
    batch = 2000
    for start in range(0, n, batch):
        picks = [rng.randrange(len(templates)) for _ in range(min(batch, n - start))]
        ages = [timedelta(hours=rng.uniform(0, 24 * 60)) for _ in picks]
        parents = [
            Memory(
                memory_type=MemoryType.NARRATIVE,
                scope_id=scope_id,
                summary=f"{templates[p]} (#{start + k})",
                search_text=f"{templates[p]} (#{start + k})",
                embedding=vector_to_bytes(vectors[p]),
                embedding_model=embedder.model_id,
                embedding_status=EmbeddingStatus.READY,
                valid_from=now - age,
                recorded_at=now - age,
            )
            for k, (p, age) in enumerate(zip(picks, ages, strict=True))
        ]
        with transaction.atomic():
            Memory.objects.bulk_create(parents)
            rows, tag_rows = [], []
            for parent in parents:
                tags = rng.sample(TAGS, 2)
                child = Narrative(
                    memory_ptr_id=parent.pk,
                    gesture=parent.search_text[:500],
                    cognition_direction=rng.choice(DIRECTIONS),
                    weight=round(rng.uniform(0.2, 0.95), 3),
                    tags=tags,
                )
                rows.append(
                    [f.get_db_prep_save(f.pre_save(child, True), connection) for f in fields]
                )
                tag_rows += [NarrativeTag(narrative_id=parent.pk, tag=tag) for tag in tags]
            with connection.cursor() as cursor:
                cursor.executemany(
                    f"INSERT INTO {Narrative._meta.db_table} ({columns}) VALUES ({marks})", rows
                )
            NarrativeTag.objects.bulk_create(tag_rows)
        ids += [parent.pk for parent in parents]
        out(
            f"  seeded {start + len(parents):,}/{n:,} narratives ({time.perf_counter() - started:.0f} s)"
        )
    return ids


def _seed_rest(scope_id: int, narrative_ids: list[int], rng: random.Random) -> None:
    """What a lived-in store also has, written through the services."""
    from dream.models import TopicCluster, TopicClusterMember
    from memory.models import Memory, Profile
    from memory.services.evidence import evidence_link
    from memory.services.facts import FactInput, fact_write
    from memory.services.self_concept import self_concept_write
    from memory.services.threads import snapshot_write, thread_write
    from memory.services.timeline import TurnInput, session_start, turns_record

    for field, content in [
        ("fact", "I am the coding agent of this workspace; I keep notes in Tideline."),
        ("terrain", "Mostly Python and Django; the owner writes in Chinese and English."),
        ("self_reflection", "I rush to fix before I understand; slow down on the first read."),
    ]:
        self_concept_write(field=field, content=content)
    for n in range(20):
        for k in range(5):
            fact_write(
                data=FactInput(
                    scope_id=scope_id,
                    profile_name=f"person {n}",
                    profile_kind="person",
                    kind="fact",
                    predicate=f"detail_{k}",
                    value=f"value {k} of person {n}",
                )
            )
    Profile.objects.filter(name__in=["person 0", "person 1"]).update(pinned=True)
    for n in range(8):
        thread_write(scope_id=scope_id, content=f"open question number {n}", importance=1 + n % 5)
    snapshot_write(scope_id=scope_id, content="Halfway through the parser refactor; tests red.")
    for n in range(30):
        cluster = TopicCluster.objects.create(
            scope_id=scope_id, term=f"topic{n}", terms=[f"topic{n}"], size=12
        )
        TopicClusterMember.objects.bulk_create(
            [
                TopicClusterMember(cluster=cluster, narrative_id=pk)
                for pk in rng.sample(narrative_ids, 12)
            ]
        )
    now = timezone.now()
    for n in range(5):
        session = session_start(runtime="bench", external_id=f"earlier-{n}", scope_id=scope_id)
        turns = turns_record(
            session_id=session.pk,
            turns=[
                TurnInput(
                    role="user" if k % 2 == 0 else "assistant",
                    content=f"earlier session {n}, turn {k}: " + rng.choice(QUERIES) * 3,
                    occurred_at=now - timedelta(hours=30 + n * 5, minutes=-k),
                )
                for k in range(12)
            ],
        )
        narrative = Memory.objects.get(pk=narrative_ids[n]).child
        evidence_link(memory=narrative, turn_ids=[turns[0].pk])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _server_start(db_path: str, port: int) -> subprocess.Popen:
    env = {
        **os.environ,
        "TIDELINE_DATABASE_URL": f"sqlite:///{db_path}",
        "TIDELINE_LOG_LEVEL": "ERROR",
        # A benchmark measures latency, not the throttle.
        "TIDELINE_THROTTLE_KEY_PER_MINUTE": "0",
        "TIDELINE_THROTTLE_ADDRESS_PER_MINUTE": "0",
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "tideline_site.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
            "--log-level",
            "warning",
        ],
        cwd=settings.BASE_DIR,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process
        except OSError:
            if process.poll() is not None:
                raise CommandError(
                    f"the server did not start: {process.stderr.read().decode()}"
                ) from None
            time.sleep(0.2)
    process.terminate()
    raise CommandError("the server did not start within 60 s")


def _post(conn: http.client.HTTPConnection, key: str, path: str, body: dict) -> tuple[float, dict]:
    data = json.dumps(body)
    began = time.perf_counter()
    conn.request(
        "POST",
        path,
        body=data,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    response = conn.getresponse()
    payload = response.read()
    elapsed = (time.perf_counter() - began) * 1000
    if response.status != 200:
        raise CommandError(f"{path} answered {response.status}: {payload[:300]!r}")
    return elapsed, json.loads(payload)


def _hook_times(port: int, key: str, runs: int, cwd: str) -> tuple[list[float], list[float]]:
    hook = str(settings.BASE_DIR / "injection" / "hooks" / "claude_code.py")
    event = json.dumps(
        {
            "hook_event_name": "UserPromptSubmit",
            "session_id": "hook-bench",
            "cwd": cwd,
            "prompt": "which editor does the user like for writing code?",
        }
    ).encode()
    up, down = [], []
    for url, bucket in ((f"http://127.0.0.1:{port}", up), ("http://127.0.0.1:9", down)):
        env = {"PATH": os.environ["PATH"], "TIDELINE_URL": url, "TIDELINE_API_KEY": key}
        for _ in range(runs):
            began = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-I", hook], input=event, capture_output=True, env=env
            )
            bucket.append((time.perf_counter() - began) * 1000)
            context = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
            if bucket is up and not context:
                raise CommandError(f"the hook injected nothing: {done.stderr.decode()[:300]}")
    return up, down


def _measure(n: int, options, rng: random.Random, out, progress) -> dict:
    from injection.services.access import apikey_create
    from memory.models import ScopeKind
    from memory.services.scopes import scope_ensure

    # Outside any git work tree, so the cwd resolves to exactly this registered project.
    project_dir = tempfile.mkdtemp(prefix="tideline-bench-project-")
    scope = scope_ensure(kind=ScopeKind.PROJECT, key=str(project_dir))
    ids = _seed_narratives(n, scope.pk, rng, out)
    _seed_rest(scope.pk, ids, rng)
    _, key = apikey_create(name="bench", scope_ids=[scope.pk])
    port = _free_port()
    server = _server_start(connection.settings_dict["NAME"], port)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        where = {"cwd": str(project_dir), "runtime": "bench"}
        out("  warming up the server (embedder, jieba, search index)…")
        _post(conn, key, "/api/v1/session/start", {**where, "session_id": "warm"})
        for query in QUERIES[:3]:
            _post(conn, key, "/api/v1/turn", {**where, "session_id": "warm", "content": query})
        bar = progress(total=options["starts"] + options["turns"], desc="requests", unit="req")
        starts, start_tokens, section_tokens = [], [], {}
        for k in range(options["starts"]):
            ms, body = _post(conn, key, "/api/v1/session/start", {**where, "session_id": f"s{k}"})
            starts.append(ms)
            bar.update()
            start_tokens.append(body["tokens"])
            for name, tokens in body["section_tokens"].items():
                section_tokens.setdefault(name, []).append(tokens)
        turns, peeks, turn_tokens = [], [], []
        for k in range(options["turns"]):
            query = f"{rng.choice(QUERIES)} ({k})"
            turn = {**where, "session_id": f"s{k % 10}", "content": query}
            # As the hook asks: the block only (its Stop hook records the turn).
            peeks.append(_post(conn, key, "/api/v1/turn", {**turn, "record": False})[0])
            ms, body = _post(conn, key, "/api/v1/turn", turn)
            turns.append(ms)
            bar.update()
            turn_tokens.append(body["tokens"])
            for name, tokens in body["section_tokens"].items():
                section_tokens.setdefault(name, []).append(tokens)
        bar.close()
        hook_up, hook_down = _hook_times(port, key, options["hook_runs"], str(project_dir))
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(project_dir, ignore_errors=True)
    return {
        "starts": starts,
        "turns": turns,
        "peeks": peeks,
        "start_tokens": start_tokens,
        "turn_tokens": turn_tokens,
        "sections": section_tokens,
        "hook_up": hook_up,
        "hook_down": hook_down,
    }


def _report(n: int, figures: dict, out) -> None:
    def line(label, values, unit="ms"):
        out(
            f"  {label:<28} p50 {statistics.median(values):7.1f} {unit}   "
            f"p95 {percentile(values, 0.95):7.1f} {unit}   max {max(values):7.1f} {unit}"
        )

    out("")
    out(f"inject over HTTP with {n:,} memories")
    line(f"session start ({len(figures['starts'])})", figures["starts"])
    line(f"per turn, recorded ({len(figures['turns'])})", figures["turns"])
    line(f"per turn, block only ({len(figures['peeks'])})", figures["peeks"])
    line("hook start→exit, server up", figures["hook_up"])
    line("hook start→exit, server down", figures["hook_down"])
    out(f"  session-start block tokens: median {statistics.median(figures['start_tokens']):.0f}")
    out(f"  per-turn block tokens:      median {statistics.median(figures['turn_tokens']):.0f}")
    for name in ("t0", "t2", "t2b", "t3", "t1", "t4"):
        values = figures["sections"].get(name)
        if values:
            out(
                f"    {name:<4} median {statistics.median(values):6.0f} tokens (in {len(values)} blocks)"
            )
    for label, values in (("recorded", figures["turns"]), ("block only", figures["peeks"])):
        p50 = statistics.median(values)
        verdict = "met" if p50 <= 50 else "NOT met"
        out(f"  per-turn p50 ≤ 50 ms ({label}): {verdict} ({p50:.1f} ms)")


def run(command, options) -> None:
    try:
        sizes = [int(size) for size in options["sizes"].split(",") if size.strip()]
    except ValueError as exc:
        raise CommandError("--sizes takes comma-separated integers") from exc
    if not sizes or min(sizes) < 100 or options["turns"] < 1 or options["starts"] < 1:
        raise CommandError("--sizes must be ≥ 100 and --turns/--starts positive")
    out = command.stdout.write
    rng = random.Random(options["seed"])
    for n in sizes:
        old_name = connection.settings_dict["NAME"]
        out(f"[{n:,} memories] creating a scratch database (the configured store is untouched)…")
        connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
        try:
            figures = _measure(n, options, rng, out, command.progress)
        finally:
            connection.creation.destroy_test_db(old_name, verbosity=0)
        _report(n, figures, out)
