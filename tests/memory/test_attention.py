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
