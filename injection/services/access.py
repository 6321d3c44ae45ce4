"""Who is calling and which scopes they may touch.

REST and MCP-over-HTTP callers present an API key; the key's scopes (plus global when
`include_global`) are all they may read or write, and a key bound to a workspace also covers the
projects inside it. Local callers (stdio MCP, management commands) act as the owner. Everything is
fail-closed: a scope the principal does not hold is Forbidden, never quietly widened.
"""

import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from memory.models import Actor, ApiKey, AuditAction, Memory, Scope, ScopeKind
from memory.services.audit import audit_record
from memory.services.errors import Forbidden, InvalidInput, NotFound
from memory.services.scopes import scope_get, scope_global, scope_resolve, scope_visible_ids

KEY_PREFIX = "tl_"
# last_used_at is bookkeeping, not a decision: refreshed at most this often so that every request
# does not become a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


@dataclass(frozen=True)
class Principal:
    name: str
    actor: str
    # None means the local owner: every scope.
    scope_ids: frozenset[int] | None
    include_global: bool = True
    can_write: bool = True
    key_id: int | None = None

    def allows(self, scope: Scope) -> bool:
        if self.scope_ids is None:
            return True
        if scope.kind == ScopeKind.GLOBAL:
            return self.include_global
        return scope.pk in self.scope_ids or (
            scope.workspace_id is not None and scope.workspace_id in self.scope_ids
        )


OWNER = Principal(name="owner", actor=Actor.OWNER, scope_ids=None)


def apikey_create(
    *,
    name: str,
    scope_ids: list[int],
    include_global: bool = True,
    can_write: bool = True,
    actor: str = Actor.OWNER,
    reason: str = "",
) -> tuple[ApiKey, str]:
    """Create a key and return it with its secret, which is shown once and stored only as a hash."""
    name = (name or "").strip()
    if not name or len(name) > 120:
        raise InvalidInput("a key needs a name of 1–120 characters", field="name")
    if not scope_ids and not include_global:
        raise InvalidInput("a key must be bound to at least one scope", field="scope")
    scopes = list(Scope.objects.filter(pk__in=scope_ids))
    if len(scopes) != len(set(scope_ids)):
        raise InvalidInput("unknown scope in the key's scope list", field="scope")
    prefix = secrets.token_hex(4)
    raw = f"{KEY_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        key = ApiKey.objects.create(
            name=name,
            prefix=prefix,
            key_hash=ApiKey.hash_secret(raw),
            include_global=include_global,
            can_write=can_write,
        )
        key.scopes.set(scopes)
        audit_record(
            actor=actor,
            action=AuditAction.INSERT,
            target=key,
            reason=reason or "API key created",
            after={
                "scopes": [scope.label for scope in scopes],
                "include_global": include_global,
                "can_write": can_write,
            },
        )
    return key, raw


def apikey_revoke(*, prefix: str, actor: str = Actor.OWNER, reason: str = "") -> ApiKey:
    with transaction.atomic():
        key = ApiKey.objects.select_for_update().filter(prefix=prefix).first()
        if key is None:
            raise NotFound(f"no API key with prefix {prefix!r}")
        if key.revoked_at is not None:
            raise InvalidInput(f"key {prefix} is already revoked")
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        audit_record(
            actor=actor,
            action=AuditAction.EXPIRE,
            target=key,
            reason=reason or "API key revoked",
        )
    return key


def apikey_authenticate(*, raw: str) -> Principal | None:
    """The principal behind a presented key, or None for a missing, unknown or revoked key."""
    raw = (raw or "").strip()
    if not raw.startswith(KEY_PREFIX) or len(raw) > 200:
        return None
    key = (
        ApiKey.objects.filter(key_hash=ApiKey.hash_secret(raw), revoked_at__isnull=True)
        .prefetch_related("scopes")
        .first()
    )
    if key is None:
        return None
    now = timezone.now()
    if key.last_used_at is None or now - key.last_used_at > LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return Principal(
        name=key.name,
        actor=Actor.AGENT,
        scope_ids=frozenset(scope.pk for scope in key.scopes.all()),
        include_global=key.include_global,
        can_write=key.can_write,
        key_id=key.pk,
    )


def principal_scope(
    *,
    principal: Principal,
    scope_id: int | None = None,
    cwd: str = "",
    git_remote: str = "",
    create: bool = True,
) -> Scope:
    """The scope a request acts in: an explicit scope id, else the caller's cwd / git remote, else
    the principal's single bound scope (or global). Refused unless the principal holds it. Read
    paths pass create=False so that asking never creates a scope."""
    if scope_id is not None:
        scope = scope_get(scope_id=scope_id)
    elif cwd or git_remote:
        scope = scope_resolve(cwd=cwd or None, git_remote=git_remote or None, create=create)
    elif principal.scope_ids is not None and len(principal.scope_ids) == 1:
        scope = scope_get(scope_id=next(iter(principal.scope_ids)))
    elif principal.scope_ids is None or principal.include_global:
        scope = scope_global()
    else:
        raise InvalidInput(
            "name the scope (scope_id or cwd): this key holds several", field="scope"
        )
    if not principal.allows(scope):
        raise Forbidden(f"this key may not use the scope {scope.label}", field="scope")
    return scope


def principal_readable_ids(*, principal: Principal, scope: Scope) -> list[int]:
    """The scopes a caller in `scope` sees (the project, its workspace, global), minus any the
    principal does not hold."""
    visible = scope_visible_ids(scope=scope)
    if principal.scope_ids is None:
        return visible
    # scope_visible_ids lists global last.
    global_id = visible[-1]
    return [
        pk
        for pk in visible
        if pk == scope.pk
        or pk in principal.scope_ids
        or (principal.include_global and pk == global_id)
    ]


def principal_all_ids(*, principal: Principal) -> list[int]:
    """Every scope the principal may read, for requests that name no scope (stats, search)."""
    if principal.scope_ids is None:
        return list(Scope.objects.values_list("pk", flat=True))
    ids = set(principal.scope_ids)
    ids.update(
        Scope.objects.filter(workspace_id__in=principal.scope_ids).values_list("pk", flat=True)
    )
    if principal.include_global:
        ids.add(scope_global().pk)
    return sorted(ids)


def principal_require_write(*, principal: Principal) -> None:
    if not principal.can_write:
        raise Forbidden("this key is read-only")


def memory_for_principal(*, principal: Principal, memory_id: int) -> Memory:
    """A memory the principal may see; one outside its scopes is NotFound, as if absent."""
    memory = Memory.objects.select_related("scope").filter(pk=memory_id).first()
    if memory is None or not principal.allows(memory.scope):
        raise NotFound(f"unknown memory {memory_id}")
    return memory
