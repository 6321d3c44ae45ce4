import json
import re

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError

from dream.models import DreamRun, DreamRunStatus
from dream.tasks import clusters_rebuild, dream_daily, maintain
from memory.models import Memory, MemoryStatus
from tideline_site.settings import _beat


def test_it_runs_dream_from_the_command_with_progress(global_scope, write_narrative, capsys):
    write_narrative(global_scope, "Something happened today")
    call_command("dream")
    out = capsys.readouterr().out
    run = DreamRun.objects.get()
    # Each layer is announced before it runs, then reported with what it read and its time.
    assert out.index("[1/6] scan …") < out.index("[2/6] script …") < out.index("[6/6] dream …")
    assert re.search(r"scan +ok +\d+\.\d s  track a \d+ · track b", out), out
    assert "no LLM configured" in out
    assert f"run #{run.pk}: ok in " in out and ", 0 tokens" in out
    assert "wrote no new memories" in out
    assert "layers: ok scan, script; skipped solidify, combing, drift, dream" in out

    call_command("dream", "--layer", "script", "--dry-run", "--json")
    plan = json.loads(capsys.readouterr().out)
    assert plan["dry_run"] is True and plan["layers"] == ["script"]
    assert DreamRun.objects.count() == 1


@pytest.mark.parametrize(
    "args", [["--since", "yesterday-ish"], ["--day", "2026-13-45"], ["--layer", "nap"]]
)
def test_it_turns_bad_arguments_into_command_errors(db, args):
    with pytest.raises(CommandError):
        call_command("dream", *args)
    assert DreamRun.objects.count() == 0


def test_it_runs_the_tasks_in_process_when_no_broker_is_configured(db):
    assert settings.CELERY_TASK_ALWAYS_EAGER
    run_id = dream_daily.delay().get()
    assert DreamRun.objects.get(pk=run_id).trigger == "celery"
    rebuilt = DreamRun.objects.get(pk=clusters_rebuild.delay().get())
    assert rebuilt.layer == "script" and rebuilt.status == DreamRunStatus.OK


def test_it_runs_hourly_maintenance_through_the_store_service(global_scope, write_narrative):
    narrative = write_narrative(global_scope, "A memory that depends on a vanished directory")
    Memory.objects.filter(pk=narrative.pk).update(depends_on=["path:/nonexistent/tideline-dir"])
    assert maintain.delay().get()["expired"] == 1
    narrative.refresh_from_db()
    assert narrative.status == MemoryStatus.EXPIRED and narrative.expired_by == "scope-gone"


def test_it_has_one_beat_table_with_expiring_entries():
    schedule = settings.CELERY_BEAT_SCHEDULE
    assert set(schedule) == {
        "dream-daily",
        "maintain-hourly",
        "clusters-rebuild",
        "embeddings-sweep",
        "inbox-flush",
        "search-queue-drain",
    }
    assert {entry["task"] for entry in schedule.values()} == {
        "dream.tasks.dream_daily",
        "dream.tasks.maintain",
        "dream.tasks.clusters_rebuild",
        "memory.tasks.embeddings_sweep",
        "memory.tasks.inbox_flush_pending",
        "memory.tasks.search_queue_drain",
    }
    assert all(entry["options"]["expires"] > 0 for entry in schedule.values())


def test_it_lets_env_override_a_beat_entry_and_refuses_a_bad_crontab(monkeypatch):
    monkeypatch.setenv("TIDELINE_BEAT_TEST", "5 4 * * 1")
    monkeypatch.setenv("TIDELINE_BEAT_TEST_EXPIRES", "600")
    entry = _beat(
        "dream.tasks.dream_daily",
        "TIDELINE_BEAT_TEST",
        "0 3 * * *",
        "TIDELINE_BEAT_TEST_EXPIRES",
        60,
    )
    assert entry["schedule"].hour == {4} and entry["schedule"].minute == {5}
    assert entry["schedule"].day_of_week == {1}
    assert entry["options"] == {"expires": 600}
    monkeypatch.setenv("TIDELINE_BEAT_TEST", "61 * * * *")
    with pytest.raises(ImproperlyConfigured, match="TIDELINE_BEAT_TEST"):
        _beat("dream.tasks.dream_daily", "TIDELINE_BEAT_TEST", "0 3 * * *", "X_EXPIRES", 60)


def test_it_records_and_logs_why_the_celery_task_did_nothing_while_the_lease_is_held(db, caplog):
    from dream.lease import Holder, lease_acquire

    elsewhere = Holder(token="beat-2", host="another-machine", pid=77, process_started="")
    assert lease_acquire(holder=elsewhere, seconds=600)
    with caplog.at_level("WARNING", logger="tideline.dream"):
        run_id = dream_daily.delay().get()
    run = DreamRun.objects.get(pk=run_id)
    assert run.status == DreamRunStatus.SKIPPED and run.trigger == "celery"
    assert "another-machine pid 77" in run.error
    assert any("did nothing" in record.getMessage() for record in caplog.records)
    with pytest.raises(CommandError, match="another-machine pid 77"):
        call_command("dream")
