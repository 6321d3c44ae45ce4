from datetime import UTC, datetime

import pytest

from memory.search import turn_search
from memory.search.sessions import session_search
from memory.services.errors import InvalidInput
from memory.services.timeline import TurnInput, session_start, turns_record

WHEN = datetime(2024, 3, 10, tzinfo=UTC)
FILLER = [
    "We watched a film on Friday night.",
    "The weather was cold and grey all week.",
    "My cousin called about the wedding.",
    "I finished the crossword this morning.",
    "The train was late again today.",
]


def record(scope, external_id, lines, when, callbacks):
    session = session_start(runtime="test", external_id=external_id, scope_id=scope.pk)
    with callbacks(execute=True):
        turns_record(
            session_id=session.pk,
            turns=[
                TurnInput(role=role, content=text, speaker=role, occurred_at=when)
                for role, text in lines
            ],
        )
    return session


@pytest.fixture
def plan_and_aside(project_scope, django_capture_on_commit_callbacks):
    """A session that works through a garden plan, a few of its words at a time with small talk in
    between, and one that names all the plan's words in a single turn, among small talk."""
    plan_lines = [
        "Let's make a plan for the allotment this spring.",
        "First, measure the raised beds along the fence.",
        "Order heirloom tomato seeds before March ends.",
        "The hose reaches the far corner, so drip watering works for the beds.",
        "Compost goes into the raised beds two weeks before sowing.",
        "The tomato seeds need the drip watering most; check the hose.",
        "Great, the allotment plan is taking shape: compost first.",
    ]
    lines = []
    for number, text in enumerate(plan_lines):
        lines.append(("user" if number % 2 else "assistant", text))
        lines += [("user", FILLER[number % 5]), ("assistant", FILLER[(number + 1) % 5])]
    plan = record(project_scope, "plan", lines, WHEN, django_capture_on_commit_callbacks)
    small_talk = [("user", FILLER[number % 5]) for number in range(12)]
    aside = record(
        project_scope,
        "aside",
        [
            *small_talk[:6],
            (
                "assistant",
                "Heirloom tomato seeds, raised beds measured, compost, drip watering and the hose: "
                "my allotment plan, in one line.",
            ),
            *small_talk[6:],
        ],
        WHEN,
        django_capture_on_commit_callbacks,
    )
    record(
        project_scope,
        "unrelated",
        [("user", text) for text in FILLER],
        WHEN,
        django_capture_on_commit_callbacks,
    )
    return plan, aside


QUESTION = (
    "What's the next step of the allotment plan? I have the raised beds measured, the compost "
    "is in, and the heirloom tomato seeds arrived; what about the drip watering and the hose?"
)


# On PostgreSQL, 0 makes the native backend rank a candidate view instead of every row of the
# scope; the in-process index ignores it.
@pytest.mark.parametrize("exact_rows", [2000, 0])
def test_it_ranks_the_session_that_holds_the_plan_above_one_that_names_it_once(
    project_scope, plan_and_aside, settings, exact_rows
):
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = exact_rows
    plan, aside = plan_and_aside
    hits = session_search(query=QUESTION, scope_ids=[project_scope.pk], limit=3)
    assert [hit.session.pk for hit in hits[:2]] == [plan.pk, aside.pk]
    best = hits[0]
    assert {"allot", "compost", "hose"} <= set(best.why["matched_terms"])
    assert best.why["lexical_share"] > hits[1].why["lexical_share"]
    # Its evidence is its own best turns, best first.
    assert best.turns and all(turn.turn.session_id == plan.pk for turn in best.turns)
    scores = [turn.score for turn in best.turns]
    assert scores == sorted(scores, reverse=True)


def test_it_lists_sessions_in_score_order_with_why_matching_the_score(
    project_scope, plan_and_aside
):
    hits = session_search(query="tomato seeds", scope_ids=[project_scope.pk], limit=10)
    assert hits
    scores = [hit.score for hit in hits]
    assert scores == sorted(scores, reverse=True)
    for hit in hits:
        assert hit.why["score"] == round(hit.score, 4)
        assert hit.why["score"] == pytest.approx(
            hit.why["lexical_share"]
            + hit.why["semantic_share"]
            + hit.why["best_turn_share"]
            + hit.why["superseded_share"],
            abs=3e-4,
        )


def test_it_scores_whole_sessions_where_turn_search_scores_one_turn(project_scope, plan_and_aside):
    plan, aside = plan_and_aside
    # The single turn that names the plan's words together is the best turn...
    first_turn = turn_search(query=QUESTION, scope_ids=[project_scope.pk], limit=1)[0]
    assert first_turn.turn.session_id == aside.pk
    # ...but the conversation about the plan is the plan session.
    assert session_search(query=QUESTION, scope_ids=[project_scope.pk])[0].session.pk == plan.pk


def test_it_never_reaches_a_session_outside_the_callers_scopes(
    project_scope, other_project_scope, plan_and_aside, django_capture_on_commit_callbacks
):
    elsewhere = record(
        other_project_scope,
        "elsewhere",
        [("user", "My allotment plan: tomato seeds, raised beds, compost and drip watering.")],
        WHEN,
        django_capture_on_commit_callbacks,
    )
    mine = session_search(query=QUESTION, scope_ids=[project_scope.pk], limit=10)
    assert elsewhere.pk not in {hit.session.pk for hit in mine}
    theirs = session_search(query=QUESTION, scope_ids=[other_project_scope.pk], limit=10)
    assert [hit.session.pk for hit in theirs] == [elsewhere.pk]
    assert session_search(query=QUESTION, scope_ids=[]) == []


def test_it_counts_only_turns_inside_the_time_bounds(
    project_scope, django_capture_on_commit_callbacks
):
    january = record(
        project_scope,
        "january",
        [("user", "Renew the harbour permit at the port office.")],
        datetime(2024, 1, 10, tzinfo=UTC),
        django_capture_on_commit_callbacks,
    )
    march = record(
        project_scope,
        "march",
        [("user", "The harbour permit renewal needs a new form.")],
        datetime(2024, 3, 10, tzinfo=UTC),
        django_capture_on_commit_callbacks,
    )
    scope = [project_scope.pk]
    february = datetime(2024, 2, 1, tzinfo=UTC)

    def found(**bounds):
        return {
            hit.session.pk
            for hit in session_search(query="harbour permit", scope_ids=scope, **bounds)
        }

    assert found() == {january.pk, march.pk}
    assert found(since=february) == {march.pk}
    assert found(until=february) == {january.pk}


TRIP_EARLIER = [
    ("user", "Let's plan the packing for our Lisbon trip in May."),
    ("assistant", "Packing list for Lisbon: passports, phone chargers, sunscreen, walking shoes."),
    ("user", "Add the travel adapter and the rain jackets to the Lisbon packing list."),
    ("assistant", "Added: travel adapter, rain jackets. The Lisbon packing list still grows."),
]
TRIP_LATER = [
    ("user", "Back to the Lisbon trip packing: passports, chargers and the travel adapter are in."),
    ("assistant", "Good. Left on the packing list: sunscreen, walking shoes, the rain jackets."),
    ("user", "Walking shoes and sunscreen are packed too."),
    ("assistant", "Then only the rain jackets are left to pack for Lisbon."),
]
TRIP_QUESTION = (
    "What is still left on the Lisbon packing list, the travel adapter and rain jackets?"
)


@pytest.mark.parametrize("exact_rows", [2000, 0])
def test_it_ranks_a_newer_session_on_the_same_topic_above_the_older_one(
    project_scope, other_project_scope, django_capture_on_commit_callbacks, settings, exact_rows
):
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = exact_rows
    callbacks = django_capture_on_commit_callbacks
    earlier = record(project_scope, "earlier", TRIP_EARLIER, WHEN, callbacks)
    later = record(project_scope, "later", TRIP_LATER, datetime(2024, 3, 14, tzinfo=UTC), callbacks)
    elsewhere = record(
        other_project_scope, "elsewhere", TRIP_LATER, datetime(2024, 3, 20, tzinfo=UTC), callbacks
    )
    aside = record(project_scope, "aside", [("user", text) for text in FILLER], WHEN, callbacks)
    scope = [project_scope.pk]

    settings.TIDELINE_SEARCH_PRIOR_SUPERSEDED = 0.0
    plain = session_search(query=TRIP_QUESTION, scope_ids=scope, limit=5)
    # The earlier session names more of the question's words...
    assert [hit.session.pk for hit in plain[:2]] == [earlier.pk, later.pk]
    # ...but the later one on the same topic holds where the packing got to: a penalty larger
    # than the gap between them puts it first.
    penalty = round(plain[0].score - plain[1].score + 0.01, 3)
    settings.TIDELINE_SEARCH_PRIOR_SUPERSEDED = penalty
    hits = session_search(query=TRIP_QUESTION, scope_ids=scope, limit=5)
    assert [hit.session.pk for hit in hits[:2]] == [later.pk, earlier.pk]
    older = hits[1].why
    assert older["superseded_by"] == later.pk
    assert older["superseded_share"] == -penalty
    assert older["score"] == pytest.approx(plain[0].why["score"] - penalty, abs=2e-4)
    # Nothing newer on its topic among what this caller may see; another project's copy of the
    # later session, newer still, is never compared.
    assert hits[0].why["superseded_by"] is None
    assert elsewhere.pk not in {hit.why["superseded_by"] for hit in hits}
    assert all(hit.why["superseded_by"] is None for hit in hits if hit.session.pk == aside.pk)


@pytest.mark.parametrize(
    "arguments",
    [
        {"query": "x", "limit": 0},
        {"query": "x", "limit": 201},
        {"query": 42},
        {"query": "x", "scope_ids": ["1"]},
    ],
)
def test_it_refuses_bad_input(project_scope, arguments):
    arguments = {"scope_ids": [project_scope.pk], **arguments}
    with pytest.raises(InvalidInput):
        session_search(**arguments)


def test_it_normalises_a_session_by_its_own_length_setting(settings, project_scope, plan_and_aside):
    plan, _ = plan_and_aside

    def lexical():
        hits = session_search(query=QUESTION, scope_ids=[project_scope.pk])
        return {hit.session.pk: hit.why["lexical_score"] for hit in hits}

    settings.TIDELINE_SEARCH_SESSION_BM25_B = 0.0
    flat = lexical()
    # The memories' b does not reach sessions.
    settings.TIDELINE_SEARCH_BM25_B = 1.0
    assert lexical() == flat
    # The plan's session is the longest (small talk between its lines): normalised by its length,
    # its words weigh less.
    settings.TIDELINE_SEARCH_SESSION_BM25_B = 1.0
    assert lexical()[plan.pk] < flat[plan.pk]
