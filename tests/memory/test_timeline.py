from memory.models import ContextTurn, InboxItem
from memory.services.timeline import TurnInput, session_start, turn_record, turns_record

DECISION = "我们决定用 PostgreSQL 做账单服务"


def _turns() -> list[TurnInput]:
    return [
        TurnInput(role="user", content=DECISION, meta={"external_id": "t1"}),
        TurnInput(
            role="assistant", content="好的，账单服务用 PostgreSQL。", meta={"external_id": "t2"}
        ),
    ]


def test_it_skips_turns_a_session_recorded_before_it_moved_into_another_project(
    project_scope, other_project_scope
):
    first = session_start(runtime="cli", external_id="s1", scope_id=project_scope.pk)
    turns_record(session_id=first.pk, turns=_turns())
    moved = session_start(runtime="cli", external_id="s1", scope_id=other_project_scope.pk)

    again = turns_record(
        session_id=moved.pk,
        turns=_turns(),
        scope_ids_readable={project_scope.pk, other_project_scope.pk},
    )

    assert moved.pk != first.pk and again == []
    assert not ContextTurn.objects.filter(scope=other_project_scope).exists()
    assert not InboxItem.objects.filter(scope=other_project_scope).exists()


def test_it_skips_turns_a_segment_recorded_when_the_session_moves_back(
    project_scope, other_project_scope
):
    first = session_start(runtime="cli", external_id="s1", scope_id=project_scope.pk)
    moved = session_start(runtime="cli", external_id="s1", scope_id=other_project_scope.pk)
    turns_record(session_id=moved.pk, turns=_turns())

    again = turns_record(
        session_id=first.pk, turns=[*_turns(), _new_turn()], scope_ids_readable=None
    )

    assert [turn.external_id for turn in again] == ["t3"]
    assert ContextTurn.objects.filter(scope=other_project_scope).count() == 2


def test_it_answers_a_moved_turn_with_the_turn_already_held(project_scope, other_project_scope):
    first = session_start(runtime="cli", external_id="s1", scope_id=project_scope.pk)
    held = turn_record(session_id=first.pk, turn=_turns()[0])
    moved = session_start(runtime="cli", external_id="s1", scope_id=other_project_scope.pk)

    again = turn_record(session_id=moved.pk, turn=_turns()[0], scope_ids_readable=None)

    assert again.pk == held.pk and ContextTurn.objects.count() == 1


def test_it_records_turns_another_part_of_the_session_holds_where_the_caller_may_not_read(
    project_scope, other_project_scope
):
    # The same session id in another project may be another key's session: a skip would tell
    # this caller what that key recorded there, and lose this caller's own turns.
    first = session_start(runtime="cli", external_id="s1", scope_id=project_scope.pk)
    turns_record(session_id=first.pk, turns=_turns())
    other = session_start(runtime="cli", external_id="s1", scope_id=other_project_scope.pk)

    recorded = turns_record(
        session_id=other.pk, turns=_turns(), scope_ids_readable={other_project_scope.pk}
    )
    unsaid = turns_record(session_id=other.pk, turns=[_new_turn()])

    assert [turn.scope_id for turn in recorded] == [other_project_scope.pk] * 2
    assert [turn.scope_id for turn in unsaid] == [other_project_scope.pk]


def test_it_records_turns_of_a_subagent_under_the_ids_its_parent_used(project_scope):
    parent = session_start(runtime="cli", external_id="s1", scope_id=project_scope.pk)
    turns_record(session_id=parent.pk, turns=_turns())
    child = session_start(
        runtime="cli",
        external_id="s1-agent",
        scope_id=project_scope.pk,
        parent_id=parent.pk,
        delegation_depth=1,
    )

    recorded = turns_record(session_id=child.pk, turns=_turns(), scope_ids_readable=None)

    assert len(recorded) == 2


def _new_turn() -> TurnInput:
    return TurnInput(role="user", content="下一步写迁移", meta={"external_id": "t3"})
