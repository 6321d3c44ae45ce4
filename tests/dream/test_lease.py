"""The DREAM lease survives a crash (issue 12.1): a holder whose process is gone is taken over at
once, a holder elsewhere only when its heartbeat runs out, and a `manage.py dream` killed with
SIGKILL mid-run leaves the next one free to start within seconds."""

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from dream.lease import (
    Holder,
    LeaseLost,
    holder_here,
    lease_acquire,
    lease_heartbeat,
    lease_kept,
    lease_renew,
    lease_takeover_record,
)
from dream.models import DreamLease, DreamRun, DreamRunStatus
from memory.models import AuditEvent, Evidence, MemoryStatus, Narrative
from memory.services.timeline import TurnInput, session_start, turns_record
from tests.dream.conftest import database_url
from tests.fakes.llm_server import json_answer, slow_answer


def _gone_pid() -> int:
    """The pid of a process of this host that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_it_takes_over_at_once_a_lease_whose_process_is_gone_from_this_host(db):
    dead = Holder(token="dead", host=holder_here().host, pid=_gone_pid(), process_started="1")
    assert lease_acquire(holder=dead, seconds=3600)
    successor = holder_here()
    grant = lease_acquire(holder=successor)
    assert grant.taken_from["pid"] == dead.pid
    lease = DreamLease.objects.get()
    assert (lease.holder, lease.pid) == (successor.token, os.getpid())
    lease_takeover_record(grant=grant, holder=successor)
    takeover = AuditEvent.objects.get(target_type="dreamlease")
    assert takeover.actor == "system" and f"pid {dead.pid} is gone" in takeover.reason


def test_it_leaves_a_live_holder_alone_and_waits_for_a_remote_holders_heartbeat(db):
    alive = holder_here()
    assert lease_acquire(holder=alive, seconds=3600)
    assert not lease_acquire(holder=holder_here())
    DreamLease.objects.update(expires_at=timezone.now() + timedelta(seconds=3600))

    remote = Holder(token="remote", host="another-machine", pid=1, process_started="")
    DreamLease.objects.update(holder="remote", host="another-machine", pid=1)
    assert not lease_acquire(holder=holder_here())
    DreamLease.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    grant = lease_acquire(holder=holder_here())
    assert grant.taken_from["why"] == "stopped renewing its heartbeat"
    with pytest.raises(LeaseLost):
        lease_renew(holder=remote)


def test_it_renews_the_lease_past_an_llm_calls_silence(db, settings):
    settings.TIDELINE_DREAM_LEASE_SECONDS = 120
    holder = holder_here()
    assert lease_acquire(holder=holder)
    with lease_kept(holder):
        lease_heartbeat(quiet_seconds=300)
    lease = DreamLease.objects.get()
    left = (lease.expires_at - timezone.now()).total_seconds()
    assert 400 < left <= 420 and lease.heartbeat_at is not None


def test_it_has_a_short_default_lease():
    assert settings.TIDELINE_DREAM_LEASE_SECONDS <= 300


def _dream_command(env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "manage.py", "dream", "--layer", "solidify", "--json"],
        cwd=settings.BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_it_lets_the_next_dream_start_within_seconds_after_a_sigkill_mid_run(
    transactional_db, fake_llm, project_scope
):
    session = session_start(runtime="test", external_id="kill", scope_id=project_scope.pk)
    turns = turns_record(
        session_id=session.pk,
        turns=[
            TurnInput(role="user", content="Move the archive index to PostgreSQL"),
            TurnInput(role="assistant", content="SQLite locks under two writers"),
            TurnInput(role="user", content="Do it tomorrow, I will review it"),
        ],
    )
    env = {
        **os.environ,
        "TIDELINE_DATABASE_URL": database_url(),
        "TIDELINE_LLM_CONFIG_FILE": str(settings.TIDELINE_LLM_CONFIG_FILE),
        "TIDELINE_LLM_TIMEOUT": "60",
        "TIDELINE_EMBEDDER": "none",
        # Ten minutes: a takeover that waited for the expiry would fail this test.
        "TIDELINE_DREAM_LEASE_SECONDS": "600",
    }
    fake_llm.script(slow_answer(60.0, {"narratives": []}))
    first = _dream_command(env)
    try:
        deadline = time.monotonic() + 60
        while not fake_llm.requests and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.1)
        assert fake_llm.requests, first.stderr.read().decode()[-2000:] if first.poll() else ""
        killed_run = DreamRun.objects.get(status=DreamRunStatus.RUNNING)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    killed_at = timezone.now()
    killed_clock = time.monotonic()

    fake_llm.script(
        json_answer(
            {
                "narratives": [
                    {
                        "gesture": "We decided to move the archive index to PostgreSQL",
                        "importance": 4,
                        "emotional": 2,
                        "unresolved": 3,
                        "source_turn_ids": [turn.pk for turn in turns],
                    }
                ]
            }
        )
    )
    second = _dream_command(env)
    _, err = second.communicate(timeout=120)
    finished = time.monotonic() - killed_clock
    assert second.returncode == 0, err.decode()[-2000:]
    resumed = DreamRun.objects.exclude(pk=killed_run.pk).get()
    takeover = (resumed.started_at - killed_at).total_seconds()
    print(f"\nlease takeover after SIGKILL: {takeover:.2f} s; next run done in {finished:.2f} s")
    assert resumed.status == DreamRunStatus.OK, resumed.error
    assert takeover < 60 and finished < 120
    killed_run.refresh_from_db()
    assert killed_run.status == DreamRunStatus.INTERRUPTED
    # (The inbox's rules also left a candidate from the first user turn; DREAM's is the active one.)
    narrative = Narrative.objects.get(status=MemoryStatus.ACTIVE)
    assert set(Evidence.objects.filter(memory=narrative).values_list("turn_id", flat=True)) == {
        turn.pk for turn in turns
    }
    takeover_audit = AuditEvent.objects.get(target_type="dreamlease")
    assert f"run #{killed_run.pk} interrupted" in takeover_audit.reason
    assert takeover_audit.request_id == f"dream-run-{resumed.pk}"
