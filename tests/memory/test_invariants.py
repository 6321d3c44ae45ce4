"""The invariants the database itself holds (one current row per key, one live successor per edit
chain, one turn per runtime turn id), what the services answer when a target is no longer current,
and the migration that brings an existing store under them."""

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from memory.models import (
    AuditEvent,
    ContextTurn,
    Fact,
    Memory,
    MemoryStatus,
    Narrative,
    SelfConcept,
    Session,
)
from memory.services.edits import memory_update
from memory.services.errors import Conflict
from memory.services.facts import FactInput, fact_write
from memory.services.lifecycle import memory_expire, memory_restore
from memory.services.narratives import NarrativeInput, narrative_write
from memory.services.races import RACE_ATTEMPTS, atomic_retrying
from memory.services.self_concept import self_concept_write
from memory.services.timeline import TurnInput, session_start, turn_record, turns_record


def _fact(scope, predicate: str, value: str, **fields) -> Fact:
    return fact_write(
        data=FactInput(
            scope_id=scope.pk,
            profile_name="user",
            kind="preference",
            predicate=predicate,
            value=value,
            **fields,
        )
    )


def _raw_copy(fact: Fact, *, status: str) -> Fact:
    return Fact(
        scope=fact.scope,
        profile=fact.profile,
        kind=fact.kind,
        predicate=fact.predicate,
        value=f"{fact.value} (raw)",
        summary="raw row",
        status=status,
    )


def test_it_refuses_a_second_active_row_for_one_fact_key(project_scope):
    fact = _fact(project_scope, "editor", "vim")

    with pytest.raises(IntegrityError), transaction.atomic():
        _raw_copy(fact, status=MemoryStatus.ACTIVE).save()

    assert fact.stable_key == f"fact:{project_scope.pk}:{fact.profile_id}:editor"
    assert Fact.objects.filter(predicate="editor", status=MemoryStatus.ACTIVE).count() == 1


def test_it_keeps_any_number_of_rows_per_key_that_are_not_current(project_scope):
    fact = _fact(project_scope, "editor", "vim")

    for status in (MemoryStatus.CANDIDATE, MemoryStatus.REJECTED, MemoryStatus.SUPERSEDED) * 2:
        _raw_copy(fact, status=status).save()

    assert Fact.objects.filter(predicate="editor").count() == 7


def test_it_refuses_a_second_active_self_concept_for_one_field(global_scope):
    current = self_concept_write(field="terrain", content="I work in small steps")

    with pytest.raises(IntegrityError), transaction.atomic():
        SelfConcept(scope=global_scope, field="terrain", content="raw", summary="raw").save()

    assert current.stable_key == "self_concept:terrain"


def test_it_refuses_a_second_live_successor_of_one_row(project_scope):
    original = narrative_write(
        data=NarrativeInput(gesture="first wording", scope_id=project_scope.pk)
    )
    edit = memory_update(memory=original, changes={"gesture": "second wording"}, actor="agent")

    with pytest.raises(IntegrityError), transaction.atomic():
        Narrative(
            scope=project_scope, gesture="a fork", summary="a fork", supersedes=original
        ).save()

    assert edit.supersedes_id == original.pk and edit.stable_key is None


def test_it_refuses_one_turn_id_twice_in_one_session(project_scope):
    session = session_start(runtime="cli", external_id="s1", scope_id=project_scope.pk)
    other = session_start(runtime="cli", external_id="s2", scope_id=project_scope.pk)
    turns_record(
        session_id=session.pk,
        turns=[
            TurnInput(role="user", content="hello", meta={"external_id": "t1"}),
            TurnInput(role="user", content="no id"),
            TurnInput(role="user", content="no id either"),
        ],
    )
    turn_record(
        session_id=other.pk,
        turn=TurnInput(role="user", content="hello", meta={"external_id": "t1"}),
    )

    with pytest.raises(IntegrityError), transaction.atomic():
        ContextTurn.objects.create(
            session=session, scope=project_scope, seq=99, role="user", content="x", external_id="t1"
        )

    assert ContextTurn.objects.filter(external_id="t1").count() == 2
    assert ContextTurn.objects.filter(session=session, external_id__isnull=True).count() == 2


def test_it_skips_a_turn_the_session_already_holds_under_its_id(project_scope):
    session = session_start(runtime="cli", external_id="s1", scope_id=project_scope.pk)
    turn = TurnInput(role="user", content="hello", meta={"external_id": "t1"})
    first = turn_record(session_id=session.pk, turn=turn)

    again = turn_record(session_id=session.pk, turn=turn)
    batch = turns_record(session_id=session.pk, turns=[turn, turn])

    assert again.pk == first.pk and batch == []
    assert session.turns.count() == 1


def test_it_refuses_to_expire_a_superseded_memory_naming_its_successor(project_scope):
    old = _fact(project_scope, "editor", "vim")
    new = _fact(project_scope, "editor", "neovim")

    with pytest.raises(Conflict, match=f"already superseded by #{new.pk}"):
        memory_expire(memory_id=old.pk)

    assert Memory.objects.get(pk=old.pk).status == MemoryStatus.SUPERSEDED


def test_it_refuses_to_expire_an_expired_memory_naming_how_it_ended(project_scope):
    fact = _fact(project_scope, "editor", "vim")
    memory_expire(memory_id=fact.pk, expired_by="ttl")
    audit_rows = AuditEvent.objects.count()

    with pytest.raises(Conflict, match=r"already expired \(ttl\)"):
        memory_expire(memory_id=fact.pk)

    assert AuditEvent.objects.count() == audit_rows


@pytest.mark.parametrize("kind", ["narrative", "fact", "self_concept"])
def test_it_refuses_an_edit_of_a_version_that_is_no_longer_current(project_scope, kind):
    if kind == "narrative":
        old = narrative_write(data=NarrativeInput(gesture="one", scope_id=project_scope.pk))
        changes = {"gesture": "three"}
        memory_update(memory=old, changes={"gesture": "two"}, actor="agent")
    elif kind == "fact":
        old = _fact(project_scope, "editor", "vim")
        changes = {"value": "emacs"}
        _fact(project_scope, "editor", "neovim")
    else:
        old = self_concept_write(field="terrain", content="one")
        changes = {"content": "three"}
        self_concept_write(field="terrain", content="two")
    stale = Memory.objects.get(pk=old.pk)
    rows = Memory.objects.count()

    with pytest.raises(Conflict, match=f"#{old.pk} is superseded"):
        memory_update(memory=stale, changes=changes, actor="agent")

    assert Memory.objects.count() == rows


def test_it_refuses_a_fact_edit_whose_target_was_replaced_after_it_was_read(project_scope):
    old = _fact(project_scope, "editor", "vim")
    newer = _fact(project_scope, "editor", "neovim")

    with pytest.raises(Conflict, match=f"the current value is #{newer.pk}"):
        fact_write(
            data=FactInput(
                scope_id=project_scope.pk,
                profile_name="user",
                kind="preference",
                predicate="editor",
                value="emacs",
                supersedes_id=old.pk,
            )
        )

    assert Fact.objects.get(predicate="editor", status=MemoryStatus.ACTIVE).pk == newer.pk


def test_it_refuses_an_edit_without_naming_a_secret_successor(project_scope):
    """The editor read the old plain row; the value that replaced it is secret, so the refusal
    names neither its id nor its value."""
    old = _fact(project_scope, "door_code", "1234")
    newer = _fact(project_scope, "door_code", "4821", secret=True)
    stale = Memory.objects.get(pk=old.pk)
    with pytest.raises(Conflict) as refused:
        memory_update(memory=stale, changes={"value": "5555"}, actor="agent")
    with pytest.raises(Conflict) as lost:
        _fact(project_scope, "door_code", "5555", supersedes_id=old.pk)
    for message in (str(refused.value), str(lost.value)):
        assert f"#{old.pk}" in message
        assert f"#{newer.pk}" not in message and "4821" not in message


def test_it_refuses_to_restore_a_fact_whose_key_has_a_newer_value(project_scope):
    old = _fact(project_scope, "editor", "vim")
    memory_expire(memory_id=old.pk)
    newer = _fact(project_scope, "editor", "neovim")

    with pytest.raises(Conflict, match=f"#{newer.pk} is the current value"):
        memory_restore(memory_id=old.pk)

    assert Memory.objects.get(pk=old.pk).status == MemoryStatus.EXPIRED


BEFORE = [("memory", "0007_stable_key_turn_external_id")]


def test_it_resolves_what_an_old_store_holds_twice_when_it_migrates(transactional_db):
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    apps = executor.loader.project_state(BEFORE).apps
    Scope = apps.get_model("memory", "Scope")
    Profile = apps.get_model("memory", "Profile")
    OldFact = apps.get_model("memory", "Fact")
    OldNarrative = apps.get_model("memory", "Narrative")
    OldSession = apps.get_model("memory", "Session")
    OldTurn = apps.get_model("memory", "ContextTurn")
    scope = Scope.objects.create(kind="project", key="/old/store", label="old")
    profile = Profile.objects.create(scope=scope, kind="user", name="user")
    facts = [
        OldFact.objects.create(
            memory_type="fact",
            scope=scope,
            profile=profile,
            kind="preference",
            predicate="editor",
            value=value,
            summary=value,
            status="active",
        )
        for value in ("vim", "neovim", "emacs")
    ]
    original = OldNarrative.objects.create(
        memory_type="narrative", scope=scope, gesture="one", summary="one", status="superseded"
    )
    forks = [
        OldNarrative.objects.create(
            memory_type="narrative",
            scope=scope,
            gesture=gesture,
            summary=gesture,
            status="active",
            supersedes=original,
        )
        for gesture in ("two", "two, again")
    ]
    OldSelfConcept = apps.get_model("memory", "SelfConcept")
    versions = [
        OldSelfConcept.objects.create(
            memory_type="self_concept",
            scope=scope,
            field="terrain",
            content=content,
            summary=content,
            status="active",
        )
        for content in ("careful", "bold")
    ]
    session = OldSession.objects.create(runtime="cli", external_id="s", scope=scope)
    for seq in (1, 2):
        OldTurn.objects.create(
            session=session,
            scope=scope,
            seq=seq,
            role="user",
            content="hi",
            meta={"external_id": "t1"},
        )

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    rows = {f.pk: f for f in Fact.objects.filter(predicate="editor")}
    newest = facts[-1].pk
    assert [pk for pk, f in rows.items() if f.status == MemoryStatus.ACTIVE] == [newest]
    assert {f.superseded_by_id for pk, f in rows.items() if pk != newest} == {newest}
    assert {f.stable_key for f in rows.values()} == {f"fact:{scope.pk}:{profile.pk}:editor"}
    assert Narrative.objects.get(pk=forks[0].pk).status == MemoryStatus.SUPERSEDED
    assert Narrative.objects.get(pk=forks[1].pk).status == MemoryStatus.ACTIVE
    audited = AuditEvent.objects.filter(actor="system", action="invalidate")
    assert sorted(audited.values_list("target_id", flat=True)) == sorted(
        [facts[0].pk, facts[1].pk, forks[0].pk, versions[0].pk]
    )
    current = SelfConcept.objects.get(field="terrain", status=MemoryStatus.ACTIVE)
    assert (current.pk, current.stable_key) == (versions[1].pk, "self_concept:terrain")
    turns = ContextTurn.objects.filter(session_id=session.pk).order_by("seq")
    assert list(turns.values_list("external_id", flat=True)) == ["t1", None]
    assert Session.objects.filter(pk=session.pk).exists()


def _lose_race_once(fact: Fact, attempts: list[int]):
    """An operation that, on its first run only, trips the one-current-row-per-key index the way a
    concurrent first writer would."""

    def operation() -> int:
        attempts.append(len(attempts) + 1)
        if len(attempts) == 1:
            _raw_copy(fact, status=MemoryStatus.ACTIVE).save()
        return len(attempts)

    return operation


def test_it_runs_a_write_again_when_it_lost_a_race_to_the_key(project_scope):
    fact = _fact(project_scope, "editor", "vim")
    attempts: list[int] = []

    answer = atomic_retrying(
        _lose_race_once(fact, attempts),
        model=Memory,
        constraints=("memory_one_active_per_key",),
        lost="lost",
    )

    assert (answer, attempts) == (2, [1, 2])
    assert Fact.objects.filter(predicate="editor").count() == 1


def test_it_answers_conflict_after_losing_every_attempt(project_scope):
    fact = _fact(project_scope, "editor", "vim")
    attempts: list[int] = []

    def always_loses() -> None:
        attempts.append(1)
        _raw_copy(fact, status=MemoryStatus.ACTIVE).save()

    with pytest.raises(Conflict, match="editor kept changing"):
        atomic_retrying(
            always_loses,
            model=Memory,
            constraints=("memory_one_active_per_key",),
            lost="editor kept changing",
        )

    assert len(attempts) == RACE_ATTEMPTS


def test_it_lets_other_integrity_errors_through(project_scope):
    fact = _fact(project_scope, "editor", "vim")
    attempts: list[int] = []

    with pytest.raises(IntegrityError):
        atomic_retrying(
            _lose_race_once(fact, attempts),
            model=Memory,
            constraints=("memory_one_live_successor",),
            lost="lost",
        )

    assert attempts == [1]


def test_it_ends_a_segment_whose_id_an_older_row_holds_elsewhere_with_a_conflict(
    project_scope, global_scope
):
    # A row stored before segment ids were reserved: the segment id of "s1" in this project, held
    # by a session of another scope. Before, opening "s1" here segmented without end.
    session_start(runtime="cli", external_id="s1", scope_id=global_scope.pk)
    Session.objects.create(
        runtime="cli",
        external_id=f"s1@scope-{project_scope.pk}",
        scope=global_scope,
        started_at=timezone.now(),
    )

    with pytest.raises(Conflict, match="taken"):
        session_start(runtime="cli", external_id="s1", scope_id=project_scope.pk)
