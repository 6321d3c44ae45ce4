from injection.services.warmup import server_warm, server_warm_in_background
from memory.search import service
from memory.services.narratives import NarrativeInput, narrative_write


def test_it_loads_the_embedder_jieba_and_both_indexes(global_scope):
    narrative_write(data=NarrativeInput(scope_id=global_scope.pk, gesture="warm the lighthouse"))
    service._indexes.clear()
    spent = server_warm()
    assert set(spent) == {"embedder", "jieba", "memory_index", "turn_index"}
    assert {"memory", "turn"} <= set(service._indexes)


def test_it_warms_in_a_background_thread_that_ends(transactional_db):
    thread = server_warm_in_background()
    thread.join(timeout=60)
    assert not thread.is_alive()
