"""A memory never ends before it begins (valid_to IS NULL OR valid_to >= valid_from): the database
refuses a write that would break it (migration 0027), the service paths that end a memory still
work under it, and the table rebuild SQLite made to add it kept every trigger on the table."""

import importlib
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.utils import timezone

from memory.models import Actor, AuditEvent, Fact, FactKind, Memory
from memory.search import memory_search
from memory.services.edits import memory_update
from memory.services.facts import FactInput, fact_write
from memory.services.lifecycle import memory_expire
from memory.services.maintenance import lifecycle_maintain
from tests.memory.conftest import archive_fact, narrate

IN_BERLIN = datetime(2019, 1, 1, tzinfo=UTC)
IN_LISBON = datetime(2023, 3, 1, tzinfo=UTC)
IN_PORTO = datetime(2024, 6, 1, tzinfo=UTC)
MIGRATION = "memory.migrations.0027_memory_valid_interval_check"


def lives_in(scope, value, **extra):
    return fact_write(
        data=FactInput(
            scope_id=scope.pk,
            profile_name="user",
            kind=FactKind.FACT,
            predicate="lives_in",
            value=value,
            **extra,
        )
    )


def stored_ahead(fact, ahead):
    """A fact dated ahead, as releases before future-dated facts were refused stored it."""
    Fact.objects.filter(pk=fact.pk).update(valid_from=ahead, expires_at=None)
    fact.refresh_from_db()
    return fact


def raw(sql, params):
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)


@contextmanager
def check_lifted():
    """Let a row end before it begins, as releases before migration 0027 could store one; the
    constraint is back (and, on PostgreSQL, checked against every row) on the way out."""
    constraint = next(c for c in Memory._meta.constraints if c.name == "memory_valid_interval")
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA ignore_check_constraints = ON")
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA ignore_check_constraints = OFF")
        return
    with connection.cursor() as cursor:
        # PostgreSQL alters no table with deferred foreign key checks pending on it.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    with connection.schema_editor() as editor:
        editor.remove_constraint(Memory, constraint)
    yield
    with connection.schema_editor() as editor:
        editor.add_constraint(Memory, constraint)


def test_it_refuses_a_raw_update_that_ends_a_memory_before_it_begins(global_scope):
    lisbon = lives_in(global_scope, "Lisbon", valid_from=IN_LISBON)

    with pytest.raises(IntegrityError):
        raw("UPDATE memory_memory SET valid_to = %s WHERE id = %s", [IN_BERLIN, lisbon.pk])

    lisbon.refresh_from_db()
    assert lisbon.valid_to is None


def test_it_refuses_a_raw_insert_that_ends_a_memory_before_it_begins(global_scope):
    lisbon = lives_in(global_scope, "Lisbon", valid_from=IN_LISBON)
    # A copy of a stored row (without its key, which only one row may hold), given an interval.
    copied = ", ".join(
        field.column
        for field in Memory._meta.concrete_fields
        if field.name not in ("id", "stable_key", "valid_from", "valid_to")
    )
    insert = (
        f"INSERT INTO memory_memory ({copied}, valid_from, valid_to) "
        f"SELECT {copied}, %s, %s FROM memory_memory WHERE id = %s"
    )

    with pytest.raises(IntegrityError):
        raw(insert, [IN_LISBON, IN_BERLIN, lisbon.pk])
    raw(insert, [IN_LISBON, IN_LISBON, lisbon.pk])

    assert Memory.objects.count() == 2


def test_it_still_refuses_a_raw_delete_of_a_memory_after_migrating(global_scope):
    lisbon = lives_in(global_scope, "Lisbon", valid_from=IN_LISBON)

    with pytest.raises(DatabaseError, match="never physically deletes"):
        raw("DELETE FROM memory_memory WHERE id = %s", [lisbon.pk])

    assert Memory.objects.filter(pk=lisbon.pk).exists()


def test_it_still_indexes_memories_for_search_after_migrating(
    project_scope, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        seal = narrate(project_scope, "A seal slept on the lighthouse steps")
    found = memory_search(query="lighthouse", scope_ids=[project_scope.pk])

    with django_capture_on_commit_callbacks(execute=True):
        memory_expire(memory_id=seal.pk, reason="the seal left")
    gone = memory_search(query="lighthouse", scope_ids=[project_scope.pk])

    assert [(hit.memory.pk, hit.lexical > 0) for hit in found] == [(seal.pk, True)]
    assert gone == []


def test_it_records_a_value_older_than_the_current_one_as_history(global_scope):
    lives_in(global_scope, "Lisbon", valid_from=IN_LISBON)

    berlin = lives_in(global_scope, "Berlin", valid_from=IN_BERLIN)

    assert (berlin.status, berlin.valid_from, berlin.valid_to) == (
        "superseded",
        IN_BERLIN,
        IN_LISBON,
    )


def test_it_supersedes_a_fact_with_an_older_dated_value_it_may_not_see(global_scope):
    secret = lives_in(global_scope, "Lisbon", valid_from=IN_LISBON, secret=True)

    berlin = lives_in(global_scope, "Berlin", valid_from=IN_BERLIN)

    secret.refresh_from_db()
    assert (berlin.status, berlin.supersedes_id) == ("active", secret.pk)
    assert (secret.status, secret.valid_from, secret.valid_to) == (
        "superseded",
        IN_LISBON,
        IN_LISBON,
    )


def test_it_invalidates_a_fact_with_a_newer_value(global_scope):
    lisbon = lives_in(global_scope, "Lisbon", valid_from=IN_LISBON)

    porto = lives_in(global_scope, "Porto", valid_from=IN_PORTO)

    lisbon.refresh_from_db()
    assert (porto.status, lisbon.status, lisbon.valid_to) == ("active", "superseded", IN_PORTO)


def test_it_invalidates_an_edited_fact_dated_ahead_where_it_begins(global_scope):
    ahead = timezone.now() + timedelta(days=30)
    tokyo = stored_ahead(lives_in(global_scope, "Tokyo"), ahead)

    memory_update(memory=tokyo, changes={"value": "Osaka"}, actor=Actor.OWNER)

    tokyo.refresh_from_db()
    assert (tokyo.status, tokyo.valid_to) == ("superseded", ahead)


def test_it_expires_a_memory_dated_ahead_where_it_begins(global_scope):
    ahead = timezone.now() + timedelta(days=30)
    tokyo = stored_ahead(lives_in(global_scope, "Tokyo"), ahead)

    expired = memory_expire(memory_id=tokyo.pk, reason="owner: not moving after all")

    assert (expired.status, expired.valid_to) == ("expired", ahead)


def test_it_decays_a_memory_dated_ahead_where_it_begins(project_scope):
    ahead = timezone.now() + timedelta(days=30)
    fact = stored_ahead(
        archive_fact(project_scope, "release_date", "next month", importance=1), ahead
    )

    lifecycle_maintain(now=timezone.now() + timedelta(days=8))

    fact.refresh_from_db()
    assert (fact.status, fact.expired_by, fact.valid_to) == ("expired", "decay", ahead)


@pytest.mark.parametrize("migration", ["memory.migrations.0023_memory_intervals_repair", MIGRATION])
def test_it_repairs_a_memory_that_ends_before_it_begins_when_migrating(global_scope, migration):
    lisbon = lives_in(global_scope, "Lisbon", valid_from=IN_LISBON)
    with check_lifted():
        # Stored as raw SQL stores a timestamp on SQLite ("…+00:00"), not as the ORM writes it.
        raw(
            "UPDATE memory_memory SET valid_from = %s, valid_to = %s WHERE id = %s",
            [str(IN_LISBON), str(IN_BERLIN), lisbon.pk],
        )

        importlib.import_module(migration).repair(apps=None, schema_editor=None)
        importlib.import_module(migration).repair(apps=None, schema_editor=None)

    raw("UPDATE memory_memory SET valid_to = valid_to WHERE id = %s", [lisbon.pk])
    lisbon.refresh_from_db()
    assert lisbon.valid_to == IN_LISBON
    [repair] = AuditEvent.objects.filter(target_id=lisbon.pk, action="update")
    assert (repair.actor, repair.before) == ("system", {"valid_to": IN_BERLIN.isoformat()})
