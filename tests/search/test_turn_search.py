from datetime import UTC, datetime

import pytest

from memory.search import memory_search, turn_search
from memory.search.sessions import session_search
from memory.search.text import text_terms
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


@pytest.mark.parametrize(
    "query",
    [
        "What did we paint in May 2023?",
        "我们2023年5月刷了什么？",
        "¿Qué pintamos en mayo de 2023?",
        "what did we paint on 2023/05/08",
    ],
)
def test_it_matches_the_month_a_turn_happened(
    project_scope, django_capture_on_commit_callbacks, query
):
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
    hits = turn_search(query=query, scope_ids=[project_scope.pk])
    assert hits[0].turn.pk == in_may[0].pk
    assert "may" in hits[0].why["matched_terms"]


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


@pytest.mark.parametrize("exact_rows", [2000, 0])
def test_it_lends_a_turn_its_neighbours_words_but_not_their_speakers_names(
    project_scope, settings, django_capture_on_commit_callbacks, exact_rows
):
    # exact_rows 0 sends PostgreSQL through its candidate view (the stored term bags).
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = exact_rows
    session = session_start(runtime="test", external_id="chat", scope_id=project_scope.pk)
    with django_capture_on_commit_callbacks(execute=True):
        turns = turns_record(
            session_id=session.pk,
            turns=[
                TurnInput(role="user", speaker="Caroline", content="I signed up for pottery."),
                TurnInput(role="assistant", speaker="Melanie", content="When does it start?"),
                TurnInput(role="user", speaker="Caroline", content="Next Monday, at six."),
            ],
        )
    hits = {
        hit.turn.pk: hit
        for hit in turn_search(query="Caroline pottery", scope_ids=[project_scope.pk])
    }
    (caroline,) = text_terms("Caroline")
    (pottery,) = text_terms("pottery")
    # Melanie's reply borrows "pottery" from the turn before it, and not Caroline's name.
    assert hits[turns[1].pk].why["matched_terms"] == [pottery]
    assert sorted(hits[turns[2].pk].why["matched_terms"]) == sorted([caroline, pottery])
    assert hits[turns[0].pk].lexical > hits[turns[2].pk].lexical > hits[turns[1].pk].lexical


@pytest.mark.parametrize("exact_rows", [2000, 0])
def test_it_normalises_turn_length_with_the_turns_own_b(
    project_scope, settings, write_narrative, django_capture_on_commit_callbacks, exact_rows
):
    # exact_rows 0 sends PostgreSQL through its candidate view; SQLite ranks the same either way.
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = exact_rows
    when = datetime(2024, 2, 1, tzinfo=UTC)
    short = record(
        project_scope,
        "short",
        [("user", "The kiln cracked.")],
        when,
        django_capture_on_commit_callbacks,
    )
    long = record(
        project_scope,
        "long",
        [
            (
                "user",
                "The kiln cracked again this morning, right when the pottery group had packed "
                "every shelf with glazed bowls, mugs and the festival vase we spent weeks on.",
            )
        ],
        when,
        django_capture_on_commit_callbacks,
    )
    write_narrative(project_scope, "The glaze on the mug ran.")
    write_narrative(
        project_scope,
        "The glaze on the mug ran down into the kiln shelf, so the whole batch of bowls for the "
        "spring market stuck to it and had to be chipped off one by one.",
    )

    def lexical(hits, pk):
        return next(hit.why["lexical_score"] for hit in hits if hit.turn.pk == pk)

    settings.TIDELINE_SEARCH_BM25_B = 1.0
    settings.TIDELINE_SEARCH_TURN_BM25_B = 0.0
    hits = turn_search(query="kiln", scope_ids=[project_scope.pk])
    # No length normalisation for turns: one mention scores the same in a long turn.
    assert lexical(hits, short[0].pk) == pytest.approx(lexical(hits, long[0].pk))
    memories = memory_search(query="glaze", scope_ids=[project_scope.pk])
    # Memories keep their own b: the longer narrative's single mention weighs less.
    assert memories[0].why["lexical_score"] > memories[1].why["lexical_score"]
    assert len(memories[1].memory.gesture) > len(memories[0].memory.gesture)

    settings.TIDELINE_SEARCH_TURN_BM25_B = 1.0
    hits = turn_search(query="kiln", scope_ids=[project_scope.pk])
    assert lexical(hits, short[0].pk) > lexical(hits, long[0].pk)


@pytest.mark.parametrize("query", ["?!", "the of and to is", "© ▶ ➡"])
def test_it_finds_no_turn_for_a_query_with_no_word_to_search_by(
    project_scope, django_capture_on_commit_callbacks, query
):
    """Before, such a query got every turn back, the least unrelated scored 0.59 with no term
    matched and a cosine near 0: turns have no floor, and a query of punctuation met none."""
    record(
        project_scope,
        "s-small-talk",
        [
            ("user", "Mañana voy a Sevilla a ver a mi hermana."),
            ("assistant", "The train to the coast leaves at nine."),
            ("user", "I adopted a puppy from the shelter last week."),
        ],
        datetime(2024, 3, 10, tzinfo=UTC),
        django_capture_on_commit_callbacks,
    )

    assert turn_search(query=query, scope_ids=[project_scope.pk]) == []
    assert session_search(query=query, scope_ids=[project_scope.pk]) == []
    # A query that shares no word but means one of them still finds it.
    by_meaning = turn_search(query="my new dog", scope_ids=[project_scope.pk])
    assert by_meaning and "puppy" in by_meaning[0].turn.content
    assert session_search(query="my new dog", scope_ids=[project_scope.pk])
