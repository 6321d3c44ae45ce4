"""Search: the one retrieval core every read path uses (injection, MCP, REST, admin).

    from memory.search import memory_search, turn_search, MemoryHit, TurnHit

Hybrid lexical (BM25 over CJK-aware terms, FTS5 word + trigram indexes on SQLite) and semantic
(cosine over the configured embedder's vectors) ranking, scope-filtered and fail-closed: an empty
`scope_ids` returns nothing. See `memory.search.service` for the scoring.
"""

from memory.search.service import MemoryHit, TurnHit, memory_search, turn_search

__all__ = ["MemoryHit", "TurnHit", "memory_search", "turn_search"]
