"""The one visibility rule: what a principal may see.

Every read path (search, injection, REST, MCP, owner pages, DREAM inputs, exports) asks here. A
principal sees the scopes it holds — a project, the workspace that contains it, and global unless
its key says otherwise — and, inside them, current memories only (unless a history is asked for
by status or `as_of`). Secret memories are shown to the owner only: never to an agent, never to an
LLM. Everything is fail-closed: an unknown or unheld scope is simply not in the result.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Exists, OuterRef, QuerySet

from memory.models import (
    Actor,
    ContextTurn,
    Fact,
    Memory,
    MemoryStatus,
    Profile,
    Scope,
    ScopeKind,
    Session,
    Snapshot,
    Thread,
)
from memory.services.consolidation import valid_q
from memory.services.errors import NotFound
from memory.services.scopes import scope_global, scope_visible_ids
from memory.services.timeline import segment_external_id


@dataclass(frozen=True)
class Principal:
    """Who is asking. `scope_ids` None means every scope (the local owner or agent)."""

    name: str
    actor: str
    scope_ids: frozenset[int] | None
    include_global: bool = True
    can_write: bool = True
    key_id: int | None = None
    sees_secrets: bool = False

    def allows(self, scope: Scope) -> bool:
        if self.scope_ids is None:
            return True
        if scope.kind == ScopeKind.GLOBAL:
            return self.include_global
        return scope.pk in self.scope_ids or (
            scope.workspace_id is not None and scope.workspace_id in self.scope_ids
        )


# The person who owns the store: the owner panel and management commands.
OWNER = Principal(name="owner", actor=Actor.OWNER, scope_ids=None, sees_secrets=True)
# An agent on this machine with no key (the stdio MCP server): every scope, but an agent.
LOCAL_AGENT = Principal(name="local agent", actor=Actor.AGENT, scope_ids=None)


def principal_for_scope(*, scope: Scope, actor: str = Actor.SYSTEM) -> Principal:
    """A principal confined to one scope, e.g. a DREAM layer consolidating that scope."""
    return Principal(
        name=f"{actor} in {scope.label}",
        actor=actor,
        scope_ids=frozenset({scope.pk}),
        include_global=scope.kind == ScopeKind.GLOBAL,
    )


def scope_ids_readable(*, principal: Principal, scope: Scope) -> list[int]:
    """The scopes a caller working in `scope` reads: the project, its workspace and global, minus
    any the principal does not hold."""
    return [
        pk
        for pk in scope_visible_ids(scope=scope)
        if principal.scope_ids is None
        or pk == scope.pk
        or pk in principal.scope_ids
        or (principal.include_global and pk == scope_global().pk)
    ]


def scope_ids_held(*, principal: Principal) -> list[int]:
    """Every scope the principal may read, for requests that name no scope (stats, search)."""
    if principal.scope_ids is None:
        return list(Scope.objects.order_by("pk").values_list("pk", flat=True))
    ids = set(principal.scope_ids)
    ids.update(
        Scope.objects.filter(workspace_id__in=principal.scope_ids).values_list("pk", flat=True)
    )
    if principal.include_global:
        ids.add(scope_global().pk)
    return sorted(ids)


def _without_secrets(rows: QuerySet, principal: Principal) -> QuerySet:
    return rows if principal.sees_secrets else rows.filter(secret=False)


def memories_visible(
    *, principal: Principal, scope_ids: list[int], statuses: list[str] | None = None
) -> QuerySet[Memory]:
    """Memories of `scope_ids` the principal may read; current (active) ones unless `statuses`
    asks for history."""
    rows = Memory.objects.filter(
        scope_id__in=scope_ids, status__in=statuses or [MemoryStatus.ACTIVE]
    )
    return _without_secrets(rows, principal)


def memory_visible(*, principal: Principal, memory_id: int) -> Memory:
    """One memory, in any status, if the principal may read it; otherwise NotFound, exactly as if
    it did not exist (so ids outside a key's scopes reveal nothing)."""
    memory = Memory.objects.select_related("scope").filter(pk=memory_id).first()
    if (
        memory is None
        or not principal.allows(memory.scope)
        or (memory.secret and not principal.sees_secrets)
    ):
        raise NotFound(f"unknown memory {memory_id}")
    return memory


def memory_links_hidden(*, principal: Principal, memories: Iterable[Memory]) -> frozenset[int]:
    """The ids these memories' supersede links point to that the principal may not read. A plain
    value that replaced a secret one (or was replaced by one) keeps its link for the owner; an
    agent sees no link, as if the secret had never been written. A chain stays in its scope, so
    only secrecy can hide a link."""
    if principal.sees_secrets:
        return frozenset()
    linked = {
        pk
        for memory in memories
        for pk in (memory.supersedes_id, memory.superseded_by_id)
        if pk is not None
    }
    if not linked:
        return frozenset()
    return frozenset(Memory.objects.filter(pk__in=linked, secret=True).values_list("pk", flat=True))


def _facts_current(principal: Principal) -> QuerySet[Fact]:
    return _without_secrets(Fact.objects.filter(valid_q()), principal)


def facts_visible(*, principal: Principal, scope_ids: list[int]) -> QuerySet[Fact]:
    return _facts_current(principal).filter(scope_id__in=scope_ids)


def profiles_visible(*, principal: Principal, scope_ids: list[int]) -> QuerySet[Profile]:
    """Profiles of `scope_ids` with a current fact the principal may read: a profile's current
    facts are its profile, and its name alone says something. A rejected fact (whose profile name
    may be the very text the gate refused), a candidate, or an expired, superseded or deleted fact
    keeps no name in T3, /profiles or the graph; nor does a secret one for a principal who may not
    see it, which would tell that such a fact exists, and about whom. The fact write creates the
    profile row whatever the gate decides (facts.py, fact_commit), so a profile without such a
    fact exists and is simply never shown."""
    current = _facts_current(principal).filter(profile_id=OuterRef("pk"))
    return Profile.objects.filter(Exists(current), scope_id__in=scope_ids)


def turns_visible(*, principal: Principal, scope_ids: list[int]) -> QuerySet[ContextTurn]:
    return ContextTurn.objects.filter(scope_id__in=scope_ids)


def sessions_visible(*, principal: Principal, scope_ids: list[int]) -> QuerySet[Session]:
    return Session.objects.filter(scope_id__in=scope_ids)


def sessions_named(
    *, principal: Principal, scope_ids: list[int], external_id: str
) -> QuerySet[Session]:
    """The visible sessions a runtime calls `external_id`: stored under it, or, where the same id
    was first used in another scope, under its segment id in one of these scopes. A caller names
    its session as its runtime does, and never learns of the other scope's."""
    named = [external_id] + [
        segment_external_id(external_id=external_id, scope_id=pk) for pk in scope_ids
    ]
    return sessions_visible(principal=principal, scope_ids=scope_ids).filter(external_id__in=named)


def threads_visible(*, principal: Principal, scope_ids: list[int]) -> QuerySet[Thread]:
    return Thread.objects.filter(scope_id__in=scope_ids)


def snapshots_visible(*, principal: Principal, scope_ids: list[int]) -> QuerySet[Snapshot]:
    return Snapshot.objects.filter(scope_id__in=scope_ids)
