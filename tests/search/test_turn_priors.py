"""Turn priors: a when-question prefers the turn that places the event in time, a question that
names a day or a month prefers the turns of that day or month and the week after it, one that
names a speaker prefers that speaker's turns, and one that asks how many or where prefers the turn
that states a number or names a place, and a turn that says more outranks a short one with the
same words."""

import math
from datetime import UTC, date, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory.search import turn_search
from memory.search.relative_days import relative_spans
from memory.search.text import text_terms
from memory.search.timing import (
    days_named,
    mentions_time,
    monthdays_named,
    monthperiods_named,
    periods_named,
    time_priors,
)
from tests.search.turns import record
from tests.search.why import shares_sum_to_score


@pytest.fixture(autouse=True)
def no_expansion(settings):
    """Each prior here is measured alone; query expansion, a prior too, has its own tests
    (test_expansion.py), and the length prior, which every turn gets, and the opening turn's, which
    shares the speaker prior's condition, are switched on by the tests that are about them; a
    reply's share of its question's score has its own tests (test_replies.py)."""
    settings.TIDELINE_SEARCH_EXPANSION_WEIGHT = 0.0
    settings.TIDELINE_SEARCH_PRIOR_LENGTH = 0.0
    settings.TIDELINE_SEARCH_PRIOR_OPENING = 0.0
    settings.TIDELINE_SEARCH_REPLY_SHARE = 0.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Yesterday I went bowling and got two strikes.", True),
        ("We adopted Pixie three weeks ago.", True),
        ("I'm flying to Toronto on July 11.", True),
        ("The release shipped in 2023.", True),
        ("我上个月去了北京。", True),
        ("先週は忙しかった。", True),
        ("Fui ayer al cine.", True),
        ("I may go bowling, have a nice day!", False),
        ("Bowling is the best way to unwind.", False),
        ("我喜欢打保龄球。", False),
    ],
)
def test_it_knows_which_turns_place_themselves_in_time(text, expected):
    assert mentions_time(text_terms(text)) is expected


@pytest.mark.parametrize(
    ("query", "days"),
    [
        ("What was James doing on March 16, 2022?", [date(2022, 3, 16)]),
        ("on Mar 3rd 2023 and on 7 Jan 2024", [date(2023, 3, 3), date(2024, 1, 7)]),
        ("the 16th of March, 2022", [date(2022, 3, 16)]),
        ("the forest picture shared on December 1,2023", [date(2023, 12, 1)]),
        ("16 March,2022", [date(2022, 3, 16)]),
        ("¿qué pasó el 16 de marzo de 2022?", [date(2022, 3, 16)]),
        ("2022年3月16日发生了什么？", [date(2022, 3, 16)]),
        ("deploy on 2024-01-10", [date(2024, 1, 10)]),
        ("deploy on 2024/01/10", [date(2024, 1, 10)]),
        # Day and month both read when either order is a date.
        ("the meeting of 10.01.2024", [date(2024, 1, 10), date(2024, 10, 1)]),
        ("the meeting of 25/12/2024", [date(2024, 12, 25)]),
        # Not days: an impossible date, a month alone, a bare number.
        ("invoice dated 2024-02-30", []),
        ("What did we paint in May 2023?", []),
        ("ticket 16 of 2022", []),
    ],
)
def test_it_reads_the_days_a_query_names(query, days):
    assert days_named(query) == days


@pytest.mark.parametrize(
    ("query", "monthdays"),
    [
        ("What did we paint on May 8th?", [(5, 8)]),
        ("when they met on Aug 15th", [(8, 15)]),
        ("the 15th of August", [(8, 15)]),
        ("¿qué pasó el 8 de mayo?", [(5, 8)]),
        ("我5月16日做了什么？", [(5, 16)]),
        ("between August 11 and August 15 2023", [(8, 11)]),
        ("on Feb 29th", [(2, 29)]),
        # A date with its year is days_named's; a month alone, or a day no year has, is no day.
        ("What was James doing on March 16, 2022?", []),
        ("2022年3月16日发生了什么？", []),
        ("What did we paint in May 2023?", []),
        ("on Feb 30", []),
    ],
)
def test_it_reads_the_days_a_query_names_without_a_year(query, monthdays):
    assert monthdays_named(query) == monthdays


@pytest.mark.parametrize(
    ("query", "periods"),
    [
        ("What did we paint in May 2023?", [(date(2023, 5, 1), date(2023, 5, 31))]),
        ("In February, 2024 we moved", [(date(2024, 2, 1), date(2024, 2, 29))]),
        ("the first weekend of October 2023", [(date(2023, 10, 1), date(2023, 10, 10))]),
        ("mid-October 2023", [(date(2023, 10, 11), date(2023, 10, 20))]),
        ("in the last week of Feb 2023", [(date(2023, 2, 21), date(2023, 2, 28))]),
        ("a finales de febrero de 2024", [(date(2024, 2, 21), date(2024, 2, 29))]),
        ("a principios de mayo del 2023", [(date(2023, 5, 1), date(2023, 5, 10))]),
        ("我们2023年10月底去了哪里？", [(date(2023, 10, 21), date(2023, 10, 31))]),
        ("2023年2月", [(date(2023, 2, 1), date(2023, 2, 28))]),
        ("2023年十月初", [(date(2023, 10, 1), date(2023, 10, 10))]),
        # A full date is a day, not its month; a month without its year, or no month, is no period.
        ("What was James doing on March 16, 2022?", []),
        ("on 16 March 2022", []),
        ("2022年3月16日发生了什么？", []),
        ("What did we paint in May?", []),
        ("2023年13月", []),
    ],
)
def test_it_reads_the_months_a_query_names_with_their_year(query, periods):
    assert periods_named(query) == periods


@pytest.mark.parametrize(
    ("query", "months"),
    [
        ("When did Melanie go camping in June?", [(6, None)]),
        ("during August", [(8, None)]),
        ("the end of June", [(6, 2)]),
        ("mid-june and early July", [(6, 1), (7, 0)]),
        ("¿qué hicimos en octubre?", [(10, None)]),
        ("a mediados de octubre", [(10, 1)]),
        ("我们10月底去了哪里", [(10, 2)]),
        ("我们十月底去了哪里", [(10, 2)]),
        ("十一月和二月", [(11, None), (2, None)]),
        # With a year or a day it is someone else's; a verb, a sea or a duration is no month.
        ("What did we paint in May 2023?", []),
        ("on May 8th", []),
        ("我们2023年10月去了哪里", []),
        ("May I ask, we start May with a plan", []),
        ("navegamos en mar abierto", []),
        ("我学了3个月", []),
        ("我学了三个月", []),
    ],
)
def test_it_reads_the_months_a_query_names_without_a_year(query, months):
    assert monthperiods_named(query) == months


# A Wednesday.
ASKED = date(2026, 12, 2)


def days(first: date, last: date | None = None) -> list[tuple[date, date]]:
    return [(first, last or first)]


@pytest.mark.parametrize(
    ("query", "spans"),
    [
        ("What did we decide yesterday?", days(date(2026, 12, 1))),
        ("and the day before yesterday", days(date(2026, 11, 30))),
        ("the plan from three days ago", days(date(2026, 11, 29))),
        ("what I said this morning", days(ASKED)),
        ("last Friday", days(date(2026, 11, 27))),
        # Asked on a Wednesday, last Wednesday is a week ago.
        ("last Wednesday", days(date(2026, 11, 25))),
        ("last weekend", days(date(2026, 11, 28), date(2026, 11, 29))),
        ("last week", days(date(2026, 11, 23), date(2026, 11, 29))),
        ("in the past week", days(date(2026, 11, 25), ASKED)),
        ("2 weeks ago", days(date(2026, 11, 16), date(2026, 11, 22))),
        ("last month", days(date(2026, 11, 1), date(2026, 11, 30))),
        ("this week and this month", [(date(2026, 11, 30), ASKED), (date(2026, 12, 1), ASKED)]),
        ("last year", days(date(2025, 1, 1), date(2025, 12, 31))),
        ("我们昨天说了什么？", days(date(2026, 12, 1))),
        ("前天", days(date(2026, 11, 30))),
        ("二十天前", days(date(2026, 11, 12))),
        ("两个星期前", days(date(2026, 11, 16), date(2026, 11, 22))),
        ("3个月前", days(date(2026, 9, 1), date(2026, 9, 30))),
        ("上周三", days(date(2026, 11, 25))),
        ("上个月", days(date(2026, 11, 1), date(2026, 11, 30))),
        ("去年", days(date(2025, 1, 1), date(2025, 12, 31))),
        ("先週の水曜日", days(date(2026, 11, 25))),
        ("一昨日", days(date(2026, 11, 30))),
        ("3ヶ月前", days(date(2026, 9, 1), date(2026, 9, 30))),
        ("¿qué decidimos ayer?", days(date(2026, 12, 1))),
        ("hace una semana", days(date(2026, 11, 23), date(2026, 11, 29))),
        ("el lunes pasado", days(date(2026, 11, 30))),
        ("el mes pasado", days(date(2026, 11, 1), date(2026, 11, 30))),
        # Not relative days: a part of a named month, "last time", a bare weekday, a plan, a
        # year or a month before which, and words that hold "ayer".
        ("in the last week of October 2023", []),
        ("like we said last time, on Monday", []),
        ("what should I do tomorrow?", []),
        ("2023年前", []),
        ("5月前", []),
        ("the prayer layer", []),
    ],
)
def test_it_reads_the_days_a_query_names_relative_to_the_moment_of_asking(query, spans):
    assert relative_spans(query, ASKED) == spans


DATE_PIECES = [
    *("0000", "0001", "2024", "9999", "0", "1", "12", "13", "16th", "29", "31"),
    *("年", "月", "日", "底", "初", "中旬", " ", ",", "/", ".", "-"),
    *("in ", "of ", "the ", "end ", "mid-", "early ", "last week ", "de ", "finales "),
    *("May", "October", "Feb", "february", "mayo"),
    *("yesterday", "ago", "last ", "week", "month", "year", "days ", "a ", "hace ", "pasado"),
    *("上周", "三", "十", "个", "前", "天", "去年", "先週", "の", "曜"),
]
# Rows from the first to the last year a datetime holds, and none.
EPOCHS = np.array(
    [datetime(1, 1, 1, tzinfo=UTC).timestamp(), 0.0, datetime(9999, 12, 31, tzinfo=UTC).timestamp()]
)


@given(
    st.lists(st.sampled_from(DATE_PIECES), max_size=10).map("".join),
    st.datetimes(timezones=st.just(UTC)),
)
def test_it_reads_any_mix_of_date_pieces_without_raising(query, asked_at):
    # A query is untrusted: no arrangement of years, months, days and part words may raise, asked
    # at any moment a datetime holds, and every period read is a real stretch of days.
    days_named(query)
    monthdays_named(query)
    assert all(first <= last for first, last in periods_named(query))
    assert all(1 <= month <= 12 for month, _ in monthperiods_named(query))
    assert all(first <= last for first, last in relative_spans(query, asked_at.date()))
    priors = time_priors(
        query=query, asked_at=asked_at, occurred_at=EPOCHS, mentions=np.ones(3, dtype=bool)
    )
    if priors is not None:
        assert np.all(np.isfinite(priors(np.arange(3))))


BOWLING = [("James", "I went bowling with my brother and got two strikes.")]


def bowling_on(scope, moments, callbacks) -> dict[datetime, int]:
    """One session at each moment, each with the same line of James's: the turns differ only in
    when they were said."""
    return {
        when: record(scope, when.isoformat(), BOWLING, when, callbacks)[0].pk for when in moments
    }


def priors_of(scope, turns: dict[datetime, int], query: str) -> dict[datetime, float]:
    """The time prior turn_search gives each of `turns` for `query`."""
    hits = turn_search(query=query, scope_ids=[scope.pk], limit=len(turns))
    assert all(shares_sum_to_score(hit) for hit in hits)
    prior_of = {hit.turn.pk: hit.why["boosts"]["priors"] for hit in hits}
    return {when: prior_of[pk] for when, pk in turns.items()}


@pytest.fixture
def bowling(project_scope, django_capture_on_commit_callbacks):
    """One session in March: James talks about bowling; one turn says when he went."""
    return record(
        project_scope,
        "bowling",
        [
            ("James", "Bowling with my brother is fun."),
            ("John", "Nice! Do you have your own ball?"),
            ("James", "Yesterday I went bowling with my brother and got two strikes."),
            ("John", "Two strikes, well done!"),
        ],
        datetime(2022, 3, 17, 15, 0, tzinfo=UTC),
        django_capture_on_commit_callbacks,
    )


# On PostgreSQL, 0 makes the native backend rank a candidate view (mentions_time read from the
# stored own terms in SQL) instead of every row of the scope; the in-process index ignores it.
@pytest.mark.parametrize("exact_rows", [2000, 0])
def test_it_prefers_the_turn_that_says_when_for_a_when_question(
    project_scope, bowling, settings, exact_rows
):
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = exact_rows
    # James is a speaker the query names, and a turn asks: those priors have their own tests.
    settings.TIDELINE_SEARCH_PRIOR_SPEAKER = 0.0
    settings.TIDELINE_SEARCH_PRIOR_QUESTION = 0.0
    query = "When did James go bowling with his brother?"
    settings.TIDELINE_SEARCH_PRIOR_WHEN = 0.0
    without = turn_search(query=query, scope_ids=[project_scope.pk], limit=4)
    assert without[0].turn.pk == bowling[0].pk
    assert all(hit.why["boosts"]["priors"] == 0 for hit in without)

    settings.TIDELINE_SEARCH_PRIOR_WHEN = 0.15
    hits = turn_search(query=query, scope_ids=[project_scope.pk], limit=4)
    assert hits[0].turn.pk == bowling[2].pk
    priors = {hit.turn.pk: hit.why["boosts"]["priors"] for hit in hits}
    assert priors[bowling[2].pk] == pytest.approx(0.15)
    assert priors[bowling[0].pk] == 0
    assert all(shares_sum_to_score(hit) for hit in hits)

    # The same words, not asked as a question about time, get no prior.
    plain = turn_search(query="James bowling brother", scope_ids=[project_scope.pk], limit=4)
    assert all(hit.why["boosts"]["priors"] == 0 for hit in plain)


@pytest.mark.parametrize("exact_rows", [2000, 0])
@pytest.mark.parametrize(
    "query",
    [
        "What was James doing on March 16, 2022?",
        # Without its year, the day is read in every year around the turns ranked.
        "What was James doing on March 16th?",
        "James 3月16日在做什么？",
    ],
)
def test_it_prefers_the_turns_of_a_named_day_and_the_week_after(
    project_scope, settings, django_capture_on_commit_callbacks, exact_rows, query
):
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = exact_rows
    settings.TIDELINE_SEARCH_PRIOR_SPEAKER = 0.0
    line = [("James", "I went bowling with my brother and got two strikes.")]
    callbacks = django_capture_on_commit_callbacks
    day_after = record(project_scope, "march", line, datetime(2022, 3, 17, tzinfo=UTC), callbacks)
    record(project_scope, "june", line, datetime(2022, 6, 1, tzinfo=UTC), callbacks)
    record(project_scope, "before", line, datetime(2022, 3, 1, tzinfo=UTC), callbacks)

    hits = turn_search(query=query, scope_ids=[project_scope.pk], limit=3)
    assert hits[0].turn.pk == day_after[0].pk
    # A day after the named day: six sevenths of the prior; weeks away: none.
    assert hits[0].why["boosts"]["priors"] == pytest.approx(0.4 * 6 / 7, abs=1e-4)
    assert [hit.why["boosts"]["priors"] for hit in hits[1:]] == [0, 0]
    assert all(shares_sum_to_score(hit) for hit in hits)

    settings.TIDELINE_SEARCH_PRIOR_DAY = 0.0
    flat = turn_search(query=query, scope_ids=[project_scope.pk], limit=3)
    assert all(hit.why["boosts"]["priors"] == 0 for hit in flat)


def test_it_reads_a_day_named_without_its_year_in_each_year_and_across_new_year(
    project_scope, django_capture_on_commit_callbacks, settings
):
    settings.TIDELINE_SEARCH_PRIOR_SPEAKER = 0.0
    moments = [datetime(2021, 12, 31, tzinfo=UTC), datetime(2022, 3, 1, tzinfo=UTC)]
    moments.append(datetime(2023, 1, 2, tzinfo=UTC))
    turns = bowling_on(project_scope, moments, django_capture_on_commit_callbacks)
    # On the day itself in 2021; two days after it in 2022's December 31st, a year later.
    assert priors_of(project_scope, turns, "What was James doing on December 31st?") == {
        datetime(2021, 12, 31, tzinfo=UTC): pytest.approx(0.4),
        datetime(2022, 3, 1, tzinfo=UTC): 0,
        datetime(2023, 1, 2, tzinfo=UTC): pytest.approx(0.4 * 5 / 7, abs=1e-4),
    }


@pytest.mark.parametrize("exact_rows", [2000, 0])
def test_it_prefers_the_turns_of_a_named_month_and_the_week_after(
    project_scope, settings, django_capture_on_commit_callbacks, exact_rows
):
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = exact_rows
    settings.TIDELINE_SEARCH_PRIOR_SPEAKER = 0.0
    moments = [datetime(2023, month, day, tzinfo=UTC) for month, day in ((9, 20), (10, 15))]
    moments += [datetime(2023, month, day, tzinfo=UTC) for month, day in ((10, 28), (11, 3))]
    moments.append(datetime(2023, 12, 1, tzinfo=UTC))
    turns = bowling_on(project_scope, moments, django_capture_on_commit_callbacks)
    # The whole month, then three days after its last day: four sevenths of the prior.
    assert priors_of(project_scope, turns, "What was James doing in October 2023?") == {
        datetime(2023, 9, 20, tzinfo=UTC): 0,
        datetime(2023, 10, 15, tzinfo=UTC): pytest.approx(0.2),
        datetime(2023, 10, 28, tzinfo=UTC): pytest.approx(0.2),
        datetime(2023, 11, 3, tzinfo=UTC): pytest.approx(0.2 * 4 / 7, abs=1e-4),
        datetime(2023, 12, 1, tzinfo=UTC): 0,
    }
    # Its last third only.
    assert priors_of(project_scope, turns, "James in the last week of October 2023?") == {
        datetime(2023, 9, 20, tzinfo=UTC): 0,
        datetime(2023, 10, 15, tzinfo=UTC): 0,
        datetime(2023, 10, 28, tzinfo=UTC): pytest.approx(0.2),
        datetime(2023, 11, 3, tzinfo=UTC): pytest.approx(0.2 * 4 / 7, abs=1e-4),
        datetime(2023, 12, 1, tzinfo=UTC): 0,
    }
    settings.TIDELINE_SEARCH_PRIOR_PERIOD = 0.0
    flat = priors_of(project_scope, turns, "What was James doing in October 2023?")
    assert set(flat.values()) == {0}


def test_it_reads_a_month_named_without_its_year_in_each_year(
    project_scope, django_capture_on_commit_callbacks, settings
):
    settings.TIDELINE_SEARCH_PRIOR_SPEAKER = 0.0
    moments = [datetime(2022, 10, 28, tzinfo=UTC), datetime(2023, 6, 1, tzinfo=UTC)]
    moments.append(datetime(2023, 10, 5, tzinfo=UTC))
    turns = bowling_on(project_scope, moments, django_capture_on_commit_callbacks)
    # The last ten days of October in both years; the 5th is in its first third.
    assert priors_of(project_scope, turns, "What was James doing at the end of October?") == {
        datetime(2022, 10, 28, tzinfo=UTC): pytest.approx(0.2),
        datetime(2023, 6, 1, tzinfo=UTC): 0,
        datetime(2023, 10, 5, tzinfo=UTC): 0,
    }


@pytest.mark.parametrize("exact_rows", [2000, 0])
def test_it_prefers_the_turns_of_a_day_named_relative_to_the_moment_of_asking(
    project_scope, django_capture_on_commit_callbacks, settings, exact_rows
):
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = exact_rows
    settings.TIDELINE_SEARCH_PRIOR_SPEAKER = 0.0
    moments = [datetime(2022, 3, day, tzinfo=UTC) for day in (10, 16, 17)]
    turns = bowling_on(project_scope, moments, django_capture_on_commit_callbacks)
    # Searched up to March 18th, or asked then, yesterday is the 17th, and the week before it
    # March 7th to 13th.
    until = datetime(2022, 3, 18, 9, tzinfo=UTC)
    for query, expected in (
        ("What was James doing yesterday?", (0, 0, 0.4)),
        ("What was James doing the day before yesterday?", (0, 0.4, 0.4 * 6 / 7)),
        ("What was James doing last week?", (0.2, 0.2 * 4 / 7, 0.2 * 3 / 7)),
    ):
        for moment in ({"until": until}, {"asked_at": until}):
            hits = turn_search(query=query, scope_ids=[project_scope.pk], limit=3, **moment)
            prior_of = {hit.turn.pk: hit.why["boosts"]["priors"] for hit in hits}
            assert all(shares_sum_to_score(hit) for hit in hits)
            assert [prior_of[turns[when]] for when in moments] == pytest.approx(expected, abs=1e-4)

    # A query that names its date counts from it: the 16th and the week after it, as named.
    hits = turn_search(
        query="What was James doing last week, as he said on March 16, 2022?",
        scope_ids=[project_scope.pk],
        until=until,
    )
    prior_of = {hit.turn.pk: hit.why["boosts"]["priors"] for hit in hits}
    assert [prior_of[turns[when]] for when in moments] == pytest.approx(
        (0, 0.4, 0.4 * 6 / 7), abs=1e-4
    )

    # Asked live, yesterday is the day before now: March 2022 is long past.
    now = datetime.now(UTC)
    recent = bowling_on(
        project_scope, [now - timedelta(days=1)], django_capture_on_commit_callbacks
    )
    hits = turn_search(query="What was James doing yesterday?", scope_ids=[project_scope.pk])
    assert hits[0].turn.pk == next(iter(recent.values()))
    assert [hit.why["boosts"]["priors"] for hit in hits[1:]] == [0, 0, 0]


@pytest.fixture
def destress(project_scope, django_capture_on_commit_callbacks):
    """Caroline and Melanie talk about running; Caroline's reply repeats Melanie's words."""
    return record(
        project_scope,
        "running",
        [
            ("Melanie", "I've been running farther to clear my head."),
            (
                "Caroline",
                "Running after work to clear your head, Melanie? After work I clear my head too.",
            ),
            ("Melanie", "Thanks! Pottery helps me too."),
        ],
        datetime(2023, 7, 12, tzinfo=UTC),
        django_capture_on_commit_callbacks,
    )


@pytest.mark.parametrize("exact_rows", [2000, 0])
def test_it_prefers_the_turns_of_the_speaker_a_question_names(
    project_scope, destress, settings, exact_rows
):
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = exact_rows
    query = "What does Melanie do after work to clear her head?"
    settings.TIDELINE_SEARCH_PRIOR_SPEAKER = 0.0
    without = turn_search(query=query, scope_ids=[project_scope.pk], limit=3)
    assert without[0].turn.pk == destress[1].pk

    settings.TIDELINE_SEARCH_PRIOR_SPEAKER = 0.15
    hits = turn_search(query=query, scope_ids=[project_scope.pk], limit=3)
    assert hits[0].turn.pk == destress[0].pk
    priors = {hit.turn.speaker: hit.why["boosts"]["priors"] for hit in hits}
    assert priors == {"Melanie": pytest.approx(0.15), "Caroline": 0}
    assert all(shares_sum_to_score(hit) for hit in hits)

    # A name one letter off (Melany) is read as the speaker's, as the lexical match reads it.
    variant = turn_search(
        query="What does Melany do to clear her head?", scope_ids=[project_scope.pk], limit=3
    )
    assert variant[0].turn.speaker == "Melanie"
    assert variant[0].why["boosts"]["priors"] == pytest.approx(0.15)


def test_it_never_reads_a_role_as_a_named_speaker(
    project_scope, django_capture_on_commit_callbacks
):
    record(
        project_scope,
        "roles",
        [
            ("User", "Can you assist me with the deploy script?"),
            ("Assistant", "Sure, the user wants the deploy script: here it is."),
        ],
        datetime(2024, 1, 5, tzinfo=UTC),
        django_capture_on_commit_callbacks,
    )
    hits = turn_search(
        query="what did the user ask the assistant about the deploy script?",
        scope_ids=[project_scope.pk],
    )
    assert len(hits) == 2
    assert all(hit.why["boosts"]["priors"] == 0 for hit in hits)


@pytest.mark.parametrize("exact_rows", [2000, 0])
def test_it_prefers_the_opening_turn_of_the_speaker_a_question_names(
    project_scope, settings, exact_rows, django_capture_on_commit_callbacks
):
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = exact_rows
    settings.TIDELINE_SEARCH_PRIOR_SPEAKER = 0.0
    news = "I won a Valorant tournament last Saturday."
    when = datetime(2023, 9, 2, tzinfo=UTC)
    later = record(
        project_scope,
        "later",
        [("Joanna", "Hi!"), ("Nate", news)],
        when,
        django_capture_on_commit_callbacks,
    )
    # The opening has a word more ("So,"), so without the prior the other turn ranks first.
    opening = record(
        project_scope,
        "opening",
        [("Nate", f"So, {news}"), ("Joanna", "Hi!")],
        when,
        django_capture_on_commit_callbacks,
    )
    query = "What tournament did Nate win?"
    without = turn_search(query=query, scope_ids=[project_scope.pk], limit=4)
    assert without[0].turn.pk == later[1].pk

    settings.TIDELINE_SEARCH_PRIOR_OPENING = 0.04
    hits = turn_search(query=query, scope_ids=[project_scope.pk], limit=4)
    assert hits[0].turn.pk == opening[0].pk
    priors = {hit.turn.pk: hit.why["boosts"]["priors"] for hit in hits}
    # Joanna also opens a session, but the question names Nate.
    assert priors == {
        opening[0].pk: pytest.approx(0.04),
        later[1].pk: 0,
        later[0].pk: 0,
        opening[1].pk: 0,
    }
    assert all(shares_sum_to_score(hit) for hit in hits)

    unnamed = turn_search(
        query="Who won a Valorant tournament?", scope_ids=[project_scope.pk], limit=4
    )
    assert all(hit.why["boosts"]["priors"] == 0 for hit in unnamed)


@pytest.fixture
def pottery(project_scope, django_capture_on_commit_callbacks):
    """Caroline asks how Melanie took up pottery, in the question's words; Melanie says how."""
    return record(
        project_scope,
        "pottery",
        [
            ("Caroline", "Your pottery is lovely, Melanie! How did you get into pottery?"),
            ("Melanie", "My sister gave me a pottery class for my birthday and I got hooked."),
        ],
        datetime(2023, 8, 2, tzinfo=UTC),
        django_capture_on_commit_callbacks,
    )


@pytest.mark.parametrize("exact_rows", [2000, 0])
def test_it_prefers_a_turn_that_states_to_one_that_asks_for_a_question(
    project_scope, pottery, settings, exact_rows
):
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = exact_rows
    settings.TIDELINE_SEARCH_PRIOR_SPEAKER = 0.0
    query = "How did Melanie get into pottery?"
    settings.TIDELINE_SEARCH_PRIOR_QUESTION = 0.0
    without = turn_search(query=query, scope_ids=[project_scope.pk], limit=2)
    assert without[0].turn.pk == pottery[0].pk

    settings.TIDELINE_SEARCH_PRIOR_QUESTION = 0.1
    hits = turn_search(query=query, scope_ids=[project_scope.pk], limit=2)
    assert hits[0].turn.pk == pottery[1].pk
    priors = {hit.turn.pk: hit.why["boosts"]["priors"] for hit in hits}
    assert priors == {pottery[0].pk: pytest.approx(-0.1), pottery[1].pk: 0}
    assert all(shares_sum_to_score(hit) for hit in hits)

    # The same words as a request, not a question, leave the asking turn alone; so does a
    # question that names nobody (a user asking an assistant).
    plain = turn_search(
        query="Tell me how Melanie got into pottery", scope_ids=[project_scope.pk], limit=2
    )
    assert all(hit.why["boosts"]["priors"] == 0 for hit in plain)
    unnamed = turn_search(
        query="How did she get into pottery?", scope_ids=[project_scope.pk], limit=2
    )
    assert all(hit.why["boosts"]["priors"] == 0 for hit in unnamed)


@pytest.mark.parametrize("exact_rows", [2000, 0])
@pytest.mark.parametrize(
    ("query", "lines"),
    [
        (
            "How many times did Nate go bowling?",
            [
                ("Nate", "Bowling is fun, I love bowling and bowling alleys."),
                ("Nate", "I went bowling twice last month."),
            ],
        ),
        (
            "Where did Nate go camping?",
            [
                ("Nate", "Camping is fun, I love camping and camping trips."),
                ("Nate", "We went camping at Yosemite."),
            ],
        ),
    ],
)
def test_it_prefers_the_turn_that_holds_the_kind_of_answer_asked_for(
    project_scope, settings, django_capture_on_commit_callbacks, exact_rows, query, lines
):
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = exact_rows
    settings.TIDELINE_SEARCH_PRIOR_SPEAKER = 0.0
    stored = record(
        project_scope,
        "answer",
        lines,
        datetime(2023, 5, 2, tzinfo=UTC),
        django_capture_on_commit_callbacks,
    )
    settings.TIDELINE_SEARCH_PRIOR_ANSWER = 0.0
    without = turn_search(query=query, scope_ids=[project_scope.pk], limit=2)
    assert without[0].turn.pk == stored[0].pk

    settings.TIDELINE_SEARCH_PRIOR_ANSWER = 0.15
    hits = turn_search(query=query, scope_ids=[project_scope.pk], limit=2)
    assert hits[0].turn.pk == stored[1].pk
    priors = {hit.turn.pk: hit.why["boosts"]["priors"] for hit in hits}
    assert priors == {stored[0].pk: 0, stored[1].pk: pytest.approx(0.15)}
    assert all(shares_sum_to_score(hit) for hit in hits)

    # The same words in a sentence that does not open by asking get no prior.
    plain = turn_search(
        query=f"Tell me about it: {query.lower()}", scope_ids=[project_scope.pk], limit=2
    )
    assert all(hit.why["boosts"]["priors"] == 0 for hit in plain)


@pytest.mark.parametrize("exact_rows", [2000, 0])
def test_it_prefers_the_turn_that_says_more_to_a_short_one_with_the_same_words(
    project_scope, settings, django_capture_on_commit_callbacks, exact_rows
):
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = exact_rows
    settings.TIDELINE_SEARCH_PRIOR_SPEAKER = 0.0
    stored = record(
        project_scope,
        "length",
        [
            ("Nate", "Adopted a turtle!"),
            (
                "Nate",
                "I adopted a turtle named Shelly from the rescue by the lake; she eats lettuce "
                "and basks under a lamp all afternoon.",
            ),
        ],
        datetime(2023, 5, 2, tzinfo=UTC),
        django_capture_on_commit_callbacks,
    )
    query = "Did Nate adopt a turtle?"
    without = turn_search(query=query, scope_ids=[project_scope.pk], limit=2)
    assert without[0].turn.pk == stored[0].pk

    settings.TIDELINE_SEARCH_PRIOR_LENGTH = 0.08
    hits = turn_search(query=query, scope_ids=[project_scope.pk], limit=2)
    assert hits[0].turn.pk == stored[1].pk
    priors = {hit.turn.pk: hit.why["boosts"]["priors"] for hit in hits}
    # A turn's own terms are those of its text and its speaker's name.
    own = {turn.pk: len(set(text_terms(f"{turn.speaker} {turn.content}"))) for turn in stored}
    assert priors == {pk: pytest.approx(0.08 * math.log1p(own[pk]), abs=1e-4) for pk in own}
    assert all(shares_sum_to_score(hit) for hit in hits)


def test_it_stops_growing_the_length_prior_at_twenty_terms(
    project_scope, settings, django_capture_on_commit_callbacks
):
    settings.TIDELINE_SEARCH_PRIOR_SPEAKER = 0.0
    settings.TIDELINE_SEARCH_PRIOR_LENGTH = 0.08
    words = [f"turtle{chr(97 + a)}{chr(97 + b)}" for a in range(6) for b in range(6)]
    stored = record(
        project_scope,
        "essay",
        [("Nate", "turtle " + " ".join(words[:24])), ("Nate", "turtle " + " ".join(words))],
        datetime(2023, 5, 2, tzinfo=UTC),
        django_capture_on_commit_callbacks,
    )
    hits = turn_search(query="turtle", scope_ids=[project_scope.pk], limit=2)
    priors = {hit.turn.pk: hit.why["boosts"]["priors"] for hit in hits}
    assert priors == {turn.pk: pytest.approx(0.08 * math.log1p(20), abs=1e-4) for turn in stored}
