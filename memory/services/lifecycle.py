"""The owner's (and agents') lifecycle actions on one memory: expire, restore, pin, unpin.

Expire is Tideline's "delete": the row stays, stops being recalled, and the audit log says who and
why. Each call is one transaction with one audit row.
"""

from datetime import datetime

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from memory.models import (
    Actor,
    AuditAction,
    AuditEvent,
    ExpiredBy,
    Memory,
    MemoryStatus,
    MemoryType,
    Narrative,
)
from memory.services.audit import audit_record
from memory.services.consolidation import LIVE_STATUSES
from memory.services.errors import Conflict, InvalidInput, NotFound
from memory.services.maintenance import dependencies_broken
from memory.services.narratives import narrative_reband
from memory.services.races import atomic_retrying

RESTORABLE = (MemoryStatus.EXPIRED, MemoryStatus.REJECTED, MemoryStatus.CANDIDATE)
# Expiring these again would rewrite how they ended: a superseded row would claim to be expired.
ENDED = (MemoryStatus.SUPERSEDED, MemoryStatus.EXPIRED)


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
        if memory.status in ENDED:
            raise Conflict(_ended_message(memory))
        before = {"status": memory.status, "expired_by": memory.expired_by}
        memory.status = MemoryStatus.EXPIRED
        memory.expired_by = expired_by
        # A memory dated ahead ends where it began: valid for no time, never for a negative one.
        memory.valid_to = memory.valid_to or max(timezone.now(), memory.valid_from)
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


def _ended_message(memory: Memory) -> str:
    if memory.status == MemoryStatus.SUPERSEDED:
        # The caller read this row, not necessarily its successor: as for a refused edit, only a
        # plain successor is named, so a secret one is never revealed to a key that may not see it.
        successor = (
            f" by #{memory.superseded_by_id}"
            if memory.superseded_by_id and not memory.superseded_by.secret
            else ""
        )
        return f"memory #{memory.pk} is already superseded{successor}; expire the current version"
    return f"memory #{memory.pk} is already expired ({memory.expired_by or 'no reason recorded'})"


def memory_restore(
    *, memory_id: int, actor: str = Actor.OWNER, reason: str = "", request_id: str = ""
) -> Memory:
    """Bring an expired, rejected or candidate memory back to active. A superseded memory is not
    restored this way: write the old value again so the supersede chain stays truthful. A row
    whose key has another current value, or a narrative with another current version, stays as
    it is (Conflict): one current value per key, one current version per narrative.
    The restore sticks: a passed TTL and dependencies that no longer hold are dropped (the audit
    row says which), and the decay clock restarts."""
    return atomic_retrying(
        lambda: _restore(memory_id=memory_id, actor=actor, reason=reason, request_id=request_id),
        model=Memory,
        constraints=("memory_one_active_per_key", "memory_one_live_successor"),
        lost=f"memory #{memory_id} cannot be restored: its key or edit chain has a current row",
        attempts=1,
    )


def _restore(*, memory_id: int, actor: str, reason: str, request_id: str) -> Memory:
    memory = _locked(memory_id)
    if memory.status not in RESTORABLE:
        raise InvalidInput(
            f"memory {memory_id} is {memory.status}; only {', '.join(RESTORABLE)} can be restored"
        )
    if memory.stable_key:
        current = (
            Memory.objects.filter(stable_key=memory.stable_key, status=MemoryStatus.ACTIVE)
            .exclude(pk=memory.pk)
            .values_list("pk", flat=True)
            .first()
        )
        if current is not None:
            raise Conflict(
                f"memory #{memory_id} cannot be restored: #{current} is the current value of "
                "its key"
            )
    elif memory.memory_type == MemoryType.NARRATIVE:
        # Why a refused edit is not applied by a restore: it was written against a version that
        # may have changed since, and superseding that silently would undo the newer telling. A
        # fact's refused value is refused the same way while its key has a current value; the
        # owner applies the text by editing the version the message names.
        current = _narrative_current(memory)
        if current is not None:
            raise Conflict(
                f"memory #{memory_id} cannot be restored: #{current} is the current version of "
                "its narrative; edit that version instead"
            )
    now = timezone.now()
    before = {
        "status": memory.status,
        "expired_by": memory.expired_by,
        "valid_to": _iso(memory.valid_to),
        "last_activated": _iso(memory.last_activated),
    }
    after: dict = {"status": MemoryStatus.ACTIVE}
    # Whatever ended the memory would end it again on the next maintenance run and quietly undo
    # the owner: a TTL that has passed and dependencies that no longer hold go with the restore.
    if memory.expires_at is not None and memory.expires_at <= now:
        before["expires_at"] = _iso(memory.expires_at)
        after["expires_at"] = None
        memory.expires_at = None
    if dropped := dependencies_broken(depends_on=memory.depends_on):
        before["depends_on"] = memory.depends_on
        after["depends_on_dropped"] = dropped
        memory.depends_on = [item for item in memory.depends_on if item not in dropped]
    # Bringing a memory back says it still matters, as strongly as a recall does, so its decay
    # clock restarts now; recorded_at is when Tideline learned it and stays. The memory is not
    # pinned: left unrecalled for its full limit, it fades again.
    memory.last_activated = now
    memory.status = MemoryStatus.ACTIVE
    memory.expired_by = ""
    memory.valid_to = None
    memory.save(
        update_fields=[
            "status",
            "expired_by",
            "valid_to",
            "expires_at",
            "depends_on",
            "last_activated",
            "updated_at",
        ]
    )
    audit_record(
        actor=actor,
        action=AuditAction.RESTORE,
        target=memory,
        reason=reason or "restored",
        before=before,
        after=after | {"last_activated": _iso(now)},
        request_id=request_id,
    )
    return memory


def _narrative_versions(narrative_id: int) -> set[int]:
    """Every version of the narrative a row tells: the rows its edits superseded, those that
    superseded it, and edits of any of them that the write gate refused. A refused edit
    supersedes nothing; the audit row of its refusal names the version it edits."""
    versions: set[int] = set()
    frontier = {narrative_id}
    while frontier:
        versions |= frontier
        linked: set[int | None] = set()
        for row in Memory.objects.filter(
            Q(pk__in=frontier) | Q(supersedes__in=frontier)
        ).values_list("pk", "supersedes_id"):
            linked.update(row)
        for target_id, after in AuditEvent.objects.filter(
            Q(target_id__in=frontier) | Q(after__edit_of__in=frontier),
            action=AuditAction.REJECT,
            target_type=Narrative._meta.model_name,
        ).values_list("target_id", "after"):
            linked.update((target_id, after.get("edit_of") if isinstance(after, dict) else None))
        frontier = {pk for pk in linked if pk is not None} - versions
    return versions


def _narrative_current(narrative: Memory) -> int | None:
    """The newest other current (active or candidate) version of this narrative, or None."""
    versions = _narrative_versions(narrative.pk)
    # Every version descends from the first, so two restores of one narrative's versions take
    # turns on its row and the second sees what the first restored (PostgreSQL; SQLite's
    # writers take turns anyway).
    _locked(min(versions))
    return (
        # An edit committed meanwhile is a successor of a version read here.
        Memory.objects.filter(Q(pk__in=versions) | Q(supersedes__in=versions))
        .filter(status__in=LIVE_STATUSES)
        .exclude(pk=narrative.pk)
        .order_by("-pk")
        .values_list("pk", flat=True)
        .first()
    )


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


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


def memory_set_secret(
    *,
    memory_id: int,
    secret: bool,
    actor: str = Actor.OWNER,
    reason: str = "",
    request_id: str = "",
) -> Memory:
    """A secret memory is shown to the owner only: never returned to an agent, never sent to an
    LLM, never injected."""
    with transaction.atomic():
        memory = _locked(memory_id)
        before = memory.secret
        memory.secret = secret
        memory.save(update_fields=["secret", "updated_at"])
        after: dict = {"secret": secret}
        if memory.memory_type == MemoryType.NARRATIVE and before != secret:
            # A narrative an agent may see is weighed by what an agent may see: the flag moves
            # this one between the two countings, and its tag siblings' counts with it.
            after["rebanded"], after["normalised"] = narrative_reband(
                narrative=Narrative.objects.get(pk=memory.pk)
            )
        audit_record(
            actor=actor,
            action=AuditAction.UPDATE,
            target=memory,
            reason=reason or ("marked secret" if secret else "no longer secret"),
            before={"secret": before},
            after=after,
            request_id=request_id,
        )
    return memory
