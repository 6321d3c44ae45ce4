"""The owner's (and agents') lifecycle actions on one memory: expire, restore, pin, unpin.

Expire is Tideline's "delete": the row stays, stops being recalled, and the audit log says who and
why. Each call is one transaction with one audit row.
"""

from django.db import transaction
from django.utils import timezone

from memory.models import Actor, AuditAction, ExpiredBy, Memory, MemoryStatus
from memory.services.audit import audit_record
from memory.services.errors import InvalidInput, NotFound

RESTORABLE = (MemoryStatus.EXPIRED, MemoryStatus.REJECTED, MemoryStatus.CANDIDATE)


def _locked(memory_id: int) -> Memory:
    memory = Memory.objects.select_for_update().filter(pk=memory_id).first()
    if memory is None:
        raise NotFound(f"unknown memory {memory_id}")
    return memory


def memory_expire(
    *,
    memory_id: int,
    expired_by: str = ExpiredBy.MANUAL,
    actor: str = Actor.OWNER,
    reason: str = "",
    request_id: str = "",
) -> Memory:
    if expired_by not in ExpiredBy.values:
        raise InvalidInput(f"expired_by must be one of {ExpiredBy.values}", field="expired_by")
    with transaction.atomic():
        memory = _locked(memory_id)
        if memory.status == MemoryStatus.EXPIRED:
            raise InvalidInput(f"memory {memory_id} is already expired")
        before = {"status": memory.status, "expired_by": memory.expired_by}
        memory.status = MemoryStatus.EXPIRED
        memory.expired_by = expired_by
        memory.valid_to = memory.valid_to or timezone.now()
        memory.save(update_fields=["status", "expired_by", "valid_to", "updated_at"])
        audit_record(
            actor=actor,
            action=AuditAction.EXPIRE,
            target=memory,
            reason=reason or f"expired ({expired_by})",
            before=before,
            after={"status": memory.status, "expired_by": expired_by},
            request_id=request_id,
        )
    return memory


def memory_restore(
    *, memory_id: int, actor: str = Actor.OWNER, reason: str = "", request_id: str = ""
) -> Memory:
    """Bring an expired, rejected or candidate memory back to active. A superseded memory is not
    restored this way: write the old value again so the supersede chain stays truthful."""
    with transaction.atomic():
        memory = _locked(memory_id)
        if memory.status not in RESTORABLE:
            raise InvalidInput(
                f"memory {memory_id} is {memory.status}; only {', '.join(RESTORABLE)} can be restored"
            )
        before = {"status": memory.status, "expired_by": memory.expired_by, "valid_to": None}
        if memory.valid_to:
            before["valid_to"] = memory.valid_to.isoformat()
        memory.status = MemoryStatus.ACTIVE
        memory.expired_by = ""
        memory.valid_to = None
        memory.save(update_fields=["status", "expired_by", "valid_to", "updated_at"])
        audit_record(
            actor=actor,
            action=AuditAction.RESTORE,
            target=memory,
            reason=reason or "restored",
            before=before,
            after={"status": memory.status},
            request_id=request_id,
        )
    return memory


def memory_set_pinned(
    *,
    memory_id: int,
    pinned: bool,
    actor: str = Actor.OWNER,
    reason: str = "",
    request_id: str = "",
) -> Memory:
    """Pinned memories never decay and are never merged away."""
    with transaction.atomic():
        memory = _locked(memory_id)
        before = memory.pinned
        memory.pinned = pinned
        memory.save(update_fields=["pinned", "updated_at"])
        audit_record(
            actor=actor,
            action=AuditAction.PIN if pinned else AuditAction.UNPIN,
            target=memory,
            reason=reason or ("pinned" if pinned else "unpinned"),
            before={"pinned": before},
            after={"pinned": pinned},
            request_id=request_id,
        )
    return memory
