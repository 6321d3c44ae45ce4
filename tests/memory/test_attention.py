import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory.models import AttentionEvent, AuditEvent
from memory.search import memory_search
from memory.services.attention import memories_activate
from memory.services.narratives import NarrativeInput, narrative_write


def test_it_records_a_recall_as_attention_and_not_as_an_audited_decision(project_scope):
    memory = narrative_write(
        data=NarrativeInput(gesture="The harbour ferry leaves at 7", scope_id=project_scope.pk)
    )
    audits = AuditEvent.objects.count()

    hits = memory_search(
        query="harbour ferry", scope_ids=[project_scope.pk], activation_source="mcp_search"
    )
    memories_activate(memory_ids=[memory.pk], source="t1_prefetch")

    assert [hit.memory.pk for hit in hits] == [memory.pk]
    assert AuditEvent.objects.count() == audits
    events = AttentionEvent.objects.filter(memory_id=memory.pk).order_by("pk")
    assert [event.source for event in events] == ["mcp_search", "t1_prefetch"]
    memory.refresh_from_db()
    assert memory.activation_count == 2


@pytest.mark.django_db(transaction=True)
def test_it_commits_activations_without_waiting_for_the_wal_and_only_those(project_scope):
    if connection.vendor != "postgresql":
        pytest.skip("synchronous_commit is PostgreSQL's; SQLite's durability is per database")
    memory = narrative_write(
        data=NarrativeInput(gesture="The harbour ferry leaves at 7", scope_id=project_scope.pk)
    )

    with CaptureQueriesContext(connection) as statements:
        memories_activate(memory_ids=[memory.pk], source="t1_prefetch")

    assert "SET LOCAL synchronous_commit = off" in [s["sql"] for s in statements.captured_queries]
    # The next transaction on this (pooled) connection, a memory write say, waits for the WAL.
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"
    assert AttentionEvent.objects.filter(memory_id=memory.pk).count() == 1
