"""memory_search reads the kind of answer a question asks for, as turn search does: a question
that asks when prefers the memory that places itself in time, one that names a day (or a month
with its year) the memories valid from that day (month) or the week after, one that opens with how many the memory that states a
number, one that opens with where the memory that names a place."""

from datetime import UTC, datetime, timedelta

import pytest

from memory.search import memory_search
from tests.search.why import shares_sum_to_score


# On PostgreSQL, 0 makes the native backend rank a candidate view (the flags read in SQL from the
# stored bag and text) instead of every row of the scope; the in-process index ignores it.
@pytest.mark.parametrize("exact_rows", [2000, 0])
@pytest.mark.parametrize(
    ("query", "texts", "setting"),
    [
        (
            "When did Nate adopt the turtles?",
            [
                "Nate adopted turtles, adopted more turtles",
                "Nate adopted the turtles in March",
            ],
            "TIDELINE_SEARCH_PRIOR_WHEN",
        ),
        (
            "How many turtles does Nate have?",
            ["Nate has turtles, more turtles than anyone", "Nate has turtles: three"],
            "TIDELINE_SEARCH_PRIOR_ANSWER",
        ),
        (
            "Where does Nate walk the dogs?",
            ["Nate loves walking the dogs, walking dogs daily", "Nate walks the dogs at Riverside"],
            "TIDELINE_SEARCH_PRIOR_ANSWER",
        ),
    ],
)
def test_it_prefers_the_memory_that_holds_the_kind_of_answer_asked_for(
    project_scope, write_narrative, settings, exact_rows, query, texts, setting
):
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = exact_rows
    general, answer = (write_narrative(project_scope, text) for text in texts)
    setattr(settings, setting, 0.0)
    without = memory_search(query=query, scope_ids=[project_scope.pk], limit=2)
    assert [hit.memory.pk for hit in without] == [general.pk, answer.pk]

    setattr(settings, setting, 0.15)
    hits = memory_search(query=query, scope_ids=[project_scope.pk], limit=2)
    assert [hit.memory.pk for hit in hits] == [answer.pk, general.pk]
    before = {hit.memory.pk: hit.score for hit in without}
    raised = {hit.memory.pk: hit.score - before[hit.memory.pk] for hit in hits}
    assert raised == {general.pk: pytest.approx(0, abs=1e-5), answer.pk: pytest.approx(0.15)}
    assert all(shares_sum_to_score(hit) for hit in hits)

    # The same words, not opening with the question, get no such prior.
    plain = memory_search(
        query=f"Tell me about it: {query.lower()}", scope_ids=[project_scope.pk], limit=2
    )
    assert [hit.memory.pk for hit in plain] == [general.pk, answer.pk]


@pytest.mark.parametrize("exact_rows", [2000, 0])
@pytest.mark.parametrize(
    ("query", "setting", "weight", "march_raised"),
    [
        # A day after the named day the prior has faded by a seventh.
        (
            "What was James doing with his brother on March 16, 2022?",
            "TIDELINE_SEARCH_PRIOR_DAY",
            0.4,
            0.4 * (1 - 1 / 7),
        ),
        # Inside the named month, the whole prior.
        (
            "What was James doing with his brother in March 2022?",
            "TIDELINE_SEARCH_PRIOR_PERIOD",
            0.2,
            0.2,
        ),
    ],
)
def test_it_prefers_the_memories_of_a_named_day_or_month_and_the_week_after(
    project_scope, write_narrative, settings, exact_rows, query, setting, weight, march_raised
):
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = exact_rows
    june = write_narrative(
        project_scope,
        "James went bowling with his brother",
        valid_from=datetime(2022, 6, 1, tzinfo=UTC),
    )
    march = write_narrative(
        project_scope,
        "James and his brother spent the whole afternoon bowling",
        valid_from=datetime(2022, 3, 17, tzinfo=UTC),
    )
    setattr(settings, setting, 0.0)
    without = memory_search(query=query, scope_ids=[project_scope.pk], limit=2)
    assert [hit.memory.pk for hit in without] == [june.pk, march.pk]

    setattr(settings, setting, weight)
    hits = memory_search(query=query, scope_ids=[project_scope.pk], limit=2)
    assert [hit.memory.pk for hit in hits] == [march.pk, june.pk]
    before = {hit.memory.pk: hit.score for hit in without}
    raised = {hit.memory.pk: hit.score - before[hit.memory.pk] for hit in hits}
    # June is past the week after.
    assert raised == {
        march.pk: pytest.approx(march_raised, abs=1e-4),
        june.pk: pytest.approx(0, abs=1e-5),
    }
    assert all(shares_sum_to_score(hit) for hit in hits)


@pytest.mark.parametrize("exact_rows", [2000, 0])
def test_it_prefers_the_memories_of_a_day_named_relative_to_the_moment_of_asking(
    project_scope, write_narrative, settings, exact_rows
):
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = exact_rows
    query = "What did James decide about the bowling league yesterday?"
    now = datetime.now(UTC)
    older = write_narrative(
        project_scope,
        "James decided to join the bowling league",
        valid_from=now - timedelta(days=20),
    )
    yesterdays = write_narrative(
        project_scope,
        "James decided bowling was not for him and left the league",
        valid_from=now - timedelta(days=1),
    )
    settings.TIDELINE_SEARCH_PRIOR_DAY = 0.0
    without = memory_search(query=query, scope_ids=[project_scope.pk], limit=2)
    assert [hit.memory.pk for hit in without] == [older.pk, yesterdays.pk]

    settings.TIDELINE_SEARCH_PRIOR_DAY = 0.4
    hits = memory_search(query=query, scope_ids=[project_scope.pk], limit=2)
    assert [hit.memory.pk for hit in hits] == [yesterdays.pk, older.pk]
    before = {hit.memory.pk: hit.score for hit in without}
    raised = {hit.memory.pk: hit.score - before[hit.memory.pk] for hit in hits}
    # Said during yesterday: at least six sevenths of the day prior (it fades over the week after).
    assert 0.4 * 6 / 7 - 1e-4 <= raised[yesterdays.pk] <= 0.4 + 1e-4
    assert raised[older.pk] == pytest.approx(0, abs=1e-5)
    assert all(shares_sum_to_score(hit) for hit in hits)

    # Searched as of nineteen days ago, yesterday was the older memory's day; asked then of
    # everything stored, the older memory ranks first.
    then = now - timedelta(days=19)
    back_then = memory_search(query=query, scope_ids=[project_scope.pk], limit=2, as_of=then)
    assert [hit.memory.pk for hit in back_then] == [older.pk]
    assert back_then[0].why["boosts"]["priors"] >= 0.4 * 6 / 7
    asked_then = memory_search(query=query, scope_ids=[project_scope.pk], limit=2, asked_at=then)
    assert [hit.memory.pk for hit in asked_then] == [older.pk, yesterdays.pk]
