"""The in-process index's projected cosine scan (memory/search/index.py, SearchIndex.cosines)."""

import numpy as np
import pytest
from django.db import connection

from memory.search import memory_search, service
from memory.search.calibration import calibration_get
from memory.services.embedding import embedder_get

pytestmark = pytest.mark.django_db

TOPICS = [
    "the nightly backup of the archive runs at 3 am",
    "the user prefers neovim for editing code",
    "rate limits on the public API are 100 requests per minute",
    "处理边界条件时先写兜底逻辑",
    "テストの自動化を進めている",
    "el equipo prefiere el despliegue con Docker",
]


def _ranked(query: str, scope_id: int, min_semantic: float | None) -> list[tuple[int, float]]:
    """The four notes of the query's own topic, best first, with their scores."""
    hits = memory_search(query=query, scope_ids=[scope_id], limit=4, min_semantic=min_semantic)
    return [(hit.memory.pk, hit.score) for hit in hits]


def test_it_projects_every_stored_row_and_ranks_as_the_exact_scan(
    settings, project_scope, write_narrative
):
    if connection.vendor != "sqlite":
        pytest.skip("the in-process index is SQLite's default")
    for number in range(24):
        write_narrative(project_scope, f"{TOPICS[number % len(TOPICS)]} (note {number})")
    queries = ["when does the backup run", "which editor", "边界", "Docker"]
    # Each as search asks it, and as the per-turn block's T1 asks it (above the noise floor).
    asked = [
        (query, floor)
        for query in queries
        for floor in (None, calibration_get(embedder_get().model_id).noise_floor)
    ]
    settings.TIDELINE_SEARCH_PROJECTION_MIN_ROWS = 10**9
    exact = [_ranked(query, project_scope.pk, floor) for query, floor in asked]

    settings.TIDELINE_SEARCH_PROJECTION_MIN_ROWS = 10
    settings.TIDELINE_SEARCH_PROJECTION_DIM = 16
    # The shortlist (500) holds every row here, so exact re-scoring gives the exact order, and
    # the scores within rounding: the top of the cosine scale is read off the exact cosines too
    # (read off the projected ones, the best notes of a topic were clipped to one score and tied;
    # its bottom is the model's noise floor either way).
    for (query, floor), expected in zip(asked, exact, strict=True):
        ranked = _ranked(query, project_scope.pk, floor)
        assert [pk for pk, _ in ranked] == [pk for pk, _ in expected]
        assert [score for _, score in ranked] == pytest.approx(
            [score for _, score in expected], abs=1e-3
        )
    # Rows stored after the projection was built are projected too, as the matrix grows.
    for number in range(24, 40):
        write_narrative(project_scope, f"{TOPICS[number % len(TOPICS)]} (note {number})")
    index = service.search_index("memory")
    vector = embedder_get().embed_query("when does the backup run")
    approximate, projected = index.cosines(vector)
    assert projected and len(approximate) == index.table.size >= 40
    size = index.table.size
    expected = (index.table.vectors[:size] @ index.basis) @ (vector @ index.basis)
    assert np.allclose(approximate, expected, atol=1e-5)
    # Sixteen principal directions of 40 rows already order them much as the full vectors do.
    full = index.table.vectors[:size] @ vector
    assert np.corrcoef(approximate, full)[0, 1] > 0.9
