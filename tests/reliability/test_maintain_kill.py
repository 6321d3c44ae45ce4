"""SIGKILL during `manage.py maintain` leaves all of its expiries or none of them."""

import contextlib
import random
import signal
import sqlite3
import subprocess
import sys
import time

from tests.reliability.conftest import BASE_DIR, LONG, Instance

TRIALS = 10 if LONG else 3
MEMORIES = 3000 if LONG else 800

SEED = f"""
from datetime import timedelta
from django.db import transaction
from django.utils import timezone
from memory.models import Memory
from memory.services.facts import FactInput, fact_write
from memory.services.scopes import scope_ensure
scope = scope_ensure(kind="project", key="/srv/reliability-project")
with transaction.atomic():
    for n in range({MEMORIES}):
        fact_write(data=FactInput(scope_id=scope.pk, profile_name="harbour crane {{}}".format(n),
            profile_kind="project", kind="fact", predicate="inspection_due",
            value="crane {{}} inspection due in April".format(n)))
    Memory.objects.update(expires_at=timezone.now() - timedelta(days=1))
"""


def expiry_state(instance: Instance) -> tuple[int, int, int]:
    (expired,) = instance.sql("SELECT COUNT(*) FROM memory_memory WHERE status = 'expired'")[0]
    (live,) = instance.sql("SELECT COUNT(*) FROM memory_memory WHERE status = 'active'")[0]
    (audited,) = instance.sql(
        "SELECT COUNT(*) FROM memory_auditevent WHERE action = 'expire' AND actor = 'system'"
    )[0]
    return expired, live, audited


def write_lock_held(instance: Instance) -> bool:
    """True while another connection holds the write lock (maintain's one transaction: the
    planning before it only reads)."""
    with contextlib.closing(sqlite3.connect(instance.db_path, timeout=0)) as probe:
        try:
            probe.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:
            return True
        probe.rollback()
        return False


def maintain_start(instance: Instance) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(BASE_DIR / "manage.py"), "maintain"],
        cwd=BASE_DIR,
        env=instance.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def transaction_wait(instance: Instance, process: subprocess.Popen) -> float:
    """Block until maintain's write transaction has begun; returns when it began."""
    deadline = time.monotonic() + 300
    while not write_lock_held(instance):
        assert process.poll() is None, "maintain ended before its transaction was seen"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    return time.monotonic()


def test_it_expires_all_or_nothing_when_maintain_is_killed(instance, tmp_path, record_property):
    seeded = instance.manage("shell", "-c", SEED, timeout=600)
    assert seeded.returncode == 0, seeded.stderr
    pristine = tmp_path / "seeded.sqlite3"
    instance.db_copy(source=instance.db_path, target=pristine)
    assert expiry_state(instance) == (0, MEMORIES, 0)

    process = maintain_start(instance)
    began = transaction_wait(instance, process)
    while write_lock_held(instance):
        time.sleep(0.005)
    applying = time.monotonic() - began
    assert process.wait(timeout=600) == 0
    assert expiry_state(instance) == (MEMORIES, 0, MEMORIES)

    rng = random.Random(7)
    outcomes = []
    for _ in range(TRIALS):
        instance.db_copy(source=pristine, target=instance.db_path)
        process = maintain_start(instance)
        transaction_wait(instance, process)
        time.sleep(rng.uniform(0.1, 0.5) * applying)  # inside the transaction
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        state = expiry_state(instance)
        outcomes.append(state)
        assert state in {(0, MEMORIES, 0), (MEMORIES, 0, MEMORIES)}, state
        assert instance.sql("PRAGMA integrity_check") == [("ok",)]

    none_applied = sum(1 for expired, _, _ in outcomes if expired == 0)
    record_property("maintain_kills", TRIALS)
    print(
        f"maintain kills inside its transaction: {TRIALS} (transaction {applying:.2f} s), "
        f"none applied: {none_applied}, all applied: {TRIALS - none_applied}, partial: 0"
    )
    assert none_applied == TRIALS  # killed before its commit, so nothing of it remains
