"""The audit log: every decision, with who made it (actor, API key, request id).

Operations (the one door under REST, MCP, the hook, admin and commands) open an `audit_context`
for the call; every service below it records decisions with that context, so the key and request
id reach the audit row without being threaded through each service's signature.
"""

import contextvars
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import models

from memory.models import Actor, AuditAction, AuditEvent

REQUEST_ID_MAX_CHARS = 64


@dataclass(frozen=True)
class AuditContext:
    actor: str
    key_id: int | None = None
    request_id: str = ""


_current: contextvars.ContextVar[AuditContext | None] = contextvars.ContextVar(
    "tideline_audit_context", default=None
)


def request_id_new() -> str:
    return uuid.uuid4().hex


def request_id_given(header: str) -> str:
    """The request id a caller sent (X-Request-Id), as the audit log keeps it, or a fresh one when
    it sent none or one that is not printable text."""
    return header[:REQUEST_ID_MAX_CHARS] if header.isprintable() and header else request_id_new()


@contextmanager
def audit_context(
    *, actor: str, key_id: int | None = None, request_id: str = ""
) -> Iterator[AuditContext]:
    """Stamp every audit row written inside the block with this actor, key and request id. A
    missing request id gets a fresh one, so every decision can be traced to one call."""
    context = AuditContext(
        actor=actor,
        key_id=key_id,
        request_id=(request_id or request_id_new())[:REQUEST_ID_MAX_CHARS],
    )
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)


def audit_context_current() -> AuditContext | None:
    return _current.get()


def audit_record(
    *,
    actor: Actor | str,
    action: AuditAction | str,
    target: models.Model | None = None,
    target_type: str = "",
    target_id: int | None = None,
    reason: str,
    before: Any = None,
    after: Any = None,
    request_id: str = "",
) -> AuditEvent:
    """Append one decision to the audit log. Called inside the caller's transaction so the decision
    and its record commit together or not at all. The surrounding audit context supplies the key
    id, and the request id when the caller gives none; outside any context (a command, the
    worker) the row gets a fresh one, so it still names one call."""
    context = _current.get()
    if target is not None:
        target_type = target._meta.model_name or target_type
        target_id = target.pk
    return AuditEvent.objects.create(
        actor=actor,
        action=action,
        target_type=target_type,
        target_id=target_id,
        target_repr=str(target)[:300] if target is not None else "",
        before=before,
        after=after,
        reason=reason[:500],
        request_id=(request_id or (context.request_id if context else request_id_new()))[
            :REQUEST_ID_MAX_CHARS
        ],
        key_id=context.key_id if context else None,
    )
