"""A session that moved between projects, written to from two places at once. A turn id is held
once per session across its parts (the first part and its segments, one per scope): a turn sent
again after a move is skipped where the caller reads the part holding it. No unique index spans
the parts; the rule is checked under the row lock of the session's first part (_append in
memory/services/timeline.py). Real writer processes (tests/memory/writer.py, through the same
session_open and turns_sync the REST operations call) and a real uvicorn server, released at one
instant, on whichever database the suite runs: a SQLite file, or PostgreSQL with
TIDELINE_DATABASE_URL."""

from collections import Counter

import pytest

from injection.services.access import apikey_create
from memory.models import ContextTurn, ScopeKind, Session
from memory.services.scopes import scope_ensure
from memory.services.timeline import TurnInput, session_start, turns_record
from tests.memory.concurrency import Server, Writers

# The runtime tests/memory/writer.py opens its sessions under.
RUNTIME = "claude_code"
# A lost race shows only when both writers read before either commits. Without the first part's
# lock, PostgreSQL lost it in the first round every time it was tried; a second fresh session is
# the margin, and keeps each test within seconds.
ROUNDS = 2
# Held before the race: t0–t5 by the first part, t6–t8 by the first segment, t9–t11 by the second.
HELD_BY_FIRST = range(0, 6)
HELD_BY_SEGMENTS = (range(6, 9), range(9, 12))
# What the two writers send: overlapping windows of the transcript, each re-sending turns some
# part already holds, and t12–t24 sent by both.
SENT = (range(0, 25), range(4, 30))


@pytest.fixture(scope="module")
def writers(django_db_setup, tmp_path_factory):
    pool = Writers(count=2, tmp_dir=tmp_path_factory.mktemp("timeline-writers"))
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def server(django_db_setup, tmp_path_factory):
    running = Server(tmp_dir=tmp_path_factory.mktemp("timeline-server"), workers=2)
    yield running
    running.close()


@pytest.fixture
def third_project_scope(db):
    return scope_ensure(kind=ScopeKind.PROJECT, key="/work/projects/harbour-planner")


def _ids(numbers) -> list[str]:
    return [f"t{n}" for n in numbers]


def _turns(numbers) -> list[TurnInput]:
    return [
        TurnInput(role="user", content=f"message {n}", meta={"external_id": f"t{n}"})
        for n in numbers
    ]


def _moved_session(name: str, *, first, segments) -> list[Session]:
    """A session opened in `first` that then moved into each of `segments`, every part already
    holding some turns; its parts, first part first."""
    root = session_start(runtime=RUNTIME, external_id=name, scope_id=first.pk)
    turns_record(session_id=root.pk, turns=_turns(HELD_BY_FIRST))
    parts = [root]
    for scope, held in zip(segments, HELD_BY_SEGMENTS, strict=False):
        segment = session_start(runtime=RUNTIME, external_id=name, scope_id=scope.pk)
        turns_record(session_id=segment.pk, turns=_turns(held))
        parts.append(segment)
    assert [part.parent_id for part in parts[1:]] == [root.pk] * len(segments)
    return parts


def _sync(scope, name: str, numbers) -> tuple[str, dict]:
    turns = [[turn_id, f"message {turn_id[1:]}"] for turn_id in _ids(numbers)]
    return ("turns_sync", {"scope_id": scope.pk, "session": name, "turns": turns})


def _errors(outcomes) -> list[str]:
    return [f"{o.error}: {o.message}" for o in outcomes if not o.ok]


def _held(parts: list[Session]) -> Counter:
    """How many times each turn id is held across the session's parts."""
    return Counter(
        ContextTurn.objects.filter(session__in=parts).values_list("external_id", flat=True)
    )


def _seqs_whole(parts: list[Session]) -> bool:
    """Each part numbers its turns 1…n with no gap and no repeat."""
    return all(
        sorted(part.turns.values_list("seq", flat=True)) == list(range(1, part.turns.count() + 1))
        for part in parts
    )


@pytest.mark.parametrize("where", ["first part and segment", "two segments"])
def test_it_holds_each_turn_once_across_parts_written_at_once(
    transactional_db, writers, project_scope, other_project_scope, third_project_scope, where
):
    for round_ in range(ROUNDS):
        name = f"moved-{round_}"
        if where == "first part and segment":
            parts = _moved_session(name, first=project_scope, segments=[other_project_scope])
            scopes = (project_scope, other_project_scope)
        else:
            parts = _moved_session(
                name, first=project_scope, segments=[other_project_scope, third_project_scope]
            )
            scopes = (other_project_scope, third_project_scope)
        before = _held(parts)
        assert set(before.values()) == {1}

        outcomes = writers.run(
            [_sync(scope, name, numbers) for scope, numbers in zip(scopes, SENT, strict=True)]
        )

        assert _errors(outcomes) == [], round_
        everything = set(before) | {turn_id for numbers in SENT for turn_id in _ids(numbers)}
        assert _held(parts) == Counter(dict.fromkeys(everything, 1)), round_
        assert sum(o.result for o in outcomes) == len(everything - set(before)), round_
        assert _seqs_whole(parts), round_


def test_it_holds_each_turn_once_when_both_write_the_same_new_turns_to_one_segment(
    transactional_db, writers, project_scope, other_project_scope
):
    for round_ in range(ROUNDS):
        name = f"resent-{round_}"
        parts = _moved_session(name, first=project_scope, segments=[other_project_scope])
        before = set(_held(parts))
        sent = SENT[0]
        new = set(_ids(sent)) - before

        outcomes = writers.run([_sync(other_project_scope, name, sent)] * 2)

        assert _errors(outcomes) == [], round_
        assert _held(parts) == Counter(dict.fromkeys(before | new, 1)), round_
        assert sorted(o.result for o in outcomes) == [0, len(new)], round_
        in_segment = set(parts[1].turns.values_list("external_id", flat=True))
        assert in_segment == set(_ids(HELD_BY_SEGMENTS[0])) | new, round_
        assert _seqs_whole(parts), round_


def test_it_answers_200_to_both_writers_of_a_moved_session_over_http(
    transactional_db, server, project_scope, other_project_scope
):
    """The REST side: the key reads both projects, so a turn either part holds is skipped."""
    scope_ids = [project_scope.pk, other_project_scope.pk]
    key = apikey_create(name="moving agent", scope_ids=scope_ids)[1]
    for round_ in range(ROUNDS):
        name = f"http-moved-{round_}"
        parts = _moved_session(name, first=project_scope, segments=[other_project_scope])
        before = _held(parts)
        bodies = [
            {
                "scope_id": scope.pk,
                "runtime": RUNTIME,
                "session_id": name,
                "turns": [
                    {"role": "user", "content": f"message {n}", "turn_id": f"t{n}"} for n in numbers
                ],
            }
            for scope, numbers in zip((project_scope, other_project_scope), SENT, strict=True)
        ]

        answers = server.concurrently([[("POST", "/api/v1/turns", key, body)] for body in bodies])

        assert [answer for answer in answers if answer[0] != 200] == [], round_
        assert [answer["session"]["id"] for _, answer in answers] == [part.pk for part in parts]
        everything = set(before) | {turn_id for numbers in SENT for turn_id in _ids(numbers)}
        assert _held(parts) == Counter(dict.fromkeys(everything, 1)), round_
        assert sum(answer["recorded"] for _, answer in answers) == len(everything - set(before))
        assert _seqs_whole(parts), round_
