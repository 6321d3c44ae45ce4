"""DREAM through a real Celery worker on the Redis broker, and the lease that keeps it single."""

import os
import subprocess
import sys
import threading
import time

import pytest
from celery import Celery
from django.conf import settings
from django.db import connection
from django.utils import timezone

from dream.lease import Holder, lease_acquire, lease_release
from dream.models import DreamRun, DreamRunStatus
from dream.pipeline import dream_run
from tests.conftest import service_required
from tests.dream.conftest import database_url
from tests.fakes.llm_server import slow_answer

# A Redis database of our own, and a queue named per test run, so no other worker takes the task.
BROKER_URL = "redis://127.0.0.1:6379/11"


def _redis_up() -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(BROKER_URL, socket_timeout=1).ping())
    except redis.RedisError:
        return False


@pytest.mark.redis
def test_it_runs_the_nightly_dream_in_a_real_celery_worker(
    transactional_db, global_scope, tmp_path
):
    if not _redis_up():
        service_required("redis", "the DREAM task must run in a real worker on the Redis broker")
    queue = f"dream-test-{os.getpid()}"
    env = {
        **os.environ,
        "TIDELINE_DATABASE_URL": database_url(),
        "CELERY_BROKER_URL": BROKER_URL,
        "TIDELINE_LLM_CONFIG_FILE": str(tmp_path / "no-llm.json"),
        "TIDELINE_EMBEDDER": "none",
        "TIDELINE_LOG_LEVEL": "WARNING",
    }
    worker = subprocess.Popen(
        [
            *(sys.executable, "-m", "celery", "-A", "tideline_site.celery", "worker"),
            *("--pool=solo", "--concurrency=1", "-Q", queue, "--without-heartbeat"),
            *("--without-gossip", "--without-mingle", "--loglevel=WARNING"),
        ],
        cwd=settings.BASE_DIR,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    # Not the current app: shared tasks elsewhere in this process must keep running eagerly.
    probe = Celery("probe", broker=BROKER_URL, set_as_current=False)
    try:
        day = timezone.localdate().isoformat()
        probe.send_task("dream.tasks.dream_daily", kwargs={"day": day}, queue=queue, expires=120)
        deadline = time.monotonic() + 90
        run = None
        while time.monotonic() < deadline:
            run = DreamRun.objects.filter(
                status__in=[DreamRunStatus.OK, DreamRunStatus.FAILED]
            ).first()
            if run is not None or worker.poll() is not None:
                break
            time.sleep(0.5)
        assert worker.poll() is None, worker.stderr.read().decode()[-2000:]
        assert run is not None, "the worker never finished a DREAM run"
        assert run.status == DreamRunStatus.OK, run.error
        assert run.trigger == "celery" and run.day.isoformat() == day
        assert run.stats["order"] == [*("scan", "script", "solidify", "combing", "drift", "dream")]
    finally:
        worker.terminate()
        worker.wait(timeout=20)
        with probe.connection_for_write() as broker:
            broker.default_channel.queue_delete(queue)


ELSEWHERE = Holder(token="another-beat", host="another-machine", pid=4242, process_started="")


def test_it_starts_nothing_while_another_run_holds_the_lease_and_records_why(db):
    assert lease_acquire(holder=ELSEWHERE, seconds=60)
    skipped = dream_run(layer="scan")
    assert skipped.status == DreamRunStatus.SKIPPED
    assert "another-machine pid 4242" in skipped.error and "last heartbeat" in skipped.error
    assert not DreamRun.objects.exclude(status=DreamRunStatus.SKIPPED).exists()
    lease_release(holder=ELSEWHERE)
    assert dream_run(layer="scan").status == DreamRunStatus.OK


def test_it_produces_one_run_from_two_concurrent_triggers(
    transactional_db, fake_llm, project_scope, write_narrative
):
    write_narrative(project_scope, "Something worth combing happened today")
    # The first run's LLM call takes a second, so the second trigger certainly overlaps it.
    fake_llm.script(slow_answer(1.0, {"rescore": []}), slow_answer(1.0, {"rescore": []}))
    results = []
    barrier = threading.Barrier(2)

    def trigger() -> None:
        barrier.wait()
        try:
            results.append(dream_run(layer="combing"))
        finally:
            connection.close()

    threads = [threading.Thread(target=trigger) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(result.status for result in results) == ["ok", "skipped"]
    assert DreamRun.objects.exclude(status=DreamRunStatus.SKIPPED).count() == 1
    assert len(fake_llm.requests) == 1


def test_it_marks_a_run_that_lost_its_lease_as_interrupted(db):
    stale = DreamRun.objects.create(layer="all", day=timezone.localdate())
    dream_run(layer="scan")
    stale.refresh_from_db()
    assert stale.status == DreamRunStatus.INTERRUPTED and stale.finished_at is not None
