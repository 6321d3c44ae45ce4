"""Every service call leaves exactly one audit row."""

import pytest

from memory.models import AuditEvent, FactKind
from memory.services.facts import FactInput, fact_write
from memory.services.lifecycle import memory_expire, memory_restore, memory_set_pinned
from memory.services.narratives import NarrativeInput, narrative_write
from memory.services.self_concept import self_concept_write
from memory.services.threads import snapshot_write, thread_set_status, thread_write
from memory.services.timeline import TurnInput, session_start, turn_record, turns_record


def one_audit_row(call):
    before = AuditEvent.objects.count()
    result = call()
    assert AuditEvent.objects.count() == before + 1
    return result


def test_it_writes_one_audit_row_per_service_call(global_scope):
    scope_id = global_scope.pk
    session = one_audit_row(
        lambda: session_start(runtime="test", external_id="audit", scope_id=scope_id)
    )
    turn = one_audit_row(
        lambda: turn_record(session_id=session.pk, turn=TurnInput(role="user", content="hi"))
    )
    one_audit_row(
        lambda: turns_record(
            session_id=session.pk,
            turns=[TurnInput(role="user", content="a"), TurnInput(role="assistant", content="b")],
        )
    )
    narrative = one_audit_row(
        lambda: narrative_write(
            data=NarrativeInput(scope_id=scope_id, gesture="said hi", source_turn_ids=[turn.pk])
        )
    )
    fact_data = FactInput(
        scope_id=scope_id, profile_name="user", kind=FactKind.FACT, predicate="name", value="Ada"
    )
    one_audit_row(lambda: fact_write(data=fact_data))
    one_audit_row(lambda: fact_write(data=fact_data))  # skip is a decision too
    one_audit_row(lambda: self_concept_write(field="fact", content="I am Tide"))
    one_audit_row(lambda: snapshot_write(scope_id=scope_id, content="all calm"))
    thread = one_audit_row(lambda: thread_write(scope_id=scope_id, content="why the tide?"))
    one_audit_row(lambda: thread_set_status(thread_id=thread.pk, status="explored"))
    one_audit_row(lambda: memory_set_pinned(memory_id=narrative.pk, pinned=True))
    one_audit_row(lambda: memory_expire(memory_id=narrative.pk, reason="owner cleanup"))
    one_audit_row(lambda: memory_restore(memory_id=narrative.pk))

    last = AuditEvent.objects.first()
    assert (last.actor, last.action, last.target_id) == ("owner", "restore", narrative.pk)


@pytest.mark.parametrize("content", ["", "  "])
def test_it_rejects_empty_turns_and_writes_nothing(global_scope, content):
    session = session_start(runtime="test", external_id="empty", scope_id=global_scope.pk)
    before = AuditEvent.objects.count()
    with pytest.raises(Exception, match="must not be empty"):
        turn_record(session_id=session.pk, turn=TurnInput(role="user", content=content))
    assert AuditEvent.objects.count() == before
