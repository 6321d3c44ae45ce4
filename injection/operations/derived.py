"""Operations over what DREAM derives — the attention heatmap, clusters, the entity graph — and
the store's counts. Each is computed from what the caller may see and nothing else."""

from dream.selectors import attention_heatmap_read, entity_graph_read, soft_clusters_read
from injection.operations.calls import Caller, operation, readable_or_held_ids
from injection.operations.fields import AttentionIn, WhereIn
from memory.selectors.reads import store_counts


@operation
def heatmap_read(*, caller: Caller, data: AttentionIn) -> dict:
    """Which memory clusters recall lit up per day, and which stayed dark (possible blind
    spots). Mechanical counts, not self-report."""
    return attention_heatmap_read(
        days=data.days, scope_ids=readable_or_held_ids(caller=caller, where=data)
    )


@operation
def clusters_read(*, caller: Caller, data: WhereIn) -> dict:
    """Embedding-space clusters (each memory in its nearest few) and how they neighbour."""
    scope_ids = readable_or_held_ids(caller=caller, where=data)
    return {"clusters": soft_clusters_read(scope_ids=scope_ids)}


@operation
def graph_read(*, caller: Caller, data: WhereIn) -> dict:
    """The entity graph: who appears with whom across memories, and in which roles."""
    return entity_graph_read(scope_ids=readable_or_held_ids(caller=caller, where=data))


@operation
def stats_read(*, caller: Caller, data: WhereIn) -> dict:
    """Counts: memories by kind and status, sessions, turns, embedding backlog, attention."""
    return store_counts(
        principal=caller.principal, scope_ids=readable_or_held_ids(caller=caller, where=data)
    )
