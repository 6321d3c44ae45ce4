import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connection, transaction

from memory.db_guard import PROTECTED_TABLES, guard_install_sql, guard_remove_sql
from memory.models import AuditEvent, ContextTurn, Memory
from memory.search.schema import search_schema_sql
from memory.services.facts import FactInput, fact_write
from memory.services.narratives import NarrativeInput, narrative_write
from memory.services.self_concept import self_concept_write
from memory.services.timeline import TurnInput, session_start, turns_record


@pytest.fixture
def stored(global_scope):
    session = session_start(runtime="test", external_id="guard", scope_id=global_scope.pk)
    turn = turns_record(session_id=session.pk, turns=[TurnInput(role="user", content="hello")])[0]
    fact_write(
        data=FactInput(
            scope_id=global_scope.pk,
            profile_name="user",
            kind="fact",
            predicate="name",
            value="Ada",
        )
    )
    self_concept_write(field="fact", content="I am Tide")
    return narrative_write(
        data=NarrativeInput(
            scope_id=global_scope.pk,
            gesture="a kept memory",
            tags=["kept"],
            source_turn_ids=[turn.pk],
        )
    )


@pytest.mark.parametrize("table", PROTECTED_TABLES)
def test_it_refuses_a_raw_sql_delete(stored, table):
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {table}")
        assert cursor.fetchone()[0] > 0, f"{table} must hold a row for the guard to fire"
    with (
        pytest.raises(DatabaseError, match="never physically deletes"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(f"DELETE FROM {table}")


def test_it_refuses_an_orm_delete_of_a_memory(stored):
    with pytest.raises(DatabaseError), transaction.atomic():
        Memory.objects.filter(pk=stored.pk).delete()
    assert Memory.objects.filter(pk=stored.pk).exists()
    assert ContextTurn.objects.count() == 1


def test_it_keeps_the_audit_log_append_only(stored):
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.update(reason="rewritten history")


def search_schema_install(vendor: str) -> list[str]:
    return search_schema_sql(vendor, install=True)


@pytest.mark.parametrize("build", [guard_install_sql, guard_remove_sql, search_schema_install])
def test_it_names_the_supported_databases_for_any_other_vendor(build):
    with pytest.raises(ImproperlyConfigured, match="SQLite and PostgreSQL"):
        build("mysql")
