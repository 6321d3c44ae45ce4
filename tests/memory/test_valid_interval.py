"""A memory never ends before it begins (valid_to IS NULL OR valid_to >= valid_from): the database
refuses a write that would break it (migration 0027; tests/memory/test_backdated_facts.py runs
the service paths that end a memory under it), and the table rebuild SQLite made to add it kept
every trigger on the table."""

import importlib
from contextlib import contextmanager
from datetime import UTC, datetime

import pytest
from django.db import DatabaseError, IntegrityError, connection, transaction

from memory.models import AuditEvent, Memory
from memory.search import memory_search
from memory.services.lifecycle import memory_expire
from tests.memory.conftest import lives_in, narrate

IN_BERLIN = datetime(2019, 1, 1, tzinfo=UTC)
IN_LISBON = datetime(2023, 3, 1, tzinfo=UTC)
IN_PORTO = datetime(2024, 6, 1, tzinfo=UTC)
MIGRATION = "memory.migrations.0027_memory_valid_interval_check"


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
