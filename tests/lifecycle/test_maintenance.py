import shutil
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from memory.models import AuditEvent, FactKind, Memory, MemoryStatus
from memory.services.facts import FactInput, fact_write
from memory.services.lifecycle import memory_set_pinned
from memory.services.maintenance import lifecycle_maintain
from memory.services.narratives import NarrativeInput, narrative_write
from memory.services.scopes import scope_global, scope_resolve


def narrate(scope, gesture, **extra):
    return narrative_write(data=NarrativeInput(scope_id=scope.pk, gesture=gesture, **extra))


def run(*args) -> str:
    from io import StringIO

    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_it_expires_a_memory_whose_directory_is_gone_after_a_dry_run_changes_nothing(db, make_repo):
    repo = make_repo("archive-manager", "git@github.com:someone/archive-manager.git")
    project = scope_resolve(cwd=str(repo))
    doomed = narrate(
        project,
        "archive-manager keeps its archive index in a whale-listen table",
        depends_on=[f"path:{repo}"],
    )
    kept = narrate(scope_global(), "The user keeps whale-listen notes in Obsidian")
    context = run("context", "--query", "whale-listen", "--cwd", str(repo))
    assert f"#{doomed.pk} " in context and f"#{kept.pk} " in context

    shutil.rmtree(repo)
    rows, audits = Memory.objects.count(), AuditEvent.objects.count()
    statuses = dict(Memory.objects.values_list("pk", "status"))
    dry = run("maintain", "--dry-run")
    assert f"would expire: #{doomed.pk} " in dry and "scope-gone" in dry and str(repo) in dry
    assert "nothing written" in dry
    assert Memory.objects.count() == rows and AuditEvent.objects.count() == audits
    assert dict(Memory.objects.values_list("pk", "status")) == statuses

    out = run("maintain")
    assert f"expired: #{doomed.pk} " in out
    # The dry run listed exactly what the real run changed.
    planned = [line.removeprefix("would expire: ") for line in dry.splitlines()[:-1]]
    done = [line.removeprefix("expired: ") for line in out.splitlines()[:-1]]
    assert planned == done
    doomed.refresh_from_db()
    assert doomed.status == MemoryStatus.EXPIRED and doomed.expired_by == "scope-gone"
    event = AuditEvent.objects.get(action="expire", target_id=doomed.pk)
    assert event.actor == "system" and "no longer exists" in event.reason

    after = run("context", "--query", "whale-listen", "--cwd", "/")
    assert f"#{doomed.pk} " not in after and f"#{kept.pk} " in after
    again = run("maintain", "--dry-run")
    assert "would expire 0 memories" in again


def test_it_checks_dependencies_before_retrieval(db, make_repo):
    repo = make_repo("billing", "git@github.com:someone/billing.git")
    project = scope_resolve(cwd=str(repo))
    doomed = narrate(
        project, "billing keeps invoices in the heron-ledger", depends_on=[f"path:{repo}"]
    )
    marker = repo / "src"
    marker.mkdir()
    # The checkout stays (so the scope still resolves) but the dependency goes away.
    doomed_sub = narrate(
        project, "billing's heron-ledger lives under src", depends_on=[f"path:{marker}"]
    )
    marker.rmdir()
    out = run("context", "--query", "heron-ledger", "--cwd", str(repo))
    assert "expired 1 memory whose dependency is gone" in out
    assert f"#{doomed.pk} " in out and f"#{doomed_sub.pk} " not in out
    doomed_sub.refresh_from_db()
    assert doomed_sub.expired_by == "scope-gone"


def test_it_expires_a_memory_depending_on_a_memory_that_is_gone(global_scope):
    base = narrate(global_scope, "The user lives in Lisbon")
    child = narrate(
        global_scope, "The user's gym is near Lisbon's Rossio", depends_on=[f"memory:{base.pk}"]
    )
    fact_write(
        data=FactInput(
            scope_id=global_scope.pk,
            profile_name="用户",
            kind=FactKind.FACT,
            predicate="home_city",
            value="Lisbon",
        )
    )
    from memory.services.lifecycle import memory_expire

    memory_expire(memory_id=base.pk)
    report = lifecycle_maintain()
    assert [item.memory_id for item in report.planned] == [child.pk]
    assert "gone" in report.planned[0].reason


@pytest.mark.parametrize(
    ("importance", "days", "expires"),
    [
        (1, 8, True),
        (2, 6, False),
        (2, 8, True),
        (3, 8, False),
        (3, 15, True),
        (4, 29, False),
        (5, 29, False),
        (5, 31, True),
    ],
)
def test_it_decays_by_importance(global_scope, importance, days, expires):
    memory = narrate(global_scope, "The user went kayaking on the Tagus", importance=importance)
    report = lifecycle_maintain(now=timezone.now() + timedelta(days=days))
    memory.refresh_from_db()
    assert (memory.status == MemoryStatus.EXPIRED) is expires
    if expires:
        assert memory.expired_by == "decay"
        assert report.planned[0].expired_by == "decay"


def test_it_never_decays_a_pinned_memory(global_scope):
    memory = narrate(global_scope, "The user's first boat was called Tide", importance=1)
    memory_set_pinned(memory_id=memory.pk, pinned=True)
    lifecycle_maintain(now=timezone.now() + timedelta(days=365))
    memory.refresh_from_db()
    assert memory.status == MemoryStatus.ACTIVE


def test_it_counts_decay_from_the_last_activation(global_scope):
    memory = narrate(global_scope, "The user went kayaking on the Tagus", importance=3)
    Memory.objects.filter(pk=memory.pk).update(last_activated=timezone.now() + timedelta(days=10))
    lifecycle_maintain(now=timezone.now() + timedelta(days=15))
    memory.refresh_from_db()
    assert memory.status == MemoryStatus.ACTIVE


def test_it_reads_decay_thresholds_from_settings(global_scope, settings):
    settings.TIDELINE_DECAY_DAYS_MID = 40
    memory = narrate(global_scope, "The user went kayaking on the Tagus", importance=3)
    lifecycle_maintain(now=timezone.now() + timedelta(days=15))
    memory.refresh_from_db()
    assert memory.status == MemoryStatus.ACTIVE


def fact(scope, kind, predicate, value, profile="archive-manager"):
    return fact_write(
        data=FactInput(
            scope_id=scope.pk,
            profile_name=profile,
            profile_kind="project" if profile != "用户" else "user",
            kind=kind,
            predicate=predicate,
            value=value,
            importance=5,
        )
    )


def test_it_applies_ttl_by_kind_and_never_to_preferences(project_scope, global_scope):
    episode = fact(project_scope, FactKind.EPISODE, "last_release", "v2.1 shipped")
    project_fact = fact(project_scope, FactKind.FACT, "storage", "SQLite")
    preference = fact(global_scope, FactKind.PREFERENCE, "responds_in", "简体中文", profile="用户")
    reflection = fact(
        global_scope, FactKind.REFLECTION, "learned", "ask before refactoring", "用户"
    )
    for row in (episode, project_fact, preference, reflection):
        # Keep decay out of it: every row was just recalled.
        Memory.objects.filter(pk=row.pk).update(last_activated=timezone.now() + timedelta(days=400))

    lifecycle_maintain(now=timezone.now() + timedelta(days=89))
    assert Memory.objects.filter(status=MemoryStatus.EXPIRED).count() == 0
    lifecycle_maintain(now=timezone.now() + timedelta(days=91))
    episode.refresh_from_db()
    assert episode.status == MemoryStatus.EXPIRED and episode.expired_by == "ttl"
    lifecycle_maintain(now=timezone.now() + timedelta(days=181))
    project_fact.refresh_from_db()
    assert project_fact.expired_by == "ttl"
    lifecycle_maintain(now=timezone.now() + timedelta(days=3650))
    preference.refresh_from_db()
    reflection.refresh_from_db()
    assert preference.status == reflection.status == MemoryStatus.ACTIVE


def test_it_restarts_a_facts_ttl_when_it_is_restated(project_scope):
    first = fact(project_scope, FactKind.FACT, "storage", "SQLite")
    expires = first.expires_at
    again = fact(project_scope, FactKind.FACT, "storage", "sqlite")
    assert again.pk == first.pk
    first.refresh_from_db()
    assert first.expires_at > expires


def test_it_keeps_a_strongly_felt_narrative_longer_than_a_neutral_one(global_scope):
    neutral = narrate(global_scope, "The user repainted the spare room grey", importance=3)
    felt = narrate(
        global_scope,
        "The user's daughter took her first steps in the spare room",
        importance=3,
        emotion_intensity=9,
        valence=0.9,
    )
    # Twenty days pass without activation: past importance 3's 14-day limit, inside the felt
    # narrative's 14 × (1 + 9/10) = 26.6 days.
    Memory.objects.filter(pk__in=[neutral.pk, felt.pk]).update(
        recorded_at=timezone.now() - timedelta(days=20)
    )

    planned = run("maintain", "--dry-run")
    assert f"#{neutral.pk} " in planned and f"#{felt.pk} " not in planned
    run("maintain")
    neutral.refresh_from_db()
    felt.refresh_from_db()
    assert (neutral.status, neutral.expired_by) == (MemoryStatus.EXPIRED, "decay")
    assert felt.status == MemoryStatus.ACTIVE

    Memory.objects.filter(pk=felt.pk).update(recorded_at=timezone.now() - timedelta(days=27))
    assert f"#{felt.pk} " in run("maintain", "--dry-run")
    assert "emotion intensity 9: 26.6-day limit" in run("maintain")
    felt.refresh_from_db()
    assert felt.status == MemoryStatus.EXPIRED


def test_it_decays_by_the_plain_rule_when_the_emotion_factor_is_off(global_scope, settings):
    settings.TIDELINE_EMOTION_DECAY_FACTOR = 0.0
    felt = narrate(global_scope, "The user's first marathon", importance=3, emotion_intensity=10)
    lifecycle_maintain(now=timezone.now() + timedelta(days=15))
    felt.refresh_from_db()
    assert felt.status == MemoryStatus.EXPIRED


def test_it_expires_a_stored_dependency_that_names_no_row_instead_of_failing(global_scope):
    # Written before dependencies were checked against the store: an id past any row's, and
    # non-ASCII digits. Maintenance must go on for every other memory.
    past_any_row = narrate(global_scope, "The user's bike is a grey Brompton")
    odd_digits = narrate(global_scope, "The user rides to work on Tuesdays")
    holding = narrate(global_scope, "The user's commute is eleven kilometres")
    Memory.objects.filter(pk=past_any_row.pk).update(depends_on=["memory:" + "9" * 25])
    Memory.objects.filter(pk=odd_digits.pk).update(depends_on=["memory:²"])
    Memory.objects.filter(pk=holding.pk).update(depends_on=[f"memory:{odd_digits.pk}"])

    report = lifecycle_maintain()

    assert sorted(item.memory_id for item in report.planned) == [past_any_row.pk, odd_digits.pk]
    assert all("gone" in item.reason for item in report.planned)
