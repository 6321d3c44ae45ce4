"""The store. Every table the memory services read and write; one idea per module."""

from memory.models.audit import Actor, AuditAction, AuditEvent
from memory.models.keys import ApiKey
from memory.models.memories import (
    EmbeddingStatus,
    ExpiredBy,
    Fact,
    FactKind,
    Memory,
    MemoryStatus,
    MemoryType,
    Narrative,
    NarrativeLayer,
    NarrativeTag,
    SelfConcept,
    SelfConceptField,
)
from memory.models.profiles import Profile, ProfileKind
from memory.models.scopes import Scope, ScopeKind
from memory.models.search import WordVector
from memory.models.timeline import (
    AttentionEvent,
    ContextTurn,
    Evidence,
    InboxItem,
    InboxStatus,
    Session,
    SessionOrigin,
    Snapshot,
    Thread,
    ThreadStatus,
)

__all__ = [
    "Actor",
    "ApiKey",
    "AttentionEvent",
    "AuditAction",
    "AuditEvent",
    "ContextTurn",
    "EmbeddingStatus",
    "Evidence",
    "ExpiredBy",
    "Fact",
    "FactKind",
    "InboxItem",
    "InboxStatus",
    "Memory",
    "MemoryStatus",
    "MemoryType",
    "Narrative",
    "NarrativeLayer",
    "NarrativeTag",
    "Profile",
    "ProfileKind",
    "Scope",
    "ScopeKind",
    "SelfConcept",
    "SelfConceptField",
    "Session",
    "SessionOrigin",
    "Snapshot",
    "Thread",
    "ThreadStatus",
    "WordVector",
]
