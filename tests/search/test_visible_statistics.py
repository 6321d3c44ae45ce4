"""A search's scores are read off what its caller may see. BM25's statistics (documents, average
length, each term's document frequency) and the reading of a misspelt name come from the caller's
scopes and, for a caller who may not see them, without secret memories: otherwise a caller could
tell what a secret or another scope holds by asking "x hunter2" and comparing with "x"."""

from datetime import UTC, datetime

import pytest

from memory.search import memory_search, turn_search
from memory.search.text import text_terms
from memory.services.lifecycle import memory_set_secret
from tests.search.turns import record

HARBOUR = [
    "The harbour ferry leaves at noon on weekdays",
    "Invoices from the harbour master arrive monthly",
    "Winter ferry timetable for the island route",
    "We moved the backups to the new storage server",
]
WHEN = datetime(2024, 3, 5, 12, tzinfo=UTC)


def scored(hits) -> list[tuple[int, float]]:
    return [(hit.memory.pk, hit.score) for hit in hits]


@pytest.mark.parametrize("exact_rows", [2000, 0])
def test_it_scores_a_search_without_secrets_as_if_they_were_not_stored(
    project_scope, settings, write_narrative, exact_rows
):
    # exact_rows 0 sends PostgreSQL through its candidate view, statistics read in SQL.
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = exact_rows
    for text in HARBOUR:
        write_narrative(project_scope, text)
    query = "harbour ferry zebracode"
    before = memory_search(query=query, scope_ids=[project_scope.pk], exclude_secret=True)
    secret = write_narrative(project_scope, "zebracode opens the harbour vault, ferry key inside")
    memory_set_secret(memory_id=secret.pk, secret=True)

    after = memory_search(query=query, scope_ids=[project_scope.pk], exclude_secret=True)
    assert [pk for pk, _ in scored(after)] == [pk for pk, _ in scored(before)]
    assert [score for _, score in scored(after)] == pytest.approx(
        [score for _, score in scored(before)], abs=1e-6
    )
    # The owner, who may see it, gets it ranked against statistics that count it: the same rows
    # then score differently, which is what a caller without secrets must not be able to see.
    shown = memory_search(query=query, scope_ids=[project_scope.pk])
    assert shown[0].memory.pk == secret.pk
    owner_scores = dict(scored(shown))
    assert all(owner_scores[pk] != pytest.approx(score, abs=1e-4) for pk, score in scored(after))


def test_it_lets_no_secret_take_a_candidates_place(project_scope, settings, write_narrative):
    """PostgreSQL past its exact size ranks a few candidates per source (the best by BM25, the
    nearest and farthest vectors): a secret must not take one of those places from a memory the
    caller may see. The in-process index ranks every row, so there this holds by construction."""
    from memory.search import postgres

    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = 0
    settings.TIDELINE_SEARCH_POSTGRES_LEXICAL_CANDIDATES = 2
    settings.TIDELINE_SEARCH_POSTGRES_SEMANTIC_CANDIDATES = 1
    postgres.FARTHEST, farthest = 1, postgres.FARTHEST
    try:
        for text in HARBOUR:
            write_narrative(project_scope, text)
        query = "harbour ferry"
        before = memory_search(query=query, scope_ids=[project_scope.pk], exclude_secret=True)
        for number in range(4):
            secret = write_narrative(project_scope, f"harbour ferry {number}")
            memory_set_secret(memory_id=secret.pk, secret=True)
        after = memory_search(query=query, scope_ids=[project_scope.pk], exclude_secret=True)
    finally:
        postgres.FARTHEST = farthest
    assert len(before) >= 2
    assert [pk for pk, _ in scored(after)] == [pk for pk, _ in scored(before)]
    assert [score for _, score in scored(after)] == pytest.approx(
        [score for _, score in scored(before)], abs=1e-6
    )


@pytest.mark.parametrize("exact_rows", [2000, 0])
def test_it_reads_a_misspelt_name_by_the_callers_scopes_only(
    project_scope, other_project_scope, settings, django_capture_on_commit_callbacks, exact_rows
):
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = exact_rows
    mine = record(
        project_scope,
        "mine",
        [("Aqib", "I adopted a puppy last week."), ("Ann", "We watched the old zorro film.")],
        WHEN,
        django_capture_on_commit_callbacks,
    )
    (aqib,) = text_terms("Aqib")
    (zorro,) = text_terms("zorro")

    def matched(query: str) -> dict[int, list[str]]:
        hits = turn_search(query=query, scope_ids=[project_scope.pk])
        return {hit.turn.pk: hit.why["matched_terms"] for hit in hits}

    assert aqib in matched("What did Akib adopt?")[mine[0].pk]
    assert zorro not in matched("zoro").get(mine[1].pk, [])
    # Another scope writes "Akib" as a word and has a speaker called Zorro.
    record(
        other_project_scope,
        "theirs",
        [("Zorro", "Akib is my cousin from Lahore.")],
        WHEN,
        django_capture_on_commit_callbacks,
    )
    assert aqib in matched("What did Akib adopt?")[mine[0].pk]
    assert zorro not in matched("zoro").get(mine[1].pk, [])
    # In their own scope the words read as they are there.
    theirs = turn_search(query="zoro akib", scope_ids=[other_project_scope.pk])
    assert sorted(theirs[0].why["matched_terms"]) == sorted([zorro, *text_terms("akib")])
