"""A turn that replies to another person's question gains a share of the question's score: the
question holds the words ("What genre is your first screenplay?"), the reply the answer ("A mix of
drama and romance!")."""

from datetime import UTC, datetime

import pytest

from memory.search import service, turn_search
from tests.search.turns import record
from tests.search.why import shares_sum_to_score

WHEN = datetime(2023, 3, 4, tzinfo=UTC)
QUERY = "What genre is Joanna's first screenplay?"
GENRE = [
    ("Joanna", "I finished my first screenplay last week!"),
    ("Nate", "Congrats Joanna! What genre is your first screenplay?"),
    ("Joanna", "A mix of drama and romance!"),
    ("Nate", "Sounds fun."),
]


def by_turn(query, scope):
    return {hit.turn.pk: hit for hit in turn_search(query=query, scope_ids=[scope.pk], limit=10)}


@pytest.mark.parametrize("exact_rows", [2000, 0])
def test_it_lends_a_reply_a_share_of_the_question_it_answers(
    project_scope, settings, exact_rows, django_capture_on_commit_callbacks
):
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = exact_rows
    turns = record(project_scope, "genre", GENRE, WHEN, django_capture_on_commit_callbacks)
    hits = by_turn(QUERY, project_scope)
    question, reply = hits[turns[1].pk], hits[turns[2].pk]
    assert reply.why["boosts"]["reply"] == pytest.approx(0.05 * question.score, abs=1e-3)
    # The question itself, the opening and the turn after the reply follow no question.
    assert [hits[turn.pk].why["boosts"]["reply"] for turn in turns] == [
        0,
        0,
        reply.why["boosts"]["reply"],
        0,
    ]
    assert all(shares_sum_to_score(hit) for hit in hits.values())

    settings.TIDELINE_SEARCH_REPLY_SHARE = 0.0
    plain = by_turn(QUERY, project_scope)
    assert "reply" not in plain[turns[2].pk].why["boosts"]
    assert plain[turns[2].pk].score == pytest.approx(
        reply.score - reply.why["boosts"]["reply"], abs=1e-3
    )
    assert plain[turns[1].pk].score == pytest.approx(question.score, abs=1e-4)


@pytest.mark.parametrize(
    "lines",
    [
        # A user and an assistant are roles, not people: RealMem's recall fell when they lent.
        [
            ("user", "What genre is my first screenplay?"),
            ("assistant", "A mix of drama and romance!"),
        ],
        # One person asking and going on is no reply.
        [("Nate", "What genre is your first screenplay?"), ("Nate", "A mix of drama and romance!")],
        # A question that is not asked (no question mark) lends nothing.
        [
            ("Nate", "Tell me the genre of your first screenplay."),
            ("Joanna", "A mix of drama and romance!"),
        ],
    ],
)
def test_it_lends_only_between_two_named_people_after_a_question(
    project_scope, lines, django_capture_on_commit_callbacks
):
    turns = record(project_scope, "genre", lines, WHEN, django_capture_on_commit_callbacks)
    hits = by_turn(QUERY, project_scope)
    assert hits[turns[1].pk].why["boosts"]["reply"] == 0


def test_it_lends_only_from_the_best_questions(
    project_scope, monkeypatch, django_capture_on_commit_callbacks
):
    turns = record(
        project_scope,
        "two",
        [
            ("Nate", "Congrats Joanna! What genre is your first screenplay?"),
            ("Joanna", "A mix of drama and romance!"),
            ("Nate", "How was the weather on the trip?"),
            ("Joanna", "Rainy, all week."),
        ],
        WHEN,
        django_capture_on_commit_callbacks,
    )
    hits = by_turn(QUERY, project_scope)
    assert hits[turns[1].pk].why["boosts"]["reply"] > 0
    assert hits[turns[3].pk].why["boosts"]["reply"] > 0

    # With room for one, only the question about the screenplay lends.
    monkeypatch.setattr(service, "REPLY_QUESTIONS", 1)
    hits = by_turn(QUERY, project_scope)
    assert hits[turns[1].pk].why["boosts"]["reply"] > 0
    assert hits[turns[3].pk].why["boosts"]["reply"] == 0


def test_it_lends_what_the_question_scores_once_its_literals_are_checked(
    project_scope, settings, django_capture_on_commit_callbacks
):
    # The question holds both words of "blue whale" but not the phrase: its keyword boost is
    # provisional until its text is read, and its reply must not keep a share of it.
    lines = [
        (
            "Nate",
            "Joanna, on that long grey ferry ride back from the island last spring, with the "
            "rain and the cold wind and the kids asleep, what colour was the whale, blue?",
        ),
        ("Joanna", "Blue whale! A real blue whale, the blue whale of my dreams."),
    ]
    lines += [("Tim", f"A blue whale, {n}.") for n in ("one", "two", "three", "four")]
    # Without the length prior the long question's bound is only the fourth best.
    settings.TIDELINE_SEARCH_PRIOR_LENGTH = 0.0
    turns = record(project_scope, "whale", lines, WHEN, django_capture_on_commit_callbacks)
    # With room for one, only the best three by bound are verified at first, and the question,
    # fourth, is not among them; the reply's bound holds the question's provisional boost.
    best = turn_search(query='"blue whale"', scope_ids=[project_scope.pk], limit=1)
    every = turn_search(query='"blue whale"', scope_ids=[project_scope.pk], limit=len(turns))
    assert [(hit.turn.pk, round(hit.score, 4)) for hit in best] == [
        (every[0].turn.pk, round(every[0].score, 4))
    ]
    hits = {hit.turn.pk: hit for hit in every}
    question, reply = hits[turns[0].pk], hits[turns[1].pk]
    assert question.why["boosts"]["keyword"] == 0
    assert reply.why["boosts"]["reply"] == pytest.approx(0.05 * question.score, abs=1e-3)
