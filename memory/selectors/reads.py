"""Read models over the visibility rule: listings, the self-concept, profiles, the timeline and
counts. Each takes the principal and the scope ids it reads, and never widens them."""

from datetime import timedelta

from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from memory.models import (
    AttentionEvent,
    AuditAction,
    AuditEvent,
    ContextTurn,
    EmbeddingStatus,
    Evidence,
    Fact,
    Memory,
    MemoryStatus,
    MemoryType,
    Profile,
    ScopeKind,
    SelfConcept,
    SelfConceptField,
    Session,
    ThreadStatus,
)
from memory.selectors.visibility import (
    Principal,
    facts_visible,
    memories_visible,
    profiles_visible,
    scope_ids_held,
    sessions_named,
    sessions_visible,
    snapshots_visible,
    threads_visible,
    turns_visible,
)
from memory.services.errors import InvalidInput, NotFound

LIST_MAX = 200


MEMORY_TARGET_TYPES = ("memory", "narrative", "fact", "selfconcept")


def audit_events_of_memory(*, memory_id: int) -> QuerySet[AuditEvent]:
    """Every decision that touched a memory (the owner's view): those about it, and those that
    changed its status while being about another row — an edit supersedes the old version in the
    audit row of its successor, a merge in the row of the memory it merged into."""
    return AuditEvent.objects.filter(
        Q(target_type__in=MEMORY_TARGET_TYPES, target_id=memory_id)
        | Q(after__statuses__has_key=str(memory_id))
    )


def memories_page(
    *,
    principal: Principal,
    scope_ids: list[int],
    memory_type: str = "",
    status: str = MemoryStatus.ACTIVE,
    limit: int = 50,
    offset: int = 0,
) -> list[Memory]:
    """Newest first; `status` "" means every status (the history)."""
    if memory_type and memory_type not in MemoryType.values:
        raise InvalidInput(f"memory_type must be one of {MemoryType.values}", field="memory_type")
    if status and status not in MemoryStatus.values:
        raise InvalidInput(f"status must be one of {MemoryStatus.values}", field="status")
    rows = memories_visible(
        principal=principal,
        scope_ids=scope_ids,
        statuses=[status] if status else list(MemoryStatus.values),
    ).select_related("scope")
    if memory_type:
        rows = rows.filter(memory_type=memory_type)
    limit = max(1, min(LIST_MAX, limit))
    offset = max(0, offset)
    return list(rows.order_by("-recorded_at", "-pk")[offset : offset + limit])


def memory_evidence(*, principal: Principal, memory: Memory, limit: int) -> list[ContextTurn]:
    """The raw turns a memory was distilled from that the principal may read, oldest first."""
    links = (
        Evidence.objects.filter(
            memory=memory,
            turn__in=turns_visible(
                principal=principal, scope_ids=scope_ids_held(principal=principal)
            ),
        )
        .select_related("turn")
        .order_by("turn__occurred_at", "turn__pk")[: max(0, limit)]
    )
    return [link.turn for link in links]


def self_concept_current(*, principal: Principal, scope_ids: list[int]) -> dict[str, SelfConcept]:
    rows = memories_visible(principal=principal, scope_ids=scope_ids).filter(
        memory_type=MemoryType.SELF_CONCEPT
    )
    concepts = SelfConcept.objects.filter(pk__in=rows.values("pk")).order_by("recorded_at", "pk")
    current = {concept.field: concept for concept in concepts}
    return {name: current[name] for name in SelfConceptField.values if name in current}


def threads_page(
    *, principal: Principal, scope_ids: list[int], status: str = "", limit: int = 50
) -> QuerySet:
    if status and status not in ThreadStatus.values:
        raise InvalidInput(f"status must be one of {ThreadStatus.values}", field="status")
    rows = threads_visible(principal=principal, scope_ids=scope_ids)
    if status:
        rows = rows.filter(status=status)
    return rows.order_by("-weight", "-created_at")[: max(1, min(limit, LIST_MAX))]


def thread_visible(*, principal: Principal, scope_ids: list[int], thread_id: int):
    thread = threads_visible(principal=principal, scope_ids=scope_ids).filter(pk=thread_id).first()
    if thread is None:
        raise NotFound(f"unknown thread {thread_id}")
    return thread


def snapshots_newest(*, principal: Principal, scope_ids: list[int], limit: int = 1) -> QuerySet:
    rows = snapshots_visible(principal=principal, scope_ids=scope_ids)
    return rows.order_by("-created_at", "-pk")[: max(1, min(limit, LIST_MAX))]


def profiles_with_facts(
    *, principal: Principal, scope_ids: list[int], name: str = ""
) -> list[tuple[Profile, list[Fact]]]:
    profiles = profiles_visible(principal=principal, scope_ids=scope_ids).select_related("scope")
    if name:
        profiles = profiles.filter(Q(name__iexact=name) | Q(aliases__icontains=name))
    chosen = list(profiles.order_by("-pinned", "name")[:LIST_MAX])
    facts: dict[int, list[Fact]] = {profile.pk: [] for profile in chosen}
    for fact in (
        facts_visible(principal=principal, scope_ids=scope_ids)
        .filter(profile_id__in=list(facts))
        .order_by("predicate")
    ):
        facts[fact.profile_id].append(fact)
    return [(profile, facts[profile.pk]) for profile in chosen]


# Narrowest first: a name used in the caller's project means its own session before a
# workspace's, and a workspace's before global's, which any key holding global may write.
SCOPE_KIND_NEARNESS = {ScopeKind.PROJECT: 0, ScopeKind.WORKSPACE: 1, ScopeKind.GLOBAL: 2}


def sessions_meant(
    *,
    principal: Principal,
    scope_ids: list[int],
    scope_id: int,
    external_id: str,
    runtime: str = "",
) -> list[Session]:
    """The sessions a caller working in scope `scope_id` means by a session id (and `runtime`,
    when given), newest first: those of that scope, else those of the narrowest kind among the
    other scopes of `scope_ids` that hold any — projects, then a workspace, then global. A reader
    in a place passes the one project, workspace and global it reads; a writer every scope its
    key holds, so a session that moved on from another project goes on as its segment there.
    Reads and writes both ask here, so a turn goes to the session the timeline shows, and a
    session of the same id in a wider scope (another key's, in global) never shadows the
    caller's own nor makes its name ambiguous. One scope holds the id once per runtime (the
    database keeps (runtime, id) unique; another scope's part is a segment), so several rows
    from one scope mean several runtimes."""
    named = sessions_named(principal=principal, scope_ids=scope_ids, external_id=external_id)
    if runtime:
        named = named.filter(runtime=runtime)
    rows = list(named.select_related("scope").order_by("-started_at", "-pk"))

    def nearness(session: Session) -> tuple[bool, int]:
        return session.scope_id != scope_id, SCOPE_KIND_NEARNESS[session.scope.kind]

    nearest = min(map(nearness, rows), default=None)
    return [session for session in rows if nearness(session) == nearest]


def session_visible_pk(
    *, principal: Principal, scope_ids: list[int], scope_id: int, external_id: str
) -> int:
    """The session a reader in `scope_id` means by `external_id` (sessions_meant); of several
    runtimes there, the newest, as a read names no runtime."""
    meant = sessions_meant(
        principal=principal, scope_ids=scope_ids, scope_id=scope_id, external_id=external_id
    )
    if not meant:
        raise NotFound(f"unknown session {external_id!r}", field="session_id")
    return meant[0].pk


def timeline_stretch(
    *,
    principal: Principal,
    scope_ids: list[int],
    session_pk: int | None = None,
    around_turn_id: int | None = None,
    limit: int = 20,
) -> list[ContextTurn]:
    """A stretch of the raw timeline: the turns around one turn (the way back from a memory's
    evidence to its texture), a session's newest turns, or the newest turns in these scopes."""
    limit = max(1, min(limit, LIST_MAX))
    turns = turns_visible(principal=principal, scope_ids=scope_ids)
    if around_turn_id is not None:
        anchor = turns.filter(pk=around_turn_id).first()
        if anchor is None:
            raise NotFound(f"unknown turn {around_turn_id}", field="around_turn_id")
        half = limit // 2
        same = turns.filter(session_id=anchor.session_id)
        before = list(same.filter(seq__lt=anchor.seq).order_by("-seq")[:half])
        after = list(same.filter(seq__gte=anchor.seq).order_by("seq")[: limit - len(before)])
        return [*reversed(before), *after]
    if session_pk is not None:
        turns = turns.filter(session_id=session_pk)
    return list(reversed(turns.order_by("-occurred_at", "-pk")[:limit]))


def store_counts(*, principal: Principal, scope_ids: list[int]) -> dict:
    """Counts of what this principal may see, never of anything else."""
    memories = memories_visible(
        principal=principal, scope_ids=scope_ids, statuses=list(MemoryStatus.values)
    )
    by_type_status: dict[str, dict[str, int]] = {}
    for row in memories.order_by().values("memory_type", "status").annotate(n=Count("id")):
        by_type_status.setdefault(row["memory_type"], {})[row["status"]] = row["n"]
    week = timezone.now() - timedelta(days=7)
    return {
        "memories": by_type_status,
        "needs_embedding": memories.filter(
            embedding_status__in=[EmbeddingStatus.PENDING, EmbeddingStatus.FAILED]
        ).count(),
        "sessions": sessions_visible(principal=principal, scope_ids=scope_ids).count(),
        "turns": turns_visible(principal=principal, scope_ids=scope_ids).count(),
        "threads_open": threads_visible(principal=principal, scope_ids=scope_ids)
        .filter(status=ThreadStatus.OPEN)
        .count(),
        "attention_7d": AttentionEvent.objects.filter(
            memory__in=memories.filter(status=MemoryStatus.ACTIVE).values("pk"),
            occurred_at__gte=week,
        ).count(),
    }


def decision_made(
    *, request_id: str, memory: Memory, hidden: frozenset[int] = frozenset()
) -> dict | None:
    """What the write path decided about this memory in this request (inserted, merged, skipped,
    invalidated, rejected, …) and why — read back from the audit log it was recorded in.
    `hidden`: ids the caller may not read (memory_links_hidden); a value that replaced one of
    them is told as inserted, what the caller would have been told had it never been written."""
    event = (
        AuditEvent.objects.filter(
            target_type__in=["memory", memory._meta.model_name],
            target_id=memory.pk,
            request_id=request_id,
        )
        .order_by("-pk")
        .first()
    )
    if event is None:
        return None
    if event.action == AuditAction.INVALIDATE and (event.before or {}).get("id") in hidden:
        return {"action": AuditAction.INSERT.value, "reason": event.reason}
    return {"action": event.action, "reason": event.reason}
