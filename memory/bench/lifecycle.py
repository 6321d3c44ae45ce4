"""How cheap the pre-retrieval depends_on check and a full `maintain --dry-run` are at scale.

Seed 003 runs its dependency check before every retrieval, so it has to cost milliseconds.
Generates N live memories in one project scope, each depending on one of D directories (plus
memories with TTLs and old activations for the full plan), then times `dependencies_check` on
the common path (every directory still there), the plan after a tenth of the directories are
deleted, the expiry of what depended on them, and `lifecycle_plan` (what `maintain --dry-run`
computes). Rows are inserted in bulk (the write path is not what this measures) into a scratch
database that is dropped at the end; the directories live in a temporary folder.
"""

import random
import shutil
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from django.core.management.base import CommandError
from django.db import connection, transaction
from django.utils import timezone


def add_arguments(parser) -> None:
    parser.add_argument("--n", type=int, default=10_000, help="memories with a dependency")
    parser.add_argument("--dirs", type=int, default=200, help="distinct directories")
    parser.add_argument("--rounds", type=int, default=20, help="timed checks")
    parser.add_argument("--seed", type=int, default=7)


def _percentiles(timings: list[float]) -> str:
    timings = sorted(timings)
    p95 = timings[min(len(timings) - 1, int(0.95 * len(timings)))]
    return f"p50 {statistics.median(timings):.1f} ms   p95 {p95:.1f} ms   max {timings[-1]:.1f} ms"


def _generate(n: int, directories: list[Path], rng: random.Random, out) -> int:
    from memory.models import Memory, MemoryType, ScopeKind
    from memory.services.scopes import scope_ensure

    project = scope_ensure(kind=ScopeKind.PROJECT, key="/bench/lifecycle-project")
    now = timezone.now()
    batch = []
    with transaction.atomic():
        for index in range(n):
            directory = directories[rng.randrange(len(directories))]
            batch.append(
                Memory(
                    memory_type=MemoryType.NARRATIVE,
                    scope=project,
                    summary=f"bench memory {index} depends on {directory.name}",
                    search_text=f"bench memory {index}",
                    depends_on=[f"path:{directory}"],
                    importance=rng.randint(1, 5),
                    recorded_at=now - timedelta(days=rng.randint(0, 40)),
                    expires_at=now + timedelta(days=rng.randint(-5, 200)),
                )
            )
            if len(batch) == 5000:
                Memory.objects.bulk_create(batch)
                batch = []
                out(f"  generated {index + 1:,}/{n:,}")
        Memory.objects.bulk_create(batch)
    return project.pk


def run(command, options) -> None:
    from memory.services.maintenance import dependencies_check, dependencies_plan, lifecycle_plan
    from memory.services.scopes import scope_global

    n, dirs, rounds = options["n"], options["dirs"], options["rounds"]
    if n < 1 or dirs < 10 or rounds < 1:
        raise CommandError("--n and --rounds must be positive, --dirs at least 10")
    out = command.stdout.write
    rng = random.Random(options["seed"])
    root = Path(tempfile.mkdtemp(prefix="tideline-bench-lifecycle-"))
    directories = [root / f"project-{index}" for index in range(dirs)]
    for directory in directories:
        directory.mkdir()
    old_name = connection.settings_dict["NAME"]
    out("creating a scratch database (nothing is written to the configured store)…")
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        project_id = _generate(n, directories, rng, out)
        scope_ids = [project_id, scope_global().pk]
        timings = []
        for _ in range(rounds):
            began = time.perf_counter()
            dependencies_check(scope_ids=scope_ids)
            timings.append((time.perf_counter() - began) * 1000)
        out("")
        out(f"dependencies_check over {n:,} memories depending on {dirs} directories")
        out(f"  nothing gone (the path before every retrieval): {_percentiles(timings)}")

        for directory in directories[: dirs // 10]:
            shutil.rmtree(directory)
        began = time.perf_counter()
        plan, _ = dependencies_plan(scope_ids=scope_ids)
        plan_ms = (time.perf_counter() - began) * 1000
        began = time.perf_counter()
        report = dependencies_check(scope_ids=scope_ids)
        apply_ms = (time.perf_counter() - began) * 1000
        out(f"  {dirs // 10} directories deleted: plan {len(plan):,} expiries in {plan_ms:.1f} ms")
        out(f"  expiring them (one audit row each): {report.expired:,} in {apply_ms:.1f} ms")

        timings = []
        for _ in range(max(1, rounds // 4)):
            began = time.perf_counter()
            plan, _ = lifecycle_plan()
            timings.append((time.perf_counter() - began) * 1000)
        counts: dict[str, int] = {}
        for item in plan:
            counts[item.expired_by] = counts.get(item.expired_by, 0) + 1
        out(
            f"lifecycle_plan (maintain --dry-run) over {n - report.expired:,} live memories: "
            f"{_percentiles(timings)}; would expire {len(plan):,} "
            f"({', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))})"
        )
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
        shutil.rmtree(root, ignore_errors=True)
