"""API keys: minted once, stored as a hash, bound to scopes.

REST and MCP-over-HTTP callers present a key; `apikey_authenticate` turns it into the principal
whose scopes (plus global when `include_global`) bound everything the caller may read or write —
see `memory/selectors/visibility.py` for the rule itself.
"""

import secrets
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from memory.models import Actor, ApiKey, AuditAction, Scope
from memory.selectors.visibility import Principal
from memory.services.audit import audit_record
from memory.services.errors import InvalidInput, NotFound

KEY_PREFIX = "tl_"
# last_used_at is bookkeeping, not a decision: refreshed at most this often so that every request
# does not become a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


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
