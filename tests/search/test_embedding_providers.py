import pytest
from django.core.management import call_command

from memory.models import ContextTurn, EmbeddingStatus, Memory, WordVector
from memory.search import memory_search, turn_search
from memory.services.embedding import memories_embed
from memory.services.timeline import TurnInput, session_start, turns_record
from tests.search.embed_server import FakeEmbedder


@pytest.fixture
def fake_embedder(settings):
    fake = FakeEmbedder()
    settings.TIDELINE_EMBEDDER_RETRIES = 1
    settings.TIDELINE_EMBEDDER_TIMEOUT = 2.0
    yield fake
    fake.stop()


def test_it_keeps_a_write_searchable_when_the_provider_fails_and_backfills_it(
    project_scope, write_narrative, fake_embedder, settings, caplog
):
    settings.TIDELINE_EMBEDDER = "embed_batch"
    settings.TIDELINE_EMBEDDER_URL = f"{fake_embedder.url}/embed"
    fake_embedder.failing = True
    target = write_narrative(project_scope, "The harbour crane inspection is due in April")
    stored = Memory.objects.get(pk=target.pk)
    assert stored.embedding_status == EmbeddingStatus.FAILED and stored.embedding is None
    assert "embedding 1 Memory rows failed" in caplog.text
    fake_embedder.requests.clear()
    assert memories_embed(memory_ids=[target.pk]) == 0
    assert len(fake_embedder.requests) == 2  # one try plus one bounded retry
    hits = memory_search(query="crane inspection", scope_ids=[project_scope.pk])
    assert [hit.memory.pk for hit in hits] == [target.pk]
    assert hits[0].semantic is None

    fake_embedder.failing = False
    call_command("reembed")
    stored.refresh_from_db()
    assert stored.embedding_status == EmbeddingStatus.READY
    assert stored.embedding_model == f"embed_batch:{fake_embedder.url}/embed"
    hits = memory_search(query="harbour crane", scope_ids=[project_scope.pk])
    assert hits[0].memory.pk == target.pk and hits[0].semantic is not None


def test_it_calls_an_openai_compatible_endpoint_with_the_bearer_key(
    project_scope, write_narrative, fake_embedder, settings, monkeypatch
):
    monkeypatch.setenv("TIDELINE_EMBEDDER_API_KEY", "sk-embed-test")
    settings.TIDELINE_EMBEDDER = "openai"
    settings.TIDELINE_EMBEDDER_URL = f"{fake_embedder.url}/v1"
    settings.TIDELINE_EMBEDDER_MODEL = "text-embedding-test"
    target = write_narrative(project_scope, "Ferry timetable changes every October")
    stored = Memory.objects.get(pk=target.pk)
    assert stored.embedding_status == EmbeddingStatus.READY
    assert stored.embedding_model == "openai:text-embedding-test"
    request = fake_embedder.requests[0]
    assert request["path"] == "/v1/embeddings"
    assert request["auth"] == "Bearer sk-embed-test"
    assert request["body"]["model"] == "text-embedding-test"
    hits = memory_search(query="ferry timetable", scope_ids=[project_scope.pk], lexical=False)
    assert hits[0].memory.pk == target.pk and hits[0].semantic > 0.5


def test_it_never_mixes_vectors_of_two_models(
    project_scope, write_narrative, fake_embedder, settings
):
    bundled = write_narrative(project_scope, "Solar panels were installed on the roof")
    settings.TIDELINE_EMBEDDER = "embed_batch"
    settings.TIDELINE_EMBEDDER_URL = f"{fake_embedder.url}/embed"
    hits = memory_search(query="solar panels roof", scope_ids=[project_scope.pk])
    assert hits[0].memory.pk == bundled.pk
    assert hits[0].semantic is None  # its vector is from another model: keyword only
    call_command("reembed")
    hits = memory_search(query="solar panels roof", scope_ids=[project_scope.pk])
    assert hits[0].semantic is not None


def test_it_embeds_no_words_for_a_model_without_an_expansion_floor(
    project_scope, fake_embedder, settings, django_capture_on_commit_callbacks
):
    """Query expansion is calibrated per model; an unmeasured provider expands nothing, so it is
    not paid to embed the store's words."""
    settings.TIDELINE_EMBEDDER = "embed_batch"
    settings.TIDELINE_EMBEDDER_URL = f"{fake_embedder.url}/embed"
    session = session_start(runtime="test", external_id="words", scope_id=project_scope.pk)
    with django_capture_on_commit_callbacks(execute=True):
        turns = turns_record(
            session_id=session.pk,
            turns=[TurnInput(role="user", content="The ferry leaves the harbour at dawn")],
        )
    assert ContextTurn.objects.get(pk=turns[0].pk).embedding_status == EmbeddingStatus.READY
    said = ["The ferry leaves the harbour at dawn"]
    assert fake_embedder.requests
    assert all(request["body"]["texts"] == said for request in fake_embedder.requests)
    assert not WordVector.objects.exists()
    call_command("reembed")
    assert not WordVector.objects.exists()
    hits = turn_search(query="When does the boat leave?", scope_ids=[project_scope.pk])
    assert hits[0].why["expansions"] == {}
