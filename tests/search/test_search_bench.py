"""`manage.py bench search`: memory_search timed over a generated store, and, past the projection
threshold, how closely the projected scan with exact re-scoring follows the exact scan. Run as its
own process: the bench makes and drops its own scratch database."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

MANAGE = Path(settings.BASE_DIR) / "manage.py"


def bench_search(tmp_path: Path, *arguments: str) -> subprocess.CompletedProcess:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    env = {key: value for key, value in os.environ.items() if key != "TIDELINE_DATABASE_URL"}
    env |= {
        "TIDELINE_DATA_DIR": str(data_dir),
        # A projected scan from 100 rows on, over 16 principal directions.
        "TIDELINE_SEARCH_PROJECTION_MIN_ROWS": "100",
        "TIDELINE_SEARCH_PROJECTION_DIM": "16",
    }
    return subprocess.run(
        [sys.executable, str(MANAGE), "bench", "search", *arguments],
        cwd=MANAGE.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_it_times_memory_search_and_compares_the_projected_scan_with_the_exact_one(tmp_path):
    if connection.vendor != "sqlite":
        pytest.skip("the projected scan is the in-process index's, SQLite's default")
    done = bench_search(tmp_path, "--n", "400", "--queries", "30")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "memory_search over 400 memories on sqlite: 30 queries" in text
    assert re.search(r"p50 [\d.]+ ms +p95 [\d.]+ ms", text)
    assert re.search(
        r"dialogue-length queries as the per-turn block asks them \(top 5 matching a word "
        r"or above the noise floor\), 30 of \d{3} characters \(median\): p50 [\d.]+ ms +p95 [\d.]+ ms",
        text,
    )
    assert "cosine scan projected + exact shortlist" in text
    # Every row is in the 500-row shortlist at this size: the exact top 10 is always recovered.
    assert "exact top-10 recovered 100%" in text
    # And so every position scores as in the exact scan.
    same, asked = re.search(r"at every position \(±0.001\): (\d+)/(\d+) queries", text).groups()
    assert 0 < int(asked) <= 10 and same == asked


def test_it_refuses_sizes_it_cannot_read():
    # Refused before any scratch database is made, so it runs in the test's own process.
    for arguments in (["--n", "ten"], ["--n", "0"], ["--queries", "0"]):
        with pytest.raises(CommandError):
            call_command("bench", "search", *arguments)
