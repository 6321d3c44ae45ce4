"""Query expansion: a turn query's words reach the store's words nearest them ("child" reaches
"kid"), only words the caller's visible turns hold, never a speaker's name, and not for a
dialogue-length query. Runs on both backends (in-process index and PostgreSQL's native view)."""

from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import call_command

from memory.models import WordVector
from memory.search import turn_search
from memory.search.expansion import text_words, vocabulary_get
from memory.services.embedding import embedder_get, words_embed
from tests.search.turns import record

WHEN = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)
MODEL = "usem3-multilingual-v3"


CAMERA = [
    ("John", "I found the old film camera I had as a kid in the attic."),
    ("Maria", "That sounds lovely, do you still use it?"),
    ("John", "Sometimes, mostly for landscapes on weekends."),
    ("Maria", "My sister bought a bicycle yesterday."),
]
QUESTION = "What did John have as a child?"


def test_it_reads_a_text_as_the_words_it_can_expand():
    words = text_words(
        "The kids' 3 cameras, and I had 2023-05-08 ok? 我喜欢猫 ¿Qué pasó ayer? Kids!"
    )
    surfaces = [surface for _, surface in words]
    assert surfaces.count("kids") == 2 and "cameras" in surfaces and "ayer" in surfaces
    # Numbers, dates and words shorter than three letters are not topics.
    assert not any(term.isdigit() for term, _ in words)
    assert "ok" not in surfaces
    # One term per word: a CJK run that segments into several is not one word.
    assert "我喜欢猫" not in surfaces


def test_it_embeds_each_word_of_the_turns_once(project_scope, django_capture_on_commit_callbacks):
    record(project_scope, "camera", CAMERA, WHEN, django_capture_on_commit_callbacks)
    record(project_scope, "again", CAMERA[:1], WHEN, django_capture_on_commit_callbacks)
    stored = list(WordVector.objects.values_list("word", "term"))
    words = [word for word, _ in stored]
    assert {"kid", "camera", "attic", "landscapes", "bicycle"} <= set(words)
    assert len(words) == len(set(words))
    assert len({term for _, term in stored}) == len(stored)
    assert all(
        len(bytes(blob)) == 512 * 4
        for blob in WordVector.objects.values_list("embedding", flat=True)
    )


@pytest.mark.parametrize("exact_rows", [2000, 0])
def test_it_lifts_the_turn_that_says_a_word_near_the_questions(
    project_scope, django_capture_on_commit_callbacks, settings, exact_rows
):
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = exact_rows
    settings.TIDELINE_SEARCH_PRIOR_SPEAKER = 0.0
    settings.TIDELINE_SEARCH_PRIOR_QUESTION = 0.0
    settings.TIDELINE_SEARCH_PRIOR_LENGTH = 0.0
    settings.TIDELINE_SEARCH_PRIOR_OPENING = 0.0
    turns = record(project_scope, "camera", CAMERA, WHEN, django_capture_on_commit_callbacks)

    hits = turn_search(query=QUESTION, scope_ids=[project_scope.pk], limit=4)
    assert "kid" in hits[0].why["expansions"]["child"]
    priors = {hit.turn.pk: hit.why["boosts"]["priors"] for hit in hits}
    # The expansion's BM25 is scaled to its best turn: that turn gets the whole weight.
    assert priors[turns[0].pk] == pytest.approx(0.1)
    assert hits[0].turn.pk == turns[0].pk

    settings.TIDELINE_SEARCH_EXPANSION_WEIGHT = 0.0
    plain = turn_search(query=QUESTION, scope_ids=[project_scope.pk], limit=4)
    assert all(hit.why["expansions"] == {} for hit in plain)
    assert all(hit.why["boosts"]["priors"] == 0 for hit in plain)
    scores = {hit.turn.pk: hit.score for hit in plain}
    assert scores[turns[0].pk] == pytest.approx(hits[0].score - 0.1, abs=1e-4)


@pytest.mark.parametrize("exact_rows", [2000, 0])
def test_it_expands_only_by_words_the_callers_scopes_hold(
    project_scope, other_project_scope, django_capture_on_commit_callbacks, settings, exact_rows
):
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = exact_rows
    record(other_project_scope, "camera", CAMERA, WHEN, django_capture_on_commit_callbacks)
    mine = record(
        project_scope,
        "mine",
        [("Ana", "The toddler slept through the night at last."), ("Ben", "Lucky you.")],
        WHEN,
        django_capture_on_commit_callbacks,
    )
    # "kid" has a vector (the other project said it), but this project never did: it must not
    # expand the query, nor take the place of a word this project holds.
    assert WordVector.objects.filter(word="kid").exists()
    hits = turn_search(query=QUESTION, scope_ids=[project_scope.pk], limit=2)
    expanded = {word for hit in hits for words in hit.why["expansions"].values() for word in words}
    assert expanded == {"toddler"}
    assert hits[0].turn.pk == mine[0].pk

    both = turn_search(
        query=QUESTION, scope_ids=[project_scope.pk, other_project_scope.pk], limit=2
    )
    assert "kid" in both[0].why["expansions"]["child"]


def test_it_never_expands_by_or_for_a_speakers_name(
    project_scope, django_capture_on_commit_callbacks
):
    record(
        project_scope,
        "names",
        [("Melanie", "I went hiking with Caroline."), ("Caroline", "Melanie loves the hills.")],
        WHEN,
        django_capture_on_commit_callbacks,
    )
    hits = turn_search(query="Where did Melanie go walking?", scope_ids=[project_scope.pk])
    expansions = hits[0].why["expansions"]
    # "walking" reaches "hiking"; "melanie" is a speaker's name, so it is not expanded.
    assert expansions == {"walk": ["hike"]}
    assert not {"melanie", "caroline"} & {word for words in expansions.values() for word in words}


def test_it_leaves_a_dialogue_length_query_unexpanded(
    project_scope, django_capture_on_commit_callbacks, settings
):
    record(project_scope, "camera", CAMERA, WHEN, django_capture_on_commit_callbacks)
    long_query = (
        "Yesterday we talked about my childhood, the house by the river, my grandmother's garden, "
        "the dog we had, school trips, summer holidays and what did I have as a child?"
    )
    hits = turn_search(query=long_query, scope_ids=[project_scope.pk])
    assert hits and all(hit.why["expansions"] == {} for hit in hits)
    settings.TIDELINE_SEARCH_EXPANSION_MAX_TERMS = 40
    hits = turn_search(query=long_query, scope_ids=[project_scope.pk])
    assert hits[0].why["expansions"]


def test_it_embeds_the_words_of_turns_stored_before_expansion_when_reembedding(
    project_scope, django_capture_on_commit_callbacks
):
    record(project_scope, "camera", CAMERA, WHEN, django_capture_on_commit_callbacks)
    WordVector.objects.all().delete()
    out = StringIO()
    call_command("reembed", stdout=out, stderr=StringIO())
    assert "0 turns" in out.getvalue()
    assert WordVector.objects.filter(word="kid").exists()
    count = WordVector.objects.count()
    assert f"{count} new words" in out.getvalue()

    call_command("reembed", stdout=out, stderr=StringIO())
    assert WordVector.objects.count() == count


def test_it_keeps_every_word_as_the_vocabulary_grows_and_starts_over_when_rows_vanish(db):
    letters = "abcdefghijklmnopqrstuvwxyz"
    filler = " ".join(f"zq{a}{b}{c}" for a in letters[:11] for b in letters for c in letters[:4])
    assert words_embed(texts=[filler]) > 1024
    vocabulary = vocabulary_get(model_id=MODEL, dim=512)
    held = vocabulary.size
    assert words_embed(texts=["The toddler slept."]) == 2
    vocabulary = vocabulary_get(model_id=MODEL, dim=512)
    assert vocabulary.size == held + 2
    child = embedder_get().embed_passages(["child"])
    assert "toddler" in vocabulary.nearest(child, count=3, least=0.5)[0]

    # Rows the process held are gone (SQLite hands their ids to the next insert after a
    # rollback): the vocabulary is read again, not extended.
    WordVector.objects.all().delete()
    words_embed(texts=["My kid loves the beach."])
    vocabulary = vocabulary_get(model_id=MODEL, dim=512)
    assert sorted(vocabulary.terms[: vocabulary.size]) == sorted(
        WordVector.objects.values_list("term", flat=True)
    )
    assert vocabulary.nearest(child, count=3, least=0.5)[0][0] == "kid"
