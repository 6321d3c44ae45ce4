from typing import Any

from django.db import models

from memory.models import Actor, AuditAction, AuditEvent


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
    and its record commit together or not at all."""
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
        request_id=request_id[:64],
    )
