"""Search: the one retrieval core every read path uses (injection, MCP, REST, admin).

    from memory.search import memory_search, turn_search, MemoryHit, TurnHit

Hybrid lexical (BM25 over CJK-aware terms, FTS5 word + trigram indexes on SQLite) and semantic
(cosine over the configured embedder's vectors) ranking, scope-filtered and fail-closed: an empty
`scope_ids` returns nothing. See `memory.search.service` for the scoring.
"""

from typing import Any

__all__ = ["MemoryHit", "TurnHit", "memory_search", "turn_search"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: the app registry imports `memory.search.schema` at start-up (to register
    # the SQL functions on each connection), and the ranking core (numpy, the indexes) is not
    # needed by a process that only answers an MCP handshake or runs `migrate`.
    if name in __all__:
        from memory.search import service

        return getattr(service, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
