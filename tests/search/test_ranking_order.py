import calendar
from datetime import UTC, date, datetime

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory.models import Memory
from memory.search import memory_search, turn_search
from memory.search.service import (
    LITERAL_FULL_TERMS,
    SAMPLED_CUT_RATIO,
    SAMPLED_CUT_SAMPLE,
    _best_rows,
)
from memory.search.text import query_literals
from tests.search.turns import record

WHEN = datetime(2024, 1, 7, 15, 0, tzinfo=UTC)
VOCABULARY = [
    "lighthouse",
    "maine",
    "blue",
    "whale",
    "pottery",
    "class",
    "marathon",
    "berlin",
    "sister",
    "cello",
    "whale-listen",
    "garden",
    "tomatoes",
    "Bart",
    "Amy",
    "边界",
    "兜底",
    # A when-question and a named day: turn_search's time priors are part of the score too.
    "When did",
    "on 7 Jan 2024",
    "on 8 Jan",
    "in January 2024",
    "late January 2024",
    "in January",
    # Last in a query, a question naming a speaker: asking turns' negative prior is part of it.
    "Amy?",
    # First in a query, a question for a number or a place: the answer priors are part of it.
    "How many",
    "Where did",
]
TRANSCRIPT = (
    '"Bart": I finally went to the lighthouse in Maine last weekend!\n'
    '"Amy": Oh nice, was it the one your sister told you about?\n'
    '"Bart": yes, and I bought a "blue whale" mug there'
)


def store_property(*, max_examples: int):
    """Hypothesis settings for a property over a store a fixture built once per test."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def query_of(words: list[str], quoted: list[str], separator: str = " ") -> str:
    """The words, then the quoted ones as one literal, when there are any."""
    return separator.join([*words, f'"{" ".join(quoted)}"'] if quoted else words)


def assert_ordered_and_explained(hits):
    scores = [hit.score for hit in hits]
    assert scores == sorted(scores, reverse=True)
    for hit in hits:
        why = hit.why
        assert why["score"] == pytest.approx(hit.score, abs=1e-4)
        parts = why["lexical_share"] + why["semantic_share"] + sum(why["boosts"].values())
        assert parts == pytest.approx(hit.score, abs=2e-3)
        assert why["boosts"]["keyword"] == 0 or why["literal_matches"]


def test_it_never_pairs_quotes_across_lines_or_between_quoted_names():
    assert query_literals(TRANSCRIPT) == ["Bart", "Amy", "blue whale"]
    unbalanced = 'Bart: "so we drove up to the coast.\nAmy: that sounds "lovely" honestly'
    assert query_literals(unbalanced) == ["lovely"]
    assert query_literals('a 5" screen and a 6" one') == []
    assert query_literals("「ホテル」と“deep blue”") == ["ホテル", "deep blue"]


@pytest.fixture
def transcript_store(project_scope, django_capture_on_commit_callbacks):
    """Two speakers, sixty-five turns: the quoted speaker names are in every other row, fifteen
    rows hold both words of "blue whale" without the phrase, the sixty-third asks about the
    cello, and the last two are a question and its reply (a reply's score holds a share of its
    question's)."""
    lines = []
    for n in range(15):
        lines.append(("Amy", f"Day {n} of the garden diary: watered the tomatoes."))
        lines.append(("Bart", f"Day {n}: ran part of the marathon route again."))
    for n in range(15):
        lines.append(("Bart", f"The whale was blue and the whale was huge, trip {n}, whale blue!"))
        lines.append(("Amy", f"My pottery class meets on day {n}; we glazed bowls."))
    lines.append(("Bart", "I bought a blue whale mug at the lighthouse shop."))
    lines.append(("Amy", "My sister plays the cello in Berlin."))
    lines.append(("Bart", "Amy, does your sister still play the cello?"))
    lines.append(("Amy", "Bart, did you run the marathon route today?"))
    lines.append(("Bart", "Twice, then I watered the tomatoes."))
    turns = record(project_scope, "transcript", lines, WHEN, django_capture_on_commit_callbacks)
    return project_scope, turns


def test_it_ranks_a_multiline_transcript_query_by_its_content(transcript_store):
    scope, turns = transcript_store
    hits = turn_search(query=TRANSCRIPT, scope_ids=[scope.pk], limit=3)
    assert hits[0].turn.pk == turns[60].pk
    assert hits[0].why["literal_matches"] == ["blue whale"]
    # A speaker's quoted name is in half the rows: it is not a literal worth a boost.
    assert all("Bart" not in hit.why["literal_matches"] for hit in hits)
    assert_ordered_and_explained(hits)


def test_it_verifies_every_provisional_literal_before_choosing(transcript_store):
    scope, turns = transcript_store
    # Fifteen rows hold both words more often than the one row with the phrase; the old loop gave
    # up after five verification passes and returned rows with withdrawn boosts.
    hits = turn_search(query='"blue whale"', scope_ids=[scope.pk], limit=1)
    assert [hit.turn.pk for hit in hits] == [turns[60].pk]
    assert hits[0].why["boosts"]["keyword"] > 0
    assert_ordered_and_explained(turn_search(query='"blue whale"', scope_ids=[scope.pk], limit=10))


def test_it_reads_every_raw_text_when_the_ids_span_several_chunks(transcript_store, monkeypatch):
    from memory.search import service

    scope, turns = transcript_store
    index = service.search_index("turn").narrow(query="whale", scope_ids=[scope.pk], vector=None)
    ids = [turn.pk for turn in turns]
    monkeypatch.setattr(service, "RAW_TEXT_CHUNK", 2)
    texts = service._raw_texts(index, ids)
    assert set(texts) == set(ids)
    assert texts[turns[60].pk] == "i bought a blue whale mug at the lighthouse shop."


@store_property(max_examples=40)
@given(
    words=st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=8),
    quoted=st.lists(st.sampled_from(VOCABULARY), max_size=3),
    newlines=st.booleans(),
    limit=st.integers(min_value=1, max_value=12),
)
def test_it_returns_every_result_list_in_final_score_order(
    transcript_store, words, quoted, newlines, limit
):
    scope, _ = transcript_store
    query = query_of(words, quoted, "\n" if newlines else " ")
    assert_ordered_and_explained(turn_search(query=query, scope_ids=[scope.pk], limit=limit))
    assert_ordered_and_explained(memory_search(query=query, scope_ids=[scope.pk], limit=limit))


@store_property(max_examples=30)
@given(
    words=st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=6),
    quoted=st.lists(st.sampled_from(VOCABULARY), max_size=2),
    limit=st.integers(min_value=1, max_value=8),
)
def test_it_ranks_the_best_turns_as_ranking_every_turn_would(
    transcript_store, words, quoted, limit
):
    # With room for every turn, every provisional literal is verified; a short list must be that
    # ranking's head, replies (whose scores hold their questions') included.
    scope, turns = transcript_store
    query = query_of(words, quoted)
    short = turn_search(query=query, scope_ids=[scope.pk], limit=limit)
    every = turn_search(query=query, scope_ids=[scope.pk], limit=len(turns))
    assert [(hit.turn.pk, round(hit.score, 4)) for hit in short] == [
        (hit.turn.pk, round(hit.score, 4)) for hit in every[:limit]
    ]


@pytest.fixture
def memory_store(project_scope, write_narrative):
    for text in [
        "Deployed whale-listen to the staging cluster",
        "The whale listening service keeps a microphone open for whale songs",
        "Bart bought a blue whale mug at the lighthouse in Maine",
        "Amy's sister plays the cello in Berlin",
        "处理边界条件时先写兜底逻辑",
        "Ran the marathon twice with Amy",
    ]:
        write_narrative(project_scope, text)
    # Valid from the day it names: a query naming that day raises it.
    write_narrative(project_scope, "Planted tomatoes in the garden on 7 Jan 2024", valid_from=WHEN)
    return project_scope


@store_property(max_examples=30)
@given(
    words=st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=8),
    quoted=st.lists(st.sampled_from(VOCABULARY), max_size=3),
    lexical=st.booleans(),
    limit=st.integers(min_value=1, max_value=6),
)
def test_it_orders_memory_hits_by_the_score_their_why_explains(
    memory_store, words, quoted, lexical, limit
):
    query = query_of(words, quoted)
    hits = memory_search(query=query, scope_ids=[memory_store.pk], limit=limit, lexical=lexical)
    assert_ordered_and_explained(hits)


def reference_memory_ranking(query, scope_id, limit, min_semantic=None, exclude_ids=()):
    """Every eligible memory scored from scratch by the documented formula, no shortcuts: what the
    ranking's cached parts, shortlist and verification loop must reproduce. `min_semantic` and
    `exclude_ids` only take rows out of the competition; the scales stay those of every eligible
    row."""
    import time
    import unicodedata

    import numpy as np
    from django.conf import settings as django_settings

    from memory.models import Memory
    from memory.search.calibration import calibration_get
    from memory.search.index import LAYER_CODES
    from memory.search.intent import (
        asks_about_choice,
        asks_for_number,
        asks_for_place,
        asks_when,
        names_proper,
        states_number,
    )
    from memory.search.service import search_index
    from memory.search.text import text_terms
    from memory.search.timing import (
        days_named,
        mentions_time,
        monthdays_named,
        monthperiods_named,
        periods_named,
    )
    from memory.services.embedding import embedder_get

    # On PostgreSQL in native mode, the rows a query ranks are its candidate view (every row of a
    # small scope); in-process, `narrow` is the whole index.
    index = search_index("memory").narrow(
        query=query, scope_ids=[scope_id], vector=embedder_get().embed_query(query)
    )
    table = index.table
    calibration = calibration_get(index.model_id)
    now = time.time()
    eligible = (
        table["alive"]
        & (table["scope"] == scope_id)
        & (table["valid_from"] <= now)
        & (table["valid_to"] > now)
    )
    terms = index.terms_resolve(text_terms(query), scope_ids=[scope_id], stats_rows=eligible)
    bm25 = index.bm25(terms, eligible, eligible)
    cosine, _ = index.cosines(embedder_get().embed_query(query))
    texts = {
        pk: unicodedata.normalize("NFKC", text).casefold()
        for pk, text in Memory.objects.values_list("pk", "search_text")
    }
    literals = query_literals(query)
    found = np.zeros(table.size, dtype=np.float32)
    for literal in literals:
        needle = unicodedata.normalize("NFKC", literal).casefold()
        for row in range(table.size):
            own = set(text_terms(texts[int(table["id"][row])]))
            if needle in texts[int(table["id"][row])] and set(text_terms(literal)) <= own:
                found[row] += 1
    fade = min(1.0, LITERAL_FULL_TERMS / max(1, len(set(terms))))
    keyword = django_settings.TIDELINE_SEARCH_KEYWORD_BOOST * fade * found / max(1, len(literals))
    candidate = eligible & ((bm25 > 0) | (found > 0) | (cosine >= calibration.semantic_floor))
    scale = max(
        float(bm25[candidate].max(initial=0.0)),
        calibration.lexical_floor_share * index.ideal_bm25(terms, eligible),
    )
    low = min(float(cosine[eligible].min()), calibration.noise_floor)
    high = float(cosine[eligible].max())
    age = np.maximum(0.0, (now - table["recorded_at"]) / 86400.0)
    decision = django_settings.TIDELINE_SEARCH_PRIOR_DECISION if asks_about_choice(query) else 0
    raw = dict(Memory.objects.values_list("pk", "search_text"))
    answer = django_settings.TIDELINE_SEARCH_PRIOR_ANSWER
    valid_from = dict(Memory.objects.values_list("pk", "valid_from"))

    def near_a_named_day(pk) -> float:
        # Full on the day, fading to nothing 7 days after it and 1 day before it.
        moment = valid_from[pk]
        # A day without its year, read in the memory's own year and the years either side.
        days = [(day.year, day.month, day.day) for day in days_named(query)] + [
            (moment.year + step, month, day)
            for month, day in monthdays_named(query)
            for step in (-1, 0, 1)
        ]
        fades = [(moment - datetime(*day, tzinfo=UTC)).total_seconds() / 86400 for day in days]
        return max(
            [max(0.0, 1 - fade / 7 if fade >= 0 else 1 + fade) for fade in fades], default=0.0
        )

    def near_a_named_period(pk) -> float:
        # Full from its first day to its last, fading over 7 days after and 1 day before.
        moment = valid_from[pk]
        nearness = [0.0]
        # A month without its year, read in the memory's own year and the years either side.
        thirds = {None: (1, 31), 0: (1, 10), 1: (11, 20), 2: (21, 31)}
        yearless = [
            (
                date(moment.year + step, month, thirds[third][0]),
                date(
                    moment.year + step,
                    month,
                    min(thirds[third][1], calendar.monthrange(moment.year + step, month)[1]),
                ),
            )
            for month, third in monthperiods_named(query)
            for step in (-1, 0, 1)
        ]
        for first, last in periods_named(query) + yearless:
            before = (moment - datetime(*first.timetuple()[:3], tzinfo=UTC)).total_seconds()
            after = (moment - datetime(*last.timetuple()[:3], tzinfo=UTC)).total_seconds()
            if before < 0:
                nearness.append(max(0.0, 1 + before / 86400))
            elif after > 0:
                nearness.append(max(0.0, 1 - after / 86400 / 7))
            else:
                nearness.append(1.0)
        return max(nearness)

    kind = [
        (django_settings.TIDELINE_SEARCH_PRIOR_WHEN if asks_when(query) else 0)
        * mentions_time(text_terms(raw[int(pk)]))
        + django_settings.TIDELINE_SEARCH_PRIOR_DAY * near_a_named_day(int(pk))
        + django_settings.TIDELINE_SEARCH_PRIOR_PERIOD * near_a_named_period(int(pk))
        + (answer if asks_for_number(query) else 0) * states_number(raw[int(pk)])
        + (answer if asks_for_place(query) else 0) * names_proper(raw[int(pk)])
        for pk in table["id"]
    ]
    priors = (
        django_settings.TIDELINE_SEARCH_PRIOR_WEIGHT * table["weight"]
        + django_settings.TIDELINE_SEARCH_PRIOR_PINNED * table["pinned"]
        + django_settings.TIDELINE_SEARCH_PRIOR_RECENCY * np.exp2(-age / 30.0)
        + decision * (table["layer"] == LAYER_CODES["decision"])
        + np.asarray(kind, dtype=np.float64)
    )
    score = (
        (1 - calibration.semantic_weight) * (bm25 / scale if scale else 0 * bm25)
        + calibration.semantic_weight * np.clip((cosine - low) / (high - low), 0, 1)
        + keyword
        + priors
    )
    if min_semantic is not None:
        candidate &= (bm25 > 0) | (found > 0) | (cosine >= min_semantic)
    candidate &= ~np.isin(table["id"], list(exclude_ids))
    rows = sorted(np.flatnonzero(candidate), key=lambda row: -score[row])[:limit]
    return {int(table["id"][row]): float(score[row]) for row in rows}


def assert_ranked_as(hits, expected: dict[int, float]) -> None:
    assert [hit.score for hit in hits] == pytest.approx(list(expected.values()), abs=1e-4)
    # Rows may only trade places with a row of the same score.
    for hit, score in zip(hits, expected.values(), strict=True):
        assert expected.get(hit.memory.pk, score) == pytest.approx(score, abs=1e-4)


@store_property(max_examples=30)
@given(
    words=st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=14),
    quoted=st.lists(st.sampled_from(VOCABULARY), max_size=2),
    limit=st.integers(min_value=1, max_value=6),
)
def test_it_ranks_memories_exactly_as_scoring_every_row_from_scratch(
    memory_store, words, quoted, limit
):
    query = query_of(words, quoted)
    expected = reference_memory_ranking(query, memory_store.pk, limit)
    hits = memory_search(query=query, scope_ids=[memory_store.pk], limit=limit)
    assert_ranked_as(hits, expected)


@store_property(max_examples=40)
@given(
    words=st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=14),
    min_semantic=st.none() | st.floats(min_value=-0.2, max_value=0.6),
    seen=st.sets(st.integers(min_value=0, max_value=6), max_size=4),
    limit=st.integers(min_value=1, max_value=6),
)
def test_it_scores_the_hits_it_may_show_as_the_unfiltered_ranking_does(
    memory_store, words, min_semantic, seen, limit
):
    """The per-turn block's T1 asks with the model's noise floor as `min_semantic` (held against
    rows that match no word), leaving out what the session was already shown: it must hold
    search's own ranking of the rows left, not a ranking re-scaled to them."""
    query = query_of(words, [])
    stored = list(
        Memory.objects.filter(scope=memory_store).order_by("pk").values_list("pk", flat=True)
    )
    exclude_ids = {stored[position] for position in seen}
    expected = reference_memory_ranking(
        query, memory_store.pk, limit, min_semantic=min_semantic, exclude_ids=exclude_ids
    )
    hits = memory_search(
        query=query,
        scope_ids=[memory_store.pk],
        limit=limit,
        min_semantic=min_semantic,
        exclude_ids=exclude_ids,
    )
    assert min_semantic is None or all(
        hit.semantic >= min_semantic or hit.why["matched_terms"] or hit.why["boosts"]["keyword"]
        for hit in hits
    )
    assert exclude_ids.isdisjoint(hit.memory.pk for hit in hits)
    assert_ranked_as(hits, expected)


def test_it_lets_an_incidental_identifier_in_a_long_dialogue_query_weigh_as_one_term(
    project_scope, write_narrative
):
    content = write_narrative(
        project_scope,
        "Drove up to Maine to see the lighthouse with my sister, bought a blue whale mug, "
        "and we planned a pottery class in the garden studio",
    )
    incidental = write_narrative(project_scope, "Deployed whale-listen to the staging cluster")
    query = (
        "So about last weekend: my sister and I finally drove to Maine and saw the lighthouse. "
        "I bought a blue whale mug there! Next we want a pottery class, maybe in a garden "
        "studio. Then back to work on whale-listen."
    )
    hits = memory_search(query=query, scope_ids=[project_scope.pk], limit=2)
    assert [hit.memory.pk for hit in hits] == [content.pk, incidental.pk]
    assert hits[1].why["literal_matches"] == ["whale-listen"]
    assert 0 < hits[1].why["boosts"]["keyword"] < 1.0
    # The same identifier alone is still a full literal hit.
    alone = memory_search(query="whale-listen", scope_ids=[project_scope.pk], limit=1)
    assert alone[0].memory.pk == incidental.pk
    assert alone[0].why["boosts"]["keyword"] == pytest.approx(1.0)


def test_it_explains_the_negative_prior_of_a_turn_that_asks(transcript_store, settings):
    # The asking turn's prior alone: the length prior every turn gets is off.
    settings.TIDELINE_SEARCH_PRIOR_LENGTH = 0.0
    scope, turns = transcript_store
    hits = turn_search(query="Does Amy still play the cello?", scope_ids=[scope.pk], limit=5)
    asking = next(hit for hit in hits if hit.turn.pk == turns[62].pk)
    assert asking.why["boosts"]["priors"] == pytest.approx(-0.1)
    assert hits[0].turn.pk == turns[61].pk
    assert_ordered_and_explained(hits)


def best_rows_by_full_sort(at: np.ndarray, score: np.ndarray, take: int) -> list[tuple]:
    """(score, row) of the best `take` rows by sorting them all, ties by row number."""
    ranked = sorted(zip(score.tolist(), at.tolist(), strict=True), key=lambda p: (-p[0], p[1]))
    return ranked[:take]


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(min_value=1, max_value=6000),
    take=st.integers(min_value=1, max_value=400),
    levels=st.integers(min_value=1, max_value=50),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_it_takes_the_same_best_rows_as_a_full_sort(size, take, levels, seed):
    rng = np.random.default_rng(seed)
    at = rng.permutation(size * 3)[:size]
    # Few distinct levels make ties common, where a cut must keep every row of the boundary score.
    score = rng.integers(0, levels, size).astype(np.float32)
    chosen = _best_rows(at, score, take)
    expected = best_rows_by_full_sort(at, score, take)
    by_row = dict(zip(at.tolist(), score.tolist(), strict=True))
    assert len(set(chosen.tolist())) == len(chosen) == len(expected)
    assert [by_row[row] for row in chosen.tolist()] == [s for s, _ in expected]


def test_it_falls_back_to_the_full_partition_when_the_sampled_cut_keeps_too_few_rows():
    size, take = 100_000, 2_000
    assert size > SAMPLED_CUT_RATIO * take
    at = np.arange(size)
    score = np.zeros(size, dtype=np.float32)
    # Exactly the strided sample's rows score high, so its threshold lets through fewer than
    # `take` rows; the rest of the best `take` are rows the sample never saw.
    stride = size // SAMPLED_CUT_SAMPLE
    score[::stride] = np.linspace(2.0, 3.0, len(score[::stride]), dtype=np.float32)
    score[1::stride] = 1.0
    chosen = _best_rows(at, score, take)
    assert [(float(score[row]), int(row)) for row in chosen] == best_rows_by_full_sort(
        at, score, take
    )
