from injection.services.warmup import server_warm, server_warm_in_background
from memory.models import EmbeddingStatus, Memory
from memory.search import service
from memory.services.narratives import NarrativeInput, narrative_write


def test_it_loads_the_embedder_jieba_and_both_indexes(global_scope):
    narrative_write(data=NarrativeInput(scope_id=global_scope.pk, gesture="warm the lighthouse"))
    service._indexes.clear()
    spent = server_warm()
    assert set(spent) == {"embedder", "embeddings_pending", "jieba", "memory_index", "turn_index"}
    assert {"memory", "turn"} <= set(service._indexes)


def test_it_warms_in_a_background_thread_that_ends(transactional_db):
    thread = server_warm_in_background()
    thread.join(timeout=60)
    assert not thread.is_alive()


def test_it_embeds_what_a_crash_left_pending_when_there_is_no_broker(global_scope):
    # No on_commit callbacks run in a plain db test: the row stays pending, as after a crash.
    narrative = narrative_write(
        data=NarrativeInput(scope_id=global_scope.pk, gesture="the tide log survived a crash")
    )
    assert Memory.objects.get(pk=narrative.pk).embedding_status == EmbeddingStatus.PENDING
    server_warm()
    assert Memory.objects.get(pk=narrative.pk).embedding_status == EmbeddingStatus.READY
