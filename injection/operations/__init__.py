"""The one door: one typed operation per thing an agent (or the owner) can do.

REST (`injection/api.py`) and MCP (`injection/mcp_server.py`) are two thin shells over these
functions: they parse, call one operation, and return its dict. An operation resolves the scope,
authorises, and only then creates anything; reads go through the visibility rule in
`memory/selectors/`; every audit row it writes carries the caller's actor, key id and request id.
"""

from injection.operations.calls import Caller
from injection.operations.context import (
    memories_surface,
    session_begin,
    sessions_search,
    timeline_read,
    transcript_record,
    turn_record,
    turn_take,
    turns_record,
    turns_search,
)
from injection.operations.derived import clusters_read, graph_read, heatmap_read, stats_read
from injection.operations.identity import (
    self_concept_read,
    self_concept_set,
    snapshot_create,
    snapshots_list,
    thread_create,
    thread_update,
    threads_list,
)
from injection.operations.memories import (
    fact_create,
    memories_list,
    memories_search,
    memory_edit,
    memory_expire,
    memory_recall,
    narrative_create,
    profiles_list,
)

__all__ = [
    "Caller",
    "clusters_read",
    "fact_create",
    "graph_read",
    "heatmap_read",
    "memories_list",
    "memories_search",
    "memories_surface",
    "memory_edit",
    "memory_expire",
    "memory_recall",
    "narrative_create",
    "profiles_list",
    "self_concept_read",
    "self_concept_set",
    "session_begin",
    "sessions_search",
    "snapshot_create",
    "snapshots_list",
    "stats_read",
    "thread_create",
    "thread_update",
    "threads_list",
    "timeline_read",
    "transcript_record",
    "turn_record",
    "turn_take",
    "turns_record",
    "turns_search",
]
