"""memory_search latency at scale on generated memories (SQLite, configured embedder).

Generates N narratives in one project scope (multilingual sentences built from word lists, every
one embedded for real by the configured embedder), then times `memory_search` end to end — query
embedding, BM25, cosine over the whole matrix, fusion, filters and loading the typed rows — for a
set of generated queries. Rows are inserted in bulk straight into the tables (the FTS triggers
still index them) because the write path is not what this measures. Runs in a scratch database
that is dropped at the end.
"""

import random
import statistics
import time

import numpy as np
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.utils import timezone

SUBJECTS = [
    "the user",
    "the agent",
    "our team",
    "the build server",
    "the billing service",
    "用户",
    "团队",
    "ユーザー",
    "el equipo",
    "la usuaria",
]
ACTIONS = [
    "prefers",
    "decided to use",
    "migrated from",
    "keeps forgetting about",
    "fixed a bug in",
    "wrote a design note on",
    "喜欢用",
    "决定迁移到",
    "を使っている",
    "prefiere usar",
]
OBJECTS = [
    "neovim for editing code",
    "PostgreSQL for the archive",
    "a nightly backup at 3 am",
    "the retry policy of the crawler",
    "dark mode in every tool",
    "边界条件的兜底逻辑",
    "简体中文的回复",
    "テストの自動化",
    "el despliegue con Docker",
    "the whale-listen ingestion job",
    "rate limits on the public API",
    "a weekly review every Friday",
]
DETAILS = [
    "after the outage in March",
    "because it is faster",
    "since the last release",
    "for the mobile client",
    "to keep costs down",
    "因为更稳定",
    "来年から",
    "según la última reunión",
    "",
]


def add_arguments(parser) -> None:
    parser.add_argument("--n", type=int, default=10_000, help="memories to generate")
    parser.add_argument("--queries", type=int, default=200, help="timed queries")
    parser.add_argument("--seed", type=int, default=7)


def _sentence(rng: random.Random, number: int) -> str:
    detail = rng.choice(DETAILS)
    text = f"{rng.choice(SUBJECTS)} {rng.choice(ACTIONS)} {rng.choice(OBJECTS)} {detail}".strip()
    # A rare identifier per row, so literal-keyword queries have something exact to find.
    return f"{text} (ticket tl-{number})"


def _insert(texts: list[str], vectors: np.ndarray, scope_id: int, model_id: str) -> None:
    from memory.models import EmbeddingStatus, Memory, MemoryType, Narrative
    from memory.services.embedding import vector_to_bytes

    now = timezone.now()
    parents = [
        Memory(
            memory_type=MemoryType.NARRATIVE,
            scope_id=scope_id,
            summary=text[:500],
            search_text=text,
            embedding=vector_to_bytes(vector),
            embedding_model=model_id,
            embedding_status=EmbeddingStatus.READY,
            valid_from=now,
            recorded_at=now,
        )
        for text, vector in zip(texts, vectors, strict=True)
    ]
    with transaction.atomic():
        Memory.objects.bulk_create(parents)
        fields = Narrative._meta.local_concrete_fields
        columns = ", ".join(connection.ops.quote_name(field.column) for field in fields)
        marks = ", ".join(["%s"] * len(fields))
        rows = []
        for parent in parents:
            child = Narrative(memory_ptr_id=parent.pk, gesture=parent.search_text[:500])
            rows.append(
                [
                    field.get_db_prep_save(field.pre_save(child, True), connection)
                    for field in fields
                ]
            )
        with connection.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {Narrative._meta.db_table} ({columns}) VALUES ({marks})", rows
            )


def _generate(n: int, rng: random.Random, out) -> int:
    from memory.models import ScopeKind
    from memory.services.embedding import embedder_get
    from memory.services.scopes import scope_ensure

    embedder = embedder_get()
    if embedder is None:
        raise CommandError("the search bench needs an embedder (TIDELINE_EMBEDDER is none)")
    scope = scope_ensure(kind=ScopeKind.PROJECT, key="bench/search")
    started = time.perf_counter()
    batch = 1000
    for start in range(0, n, batch):
        texts = [_sentence(rng, number) for number in range(start, min(n, start + batch))]
        vectors = embedder.embed(texts)
        _insert(texts, vectors, scope.pk, embedder.model_id)
        out(f"  generated {start + len(texts):,}/{n:,} ({time.perf_counter() - started:.0f} s)")
    return scope.pk


def _queries(rng: random.Random, n: int, count: int) -> list[str]:
    natural = [
        "which editor does the user like for code",
        "what did we decide about the archive database",
        "when does the backup run",
        "边界",
        "兜底逻辑",
        "用户喜欢什么",
        "テスト",
        "¿qué prefiere la usuaria?",
        "whale-listen",
        "rate limits",
    ]
    queries = []
    for number in range(count):
        if number % 3 == 0:
            queries.append(f"tl-{rng.randrange(n)}")
        else:
            queries.append(rng.choice(natural))
    return queries


def run(command, options) -> None:
    from memory.search import memory_search
    from memory.search.service import search_index
    from memory.services.scopes import scope_global

    n, count = options["n"], options["queries"]
    if n < 1 or count < 1:
        raise CommandError("--n and --queries must be positive")
    out = command.stdout.write
    rng = random.Random(options["seed"])
    old_name = connection.settings_dict["NAME"]
    out("creating a scratch database (nothing is written to the configured store)…")
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        scope_id = _generate(n, rng, out)
        scope_ids = [scope_id, scope_global().pk]
        started = time.perf_counter()
        index = search_index("memory")
        load_s = time.perf_counter() - started
        megabytes = (
            index.table.vectors.nbytes + sum(c.nbytes for c in index.table.data.values())
        ) / 1e6
        queries = _queries(rng, n, count)
        for query in queries[:5]:
            memory_search(query=query, scope_ids=scope_ids)
        timings = []
        found = 0
        for query in queries:
            began = time.perf_counter()
            hits = memory_search(query=query, scope_ids=scope_ids, limit=10)
            timings.append((time.perf_counter() - began) * 1000)
            found += bool(hits)
            if query.startswith("tl-") and (not hits or query not in hits[0].memory.search_text):
                out(f"  warning: literal query {query!r} did not rank its memory first")
        timings.sort()
        out("")
        out(f"memory_search over {n:,} memories, {count} queries (limit 10, incl. query embedding)")
        out(f"  index load {load_s:.1f} s, in-process index ~{megabytes:.0f} MB")
        out(
            f"  p50 {statistics.median(timings):.1f} ms   "
            f"p95 {timings[min(len(timings) - 1, int(0.95 * len(timings)))]:.1f} ms   "
            f"mean {statistics.fmean(timings):.1f} ms   max {timings[-1]:.1f} ms"
        )
        out(f"  queries with hits: {found}/{count}")
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
