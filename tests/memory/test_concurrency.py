"""The invariants hold under real concurrent writers: separate processes (tests/memory/writer.py)
and a multi-worker uvicorn server, on whichever database the suite runs (a SQLite file here, the
PostgreSQL run of tests/memory in CI), all released at one instant."""

from collections import Counter

import pytest
from django.db import connection

from injection.services.access import apikey_create
from memory.models import (
    AuditEvent,
    ContextTurn,
    Fact,
    Memory,
    MemoryStatus,
    Narrative,
    SelfConcept,
    Session,
    WordVector,
)
from memory.search import postgres
from memory.search.maintenance import search_index_check
from memory.services.facts import FactInput, fact_write
from memory.services.narratives import NarrativeInput, narrative_write
from memory.services.self_concept import self_concept_write
from tests.memory.concurrency import Server, Writers

WRITERS = 8
KEYS = 10


@pytest.fixture(scope="module")
def writers(django_db_setup, tmp_path_factory):
    pool = Writers(count=WRITERS, tmp_dir=tmp_path_factory.mktemp("writers"))
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def embedding_writers(django_db_setup, tmp_path_factory):
    pool = Writers(count=4, tmp_dir=tmp_path_factory.mktemp("embedders"), embedder="bundled")
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def server(django_db_setup, tmp_path_factory):
    running = Server(tmp_dir=tmp_path_factory.mktemp("server"), workers=4)
    yield running
    running.close()


def _errors(outcomes) -> list[str]:
    return [f"{o.error}: {o.message}" for o in outcomes if not o.ok]


def _current_facts(scope) -> Counter:
    return Counter(
        Fact.objects.filter(scope=scope, status=MemoryStatus.ACTIVE).values_list(
            "predicate", flat=True
        )
    )


def _chain_is_whole(scope, predicate: str) -> bool:
    """Every superseded row of the key points at its successor, and each successor at it."""
    rows = {f.pk: f for f in Fact.objects.filter(scope=scope, predicate=predicate)}
    superseded = [f for f in rows.values() if f.status == MemoryStatus.SUPERSEDED]
    return all(
        f.superseded_by_id in rows and rows[f.superseded_by_id].supersedes_id == f.pk
        for f in superseded
    )


def test_it_keeps_one_current_fact_per_key_under_concurrent_writers(
    transactional_db, writers, project_scope
):
    predicates = [f"pref_{n}" for n in range(KEYS)]
    outcomes = writers.run(
        [
            (
                "facts_write",
                {
                    "scope_id": project_scope.pk,
                    "writes": [[predicate, f"value {writer}"] for predicate in predicates],
                },
            )
            for writer in range(WRITERS)
        ]
    )

    assert _errors(outcomes) == []
    assert _current_facts(project_scope) == Counter(dict.fromkeys(predicates, 1))
    assert Fact.objects.filter(scope=project_scope).count() == KEYS * WRITERS
    assert all(_chain_is_whole(project_scope, predicate) for predicate in predicates)


def test_it_keeps_one_current_self_concept_under_concurrent_writers(
    transactional_db, writers, global_scope
):
    outcomes = writers.run(
        [
            ("self_concept_write", {"field": "terrain", "contents": [f"{w}.{n}" for n in range(5)]})
            for w in range(WRITERS)
        ]
    )

    versions = SelfConcept.objects.filter(field="terrain")
    assert _errors(outcomes) == []
    assert versions.filter(status=MemoryStatus.ACTIVE).count() == 1
    assert versions.count() == WRITERS * 5
    assert versions.exclude(supersedes=None).count() == WRITERS * 5 - 1


def test_it_stores_each_turn_once_under_identical_concurrent_batches(
    transactional_db, writers, project_scope
):
    batch = [[f"turn-{n}", f"message number {n}"] for n in range(50)]
    outcomes = writers.run(
        [
            ("turns_sync", {"scope_id": project_scope.pk, "session": "same", "turns": batch})
            for _ in range(WRITERS)
        ]
    )

    turns = ContextTurn.objects.filter(session__external_id="same")
    assert _errors(outcomes) == []
    assert sum(o.result for o in outcomes) == 50
    assert turns.count() == 50
    assert sorted(turns.values_list("seq", flat=True)) == list(range(1, 51))
    assert set(turns.values_list("external_id", flat=True)) == {t[0] for t in batch}


def test_it_keeps_one_vector_per_word_under_concurrent_embedders(
    transactional_db, embedding_writers
):
    # Each writer loads the embedding model first, so the second round races for real.
    warm = embedding_writers.run(
        [("words_embed", {"texts": [f"warming{n} engines"]}) for n in range(4)]
    )
    assert _errors(warm) == []
    said = "harbour crane ferry lighthouse anchor tugboat dredger quay pilot buoy"
    outcomes = embedding_writers.run([("words_embed", {"texts": [said]}) for _ in range(4)])

    assert _errors(outcomes) == []
    words = list(WordVector.objects.values_list("word", flat=True))
    assert len(words) == len(set(words))
    assert set(said.split()) <= set(words)


def test_it_opens_one_session_for_concurrent_first_turns(transactional_db, writers, project_scope):
    outcomes = writers.run(
        [
            (
                "turns_one_by_one",
                {
                    "scope_id": project_scope.pk,
                    "session": "brand-new",
                    "contents": [f"writer {w} says {n}" for n in range(10)],
                },
            )
            for w in range(WRITERS)
        ]
    )

    assert _errors(outcomes) == []
    assert Session.objects.filter(external_id="brand-new").count() == 1
    turns = ContextTurn.objects.filter(session__external_id="brand-new")
    assert turns.count() == WRITERS * 10
    assert sorted(turns.values_list("seq", flat=True)) == list(range(1, WRITERS * 10 + 1))
    opened = AuditEvent.objects.filter(target_type="session", reason="session opened")
    assert opened.count() == 1


def test_it_lets_one_of_concurrent_edits_supersede_a_narrative(
    transactional_db, writers, project_scope
):
    original = narrative_write(
        data=NarrativeInput(gesture="first wording", scope_id=project_scope.pk)
    )

    outcomes = writers.run(
        [
            ("memory_edit", {"memory_id": original.pk, "changes": {"gesture": f"wording {w}"}})
            for w in range(WRITERS)
        ]
    )

    winners = [o for o in outcomes if o.ok]
    losers = [o for o in outcomes if not o.ok]
    assert len(winners) == 1
    assert {o.error for o in losers} == {"Conflict"} and len(losers) == WRITERS - 1
    assert all(f"superseded by #{winners[0].result}" in o.message for o in losers)
    successors = Memory.objects.filter(supersedes=original)
    assert list(successors.values_list("pk", flat=True)) == [winners[0].result]
    assert Memory.objects.get(pk=original.pk).superseded_by_id == winners[0].result
    assert Narrative.objects.filter(scope=project_scope, status=MemoryStatus.ACTIVE).count() == 1


@pytest.mark.parametrize("kind", ["fact", "self_concept"])
def test_it_lets_one_of_an_expiry_and_edits_racing_on_one_memory_win(
    transactional_db, writers, project_scope, kind
):
    """Before, on PostgreSQL, an edit could supersede a fact or self-concept an expiry had ended
    meanwhile: both answered 200 and the memory the agent deleted was current again."""
    for attempt in range(6):
        if kind == "fact":
            original = fact_write(
                data=FactInput(
                    scope_id=project_scope.pk,
                    profile_name="user",
                    kind="preference",
                    predicate=f"shape_{attempt}",
                    value="square",
                )
            )
            change = {"value": "circle"}
        else:
            original = self_concept_write(field="terrain", content=f"terrain {attempt}")
            change = {"content": f"terrain {attempt}, edited"}
        calls = [("memory_expire", {"memory_id": original.pk})] * (WRITERS // 2) + [
            ("memory_edit", {"memory_id": original.pk, "changes": change})
        ] * (WRITERS // 2)

        outcomes = writers.run(calls)

        winners = [call[0] for call, outcome in zip(calls, outcomes, strict=True) if outcome.ok]
        assert len(winners) == 1, (attempt, outcomes)
        assert {o.error for o in outcomes if not o.ok} == {"Conflict"}, outcomes
        ended = Memory.objects.get(pk=original.pk)
        successors = Memory.objects.filter(supersedes=original)
        if winners == ["memory_expire"]:
            assert ended.status == MemoryStatus.EXPIRED and not successors.exists()
        else:
            assert ended.status == MemoryStatus.SUPERSEDED and successors.count() == 1


def test_it_counts_every_activation_of_memories_recalled_at_once(
    transactional_db, writers, project_scope
):
    """Every search and block activates what it recalled. Before, on PostgreSQL, two recalls of
    overlapping memories could lock them in different orders and one failed with a deadlock: a
    500 on a read."""
    memories = [
        narrative_write(
            data=NarrativeInput(gesture=f"recalled note {n}", scope_id=project_scope.pk)
        )
        for n in range(40)
    ]
    ids = [memory.pk for memory in memories]
    calls = [
        ("memories_activate", {"memory_ids": ids[w:] + ids[:w] if w % 2 else ids[::-1], "times": 5})
        for w in range(WRITERS)
    ]

    outcomes = writers.run(calls)

    assert _errors(outcomes) == []
    counts = set(Memory.objects.filter(pk__in=ids).values_list("activation_count", flat=True))
    assert counts == {WRITERS * 5}


def test_it_keeps_the_search_index_exact_under_concurrent_writers(
    transactional_db, writers, project_scope
):
    """Concurrent turns of one session change each other's documents (a turn's neighbours are in
    its terms), and concurrent fact writes share BM25's statistics: after the burst, every stored
    document, posting and statistic equals what the rows call for (SQLite: the FTS5 tables; the
    PostgreSQL run: native mode's documents, postings, frequencies and totals, all applied with
    their transactions, none left queued)."""
    outcomes = writers.run(
        [
            (
                "turns_one_by_one",
                {
                    "scope_id": project_scope.pk,
                    "session": "indexed",
                    "contents": [f"writer {w} bakes loaf {n} at dawn" for n in range(6)],
                },
            )
            if w % 2
            else (
                "facts_write",
                {
                    "scope_id": project_scope.pk,
                    "writes": [[f"oven_{n}", f"stone oven {w}"] for n in range(4)],
                },
            )
            for w in range(WRITERS)
        ]
    )

    assert _errors(outcomes) == []
    assert ContextTurn.objects.filter(session__external_id="indexed").count() == WRITERS // 2 * 6
    if postgres.native_active():
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM {postgres.PENDING}")
            assert cursor.fetchone()[0] == 0
    else:
        assert connection.vendor == "sqlite"
    drifts = search_index_check()
    assert [drift.kind for drift in drifts] == ["memory", "turn"]
    assert [drift for drift in drifts if not drift.clean] == []


def _key(scope) -> str:
    return apikey_create(name="concurrent agent", scope_ids=[scope.pk])[1]


def test_it_answers_every_concurrent_fact_write_over_http(transactional_db, server, project_scope):
    key = _key(project_scope)
    clients = [
        [
            (
                "POST",
                "/api/v1/facts",
                key,
                {
                    "scope_id": project_scope.pk,
                    "profile_name": "user",
                    "kind": "preference",
                    "predicate": f"pref_{n}",
                    "value": f"value {w}",
                },
            )
            for n in range(KEYS)
        ]
        for w in range(WRITERS)
    ]

    answers = server.concurrently(clients)

    assert [answer for answer in answers if answer[0] != 200] == []
    assert len(answers) == KEYS * WRITERS
    assert _current_facts(project_scope) == Counter({f"pref_{n}": 1 for n in range(KEYS)})


def test_it_stores_each_turn_once_when_a_transcript_is_posted_concurrently(
    transactional_db, server, project_scope
):
    key = _key(project_scope)
    body = {
        "scope_id": project_scope.pk,
        "session_id": "http-same",
        "turns": [
            {"role": "user", "content": f"message {n}", "turn_id": f"t{n}"} for n in range(50)
        ],
    }

    answers = server.concurrently([[("POST", "/api/v1/turns", key, body)]] * WRITERS)

    assert [answer for answer in answers if answer[0] != 200] == []
    assert len(answers) == WRITERS
    assert sum(answer["recorded"] for _, answer in answers) == 50
    assert ContextTurn.objects.filter(session__external_id="http-same").count() == 50


def test_it_records_every_concurrent_first_turn_of_a_new_session_over_http(
    transactional_db, server, project_scope
):
    key = _key(project_scope)
    clients = [
        [
            (
                "POST",
                "/api/v1/turn",
                key,
                {
                    "scope_id": project_scope.pk,
                    "session_id": "http-new",
                    "content": f"{w} says {n}",
                },
            )
            for n in range(4)
        ]
        for w in range(WRITERS)
    ]

    answers = server.concurrently(clients)

    assert [answer for answer in answers if answer[0] != 200] == []
    assert len(answers) == WRITERS * 4
    assert all(answer["recorded"] for _, answer in answers)
    assert Session.objects.filter(external_id="http-new").count() == 1
    assert ContextTurn.objects.filter(session__external_id="http-new").count() == WRITERS * 4


def test_it_answers_409_to_the_loser_of_two_concurrent_edits_over_http(
    transactional_db, server, project_scope
):
    key = _key(project_scope)
    original = narrative_write(
        data=NarrativeInput(gesture="first wording", scope_id=project_scope.pk)
    )
    clients = [
        [("PATCH", f"/api/v1/memories/{original.pk}", key, {"changes": {"gesture": f"edit {w}"}})]
        for w in range(2)
    ]

    answers = server.concurrently(clients)

    assert sorted(status for status, _ in answers) == [200, 409]
    winner = next(answer for status, answer in answers if status == 200)
    assert list(Memory.objects.filter(supersedes=original).values_list("pk", flat=True)) == [
        winner["id"]
    ]
