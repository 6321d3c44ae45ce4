import numpy as np
import pytest
from django.test import Client

from injection.services.access import apikey_create
from memory.models import Memory, Narrative, ScopeKind
from memory.services.embedding import embedder_get, vector_to_bytes
from memory.services.narratives import NarrativeInput, narrative_write
from memory.services.scopes import scope_ensure


@pytest.fixture
def project_dir(tmp_path):
    """A real directory registered as a project, so `cwd` resolves to it."""
    path = tmp_path / "archive-manager"
    path.mkdir()
    return path


@pytest.fixture
def project(db, project_dir):
    return scope_ensure(kind=ScopeKind.PROJECT, key=str(project_dir))


@pytest.fixture
def other_dir(tmp_path):
    path = tmp_path / "billing-service"
    path.mkdir()
    return path


@pytest.fixture
def other_project(db, other_dir):
    return scope_ensure(kind=ScopeKind.PROJECT, key=str(other_dir))


@pytest.fixture
def api_key(project) -> str:
    _, raw = apikey_create(name="test agent", scope_ids=[project.pk])
    return raw


@pytest.fixture
def api(api_key) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {api_key}")


def narrative_seed(scope, gesture: str, *, tags=(), **fields) -> Narrative:
    return narrative_write(
        data=NarrativeInput(gesture=gesture, scope_id=scope.pk, tags=list(tags), **fields)
    )


def weights_set(weights: dict) -> None:
    """Pin exact weights once every narrative is written: each write re-bands its tag siblings and
    anti-inflation rescales the newest, so a test that needs exact weights sets them last."""
    for narrative, weight in weights.items():
        Narrative.objects.filter(pk=narrative.pk).update(weight=weight)


def vector_at_cosine(query_vector: np.ndarray, cosine: float, seed: int) -> np.ndarray:
    """A unit vector whose cosine with `query_vector` is exactly `cosine`."""
    rng = np.random.default_rng(seed)
    noise = rng.normal(size=query_vector.shape).astype(np.float64)
    noise -= noise.dot(query_vector) * query_vector
    noise /= np.linalg.norm(noise)
    vector = cosine * query_vector + np.sqrt(1 - cosine**2) * noise
    return (vector / np.linalg.norm(vector)).astype(np.float32)


def embedding_set(memory_id: int, vector: np.ndarray) -> None:
    Memory.objects.filter(pk=memory_id).update(
        embedding=vector_to_bytes(vector),
        embedding_model=embedder_get().model_id,
        embedding_status="ready",
    )


def query_vector(text: str) -> np.ndarray:
    return embedder_get().embed([text])[0].astype(np.float64)
