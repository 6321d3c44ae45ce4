import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from memory.bench.server import database_maintain
from memory.models import Scope, ScopeKind
from memory.services.scopes import scope_ensure


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_it_runs_simulated_agents_against_a_real_server_and_reports_the_verdict():
    report = StringIO()
    call_command(
        "bench", "load", "--in-place", "--size", "200", "--workers", "1",
        "--agents", "1,3", "--seconds", "3", "--think", "0.2", "--target-ms", "60000", "--ingest", "20",
        stdout=report,
    )  # fmt: skip
    text = report.getvalue()
    steps = re.findall(r"^\s+(\d+) agents\s+([\d.]+) req/s.*errors (\d+)", text, re.MULTILINE)
    assert [int(agents) for agents, _, _ in steps] == [1, 3]
    assert all(float(rate) > 0 and errors == "0" for _, rate, errors in steps)
    assert re.search(r"turn p50/p95/p99 +[\d.]+/ *[\d.]+/ *[\d.]+ ms \(n=\d+\)", text)
    assert re.search(r"RSS master \d+ MB", text)
    assert "1 worker(s): holds 3 agents" in text
    assert re.search(r"ingest: [\d,]+ turns/s with embeddings, [\d,]+ without", text)
    assert re.search(r"database size: [\d,]+ MB", text)


def test_it_refuses_unbounded_runs():
    for arguments in (["--agents", "1,100000"], ["--seconds", "3600"], ["--workers", "0"]):
        with pytest.raises(CommandError):
            call_command("bench", "load", *arguments)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_it_grows_one_store_and_measures_a_fresh_worker_at_each_step():
    report = StringIO()
    call_command(
        "bench", "scale", "--in-place", "--narratives", "150", "--turns", "300,700",
        "--queries", "4", "--ingest", "10",
        stdout=report,
    )  # fmt: skip
    text = report.getvalue()
    assert re.findall(r"^([\d,]+) turns, 150 narratives on sqlite", text, re.MULTILINE) == [
        "300",
        "700",
    ]
    assert len(re.findall(r"ingest through the service: [\d,]+ turns/s with embeddings", text)) == 2
    for label in ("per-turn injection", "turn search", "memory search"):
        assert len(re.findall(rf"{label} +p50 +[\d.]+ ms +p95 +[\d.]+ ms +\(n=4,", text)) == 2
    # Every turn-id query found its own turn first: the grown turns are searchable.
    assert text.count("turn-id queries not ranked first: 0") == 2
    rss = [
        float(mb.replace(",", ""))
        for mb in re.findall(r"web worker RSS after the requests: ([\d,]+) MB", text)
    ]
    assert len(rss) == 2 and min(rss) > 50
    summary = text.split("summary", 1)[1]
    assert re.search(r"^\s+300\s+\d+\s+[\d.]+\s", summary, re.MULTILINE)
    assert re.search(r"^\s+700\s+\d+\s+[\d.]+\s", summary, re.MULTILINE)


@pytest.mark.parametrize(
    "arguments",
    [["--turns", "100,10"], ["--turns", "0"], ["--turns", "ten"], ["--narratives", "5"]],
)
def test_it_refuses_scale_steps_that_do_not_ascend_or_are_too_small(arguments):
    with pytest.raises(CommandError):
        call_command("bench", "scale", *arguments)


@pytest.mark.django_db(transaction=True)
def test_it_leaves_a_seeded_postgres_store_analyzed_as_autovacuum_would():
    if connection.vendor != "postgresql":
        pytest.skip("VACUUM ANALYZE is PostgreSQL's; SQLite's planner needs no statistics here")
    for number in range(7):
        scope_ensure(kind=ScopeKind.PROJECT, key=f"/work/projects/seeded-{number}")

    database_maintain()

    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE relname = %s", [Scope._meta.db_table])
        assert cursor.fetchone()[0] == Scope.objects.count()
