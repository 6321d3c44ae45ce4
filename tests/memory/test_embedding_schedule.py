"""Embedding after commit: a broker outage never fails a write, and what it left pending is embedded
once a worker is back, without a manual `reembed`."""

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from celery import Celery
from django.conf import settings

from injection.services.access import apikey_create
from memory.models import ContextTurn, EmbeddingStatus, Memory, ScopeKind
from memory.services.embedding import _BrokerBackoff, embeddings_pending_drain, task_enqueue
from memory.services.narratives import NarrativeInput, narrative_write
from memory.services.scopes import scope_ensure
from memory.services.timeline import TurnInput, session_start, turns_record
from tests.conftest import database_url, service_required


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            assert process.poll() is None, (
                f"{what} exited: {process.stderr.read().decode()[-2000:]}"
            )
            time.sleep(0.2)
    raise AssertionError(f"{what} did not listen on {port} within {seconds} s")


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _post(port: int, key: str, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        return reply.status, json.loads(reply.read())


def test_it_sweeps_pending_and_failed_rows_and_leaves_young_ones_to_their_task(global_scope):
    # In a plain db test no on_commit callback runs: rows stay pending, as after a lost enqueue.
    pending = narrative_write(
        data=NarrativeInput(scope_id=global_scope.pk, gesture="the harbour crane was repaired")
    )
    failed = narrative_write(
        data=NarrativeInput(scope_id=global_scope.pk, gesture="the lighthouse lamp was replaced")
    )
    Memory.objects.filter(pk=failed.pk).update(embedding_status=EmbeddingStatus.FAILED)
    session = session_start(runtime="test", external_id="sweep", scope_id=global_scope.pk)
    turns = turns_record(
        session_id=session.pk, turns=[TurnInput(role="user", content="did the crane get fixed?")]
    )

    assert embeddings_pending_drain(grace_seconds=3600) == {"memories": 0, "turns": 0}
    assert embeddings_pending_drain(grace_seconds=0) == {"memories": 2, "turns": 1}
    assert set(
        Memory.objects.filter(pk__in=[pending.pk, failed.pk]).values_list(
            "embedding_status", flat=True
        )
    ) == {EmbeddingStatus.READY}
    assert ContextTurn.objects.get(pk=turns[0].pk).embedding_status == EmbeddingStatus.READY
    assert embeddings_pending_drain(grace_seconds=0) == {"memories": 0, "turns": 0}


def test_it_stops_a_sweep_at_the_first_batch_a_dead_provider_fails(global_scope, settings):
    written = [
        narrative_write(
            data=NarrativeInput(scope_id=global_scope.pk, gesture=f"buoy {n} drifted north")
        ).pk
        for n in range(3)
    ]
    settings.TIDELINE_EMBEDDER = "embed_batch"
    settings.TIDELINE_EMBEDDER_URL = f"http://127.0.0.1:{_free_port()}/embed"
    settings.TIDELINE_EMBEDDER_RETRIES = 0
    settings.TIDELINE_EMBEDDER_BATCH = 1

    assert embeddings_pending_drain(grace_seconds=0) == {"memories": 0, "turns": 0}

    statuses = dict(Memory.objects.filter(pk__in=written).values_list("pk", "embedding_status"))
    assert [statuses[pk] for pk in written] == [
        EmbeddingStatus.FAILED,
        EmbeddingStatus.PENDING,
        EmbeddingStatus.PENDING,
    ]


def test_it_logs_a_refused_enqueue_without_the_broker_password_then_leaves_the_broker_alone(
    caplog, settings, monkeypatch
):
    monkeypatch.setattr(_BrokerBackoff, "retry_at", 0.0)
    settings.TIDELINE_BROKER_BACKOFF_SECONDS = 30
    dead = Celery(
        "dead-broker",
        broker=f"redis://:hunter2-secret@127.0.0.1:{_free_port()}/0",
        set_as_current=False,
    )
    dead.conf.task_publish_retry_policy = settings.CELERY_TASK_PUBLISH_RETRY_POLICY

    @dead.task(name="outage-probe.embed")
    def embed_memories(memory_ids: list[int]) -> int:
        return len(memory_ids)

    with caplog.at_level(logging.WARNING, logger="tideline.embedding"):
        task_enqueue(embed_memories, [1, 2])
        began = time.monotonic()
        task_enqueue(embed_memories, [3])
        skipped_in = time.monotonic() - began

    assert caplog.text.count("stay pending for the sweep") == 1
    assert "hunter2" not in caplog.text
    assert _BrokerBackoff.retry_at > time.monotonic() + 25
    assert skipped_in < 0.05  # the second write never touched the broker


def test_it_runs_the_sweep_every_minute_from_the_one_beat_table():
    from tideline_site.celery import app

    entry = settings.CELERY_BEAT_SCHEDULE["embeddings-sweep"]
    app.loader.import_default_modules()
    assert entry["task"] in app.tasks
    assert entry["schedule"].minute == set(range(60))  # "* * * * *": every minute
    assert Path(app.conf.beat_schedule_filename).parent == settings.DATA_DIR


@pytest.mark.redis
def test_it_answers_every_write_while_the_broker_is_down_and_a_worker_embeds_them_later(
    transactional_db, tmp_path
):
    if shutil.which("redis-server") is None:
        service_required("redis-server", "the outage test starts and stops its own Redis")
    project_dir = tmp_path / "harbour"
    project_dir.mkdir()
    scope = scope_ensure(kind=ScopeKind.PROJECT, key=str(project_dir))
    _, key = apikey_create(name="outage", scope_ids=[scope.pk])
    broker_port, web_port = _free_port(), _free_port()
    env = {
        **os.environ,
        "TIDELINE_DATABASE_URL": database_url(),
        "TIDELINE_DATA_DIR": str(tmp_path / "data"),
        "CELERY_BROKER_URL": f"redis://127.0.0.1:{broker_port}/0",
        "TIDELINE_EMBEDDER": "bundled",
        "TIDELINE_WARM_ON_START": "0",
        "TIDELINE_LOG_LEVEL": "WARNING",
    }
    web = subprocess.Popen(
        [
            *(sys.executable, "-m", "uvicorn", "tideline_site.asgi:application"),
            *("--host", "127.0.0.1", "--port", str(web_port), "--log-level", "warning"),
        ],
        cwd=settings.BASE_DIR,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    started: list[subprocess.Popen] = [web]
    try:
        _wait_for_port(web_port, web, "the web server")
        where = {"cwd": str(project_dir)}
        answers = [
            _post(web_port, key, "/api/v1/facts", where | {
                "profile_name": "user", "kind": "preference", "predicate": "editor",
                "value": "helix",
            }),
            _post(web_port, key, "/api/v1/narratives", where | {
                "gesture": "The harbour crane failed twice during the night shift",
                "tags": ["harbour"],
            }),
            _post(web_port, key, "/api/v1/turns", where | {
                "session_id": "outage", "turns": [
                    {"role": "user", "content": "the crane is down again", "turn_id": "t1"},
                    {"role": "assistant", "content": "I will log it", "turn_id": "t2"},
                ],
            }),
        ]  # fmt: skip
        assert [status for status, _ in answers] == [200, 200, 200]
        memory_ids = [answers[0][1]["id"], answers[1][1]["id"]]
        turns = ContextTurn.objects.filter(session__external_id="outage")
        assert turns.count() == 2

        def statuses() -> set[str]:
            memories = Memory.objects.filter(pk__in=memory_ids)
            return set(memories.values_list("embedding_status", flat=True)) | set(
                turns.values_list("embedding_status", flat=True)
            )

        assert statuses() == {EmbeddingStatus.PENDING}

        redis = subprocess.Popen(
            [
                *("redis-server", "--port", str(broker_port), "--bind", "127.0.0.1"),
                *("--save", "", "--appendonly", "no", "--daemonize", "no"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        started.append(redis)
        _wait_for_port(broker_port, redis, "redis-server")
        # The README's commands, as written (the venv's celery), with no manual reembed.
        celery = [sys.executable, "-m", "celery", "-A", "tideline_site.celery"]
        worker = subprocess.Popen(
            [*celery, "worker", "--pool", "solo", "-l", "warning"],
            cwd=settings.BASE_DIR,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        beat = subprocess.Popen(
            [*celery, "beat", "-l", "warning"],
            cwd=tmp_path,
            env=env | {"PYTHONPATH": str(settings.BASE_DIR)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        started += [worker, beat]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if statuses() == {EmbeddingStatus.READY} or worker.poll() is not None:
                break
            time.sleep(0.5)
        assert worker.poll() is None, worker.stderr.read().decode()[-2000:]
        assert statuses() == {EmbeddingStatus.READY}
        assert beat.poll() is None, beat.stderr.read().decode()[-2000:]
        assert list((tmp_path / "data").glob("celerybeat-schedule*"))
        assert not list(tmp_path.glob("celerybeat-schedule*"))
    finally:
        for process in reversed(started):
            _stop(process)


def test_it_runs_tasks_in_process_without_warning_of_a_broker(tmp_path):
    """Before, with no broker configured, every command that queued a task printed kombu's
    "No hostname was supplied. Reverting to default 'localhost'": an eager task still takes a
    producer, which fell back to AMQP on localhost."""
    env = {key: value for key, value in os.environ.items() if key != "CELERY_BROKER_URL"}
    env["TIDELINE_DATA_DIR"] = str(tmp_path / "data")
    queue = (
        "from memory import tasks; from memory.services.embedding import task_enqueue; "
        "task_enqueue(tasks.embeddings_sweep, countdown=20); print('queued')"
    )
    finished = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", queue],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "queued" in finished.stdout, finished.stderr
    assert "No hostname was supplied" not in finished.stderr
