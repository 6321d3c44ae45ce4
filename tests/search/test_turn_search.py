from datetime import UTC, datetime

from memory.search import turn_search
from memory.services.timeline import TurnInput, session_start, turns_record


def record(scope, external_id, lines, when, django_capture_on_commit_callbacks):
    session = session_start(runtime="test", external_id=external_id, scope_id=scope.pk)
    with django_capture_on_commit_callbacks(execute=True):
        return turns_record(
            session_id=session.pk,
            turns=[
                TurnInput(role=role, content=text, speaker=role, occurred_at=when)
                for role, text in lines
            ],
        )


def test_it_finds_a_reply_through_the_question_before_it(
    project_scope, django_capture_on_commit_callbacks
):
    may = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    turns = record(
        project_scope,
        "s1",
        [
            ("user", "Which city did you move to for the new job?"),
            ("assistant", "Lisbon, last spring."),
            ("user", "I spent the weekend repainting the kitchen."),
        ],
        may,
        django_capture_on_commit_callbacks,
    )
    hits = turn_search(query="city new job move", scope_ids=[project_scope.pk], limit=3)
    assert hits[0].turn.pk == turns[0].pk
    # The answer holds none of the query's words; its neighbour does.
    reply = next(hit for hit in hits if hit.turn.pk == turns[1].pk)
    assert reply.lexical > 0 and reply.why["matched_terms"]


def test_it_matches_the_month_a_turn_happened(project_scope, django_capture_on_commit_callbacks):
    may = datetime(2023, 5, 8, tzinfo=UTC)
    june = datetime(2023, 6, 20, tzinfo=UTC)
    in_may = record(
        project_scope,
        "s-may",
        [("user", "We painted the fence.")],
        may,
        django_capture_on_commit_callbacks,
    )
    record(
        project_scope,
        "s-june",
        [("user", "We painted the garage.")],
        june,
        django_capture_on_commit_callbacks,
    )
    hits = turn_search(query="What did we paint in May 2023?", scope_ids=[project_scope.pk])
    assert hits[0].turn.pk == in_may[0].pk


def test_it_filters_turns_by_time_session_and_scope(
    project_scope, other_project_scope, django_capture_on_commit_callbacks
):
    early = datetime(2024, 1, 10, tzinfo=UTC)
    late = datetime(2024, 3, 10, tzinfo=UTC)
    first = record(
        project_scope,
        "a",
        [("user", "deploy the harbour api")],
        early,
        django_capture_on_commit_callbacks,
    )
    second = record(
        project_scope,
        "b",
        [("user", "deploy the harbour api again")],
        late,
        django_capture_on_commit_callbacks,
    )
    record(
        other_project_scope,
        "c",
        [("user", "deploy the harbour api elsewhere")],
        late,
        django_capture_on_commit_callbacks,
    )
    scope = [project_scope.pk]

    def found(**filters):
        return {hit.turn.pk for hit in turn_search(query="harbour api", scope_ids=scope, **filters)}

    assert found() == {first[0].pk, second[0].pk}
    assert found(since=datetime(2024, 2, 1, tzinfo=UTC)) == {second[0].pk}
    assert found(until=datetime(2024, 2, 1, tzinfo=UTC)) == {first[0].pk}
    assert found(session_ids=[first[0].session_id]) == {first[0].pk}
    assert turn_search(query="harbour api", scope_ids=[]) == []
