"""Lifecycle maintenance (DESIGN §6, seed 003): memories that stop being true stop being recalled.

Three rules, checked in this order (the first that applies is the reason):

- **depends_on gone** → `expired`, `expired_by=scope-gone`: a `path:` that no longer exists, or a
  `memory:<id>` that is no longer live, nor is the version an edit turned it into. Cheap (one stat
  per distinct path), so retrieval runs it for the scopes it is about to read
  (`dependencies_check`).
- **TTL** → `expired_by=ttl` once `expires_at` has passed (fact_write sets it: episodes 90 days,
  a project's facts 180 days; preferences and reflections never).
- **Activation decay** → `expired_by=decay`: no activation (or, never activated, no write) for
  7 days at importance 1–2, 14 at 3, 30 at 4–5, each lengthened for a narrative by its emotion
  intensity (× 1 + TIDELINE_EMOTION_DECAY_FACTOR × intensity/10: at the default, intensity 10
  doubles it). Pinned memories, self-concept, never-expiring fact kinds and the user's global
  profile facts do not decay.

All thresholds are settings. Nothing is deleted; each expiry is one audit row, and every row of one
run carries the run's request id. A dry run computes the same plan and writes nothing at all — not
even audit rows.
"""

import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from memory.models import (
    Actor,
    AuditAction,
    ExpiredBy,
    Fact,
    Memory,
    MemoryStatus,
    MemoryType,
    ScopeKind,
)
from memory.services.audit import audit_context_current, audit_record, request_id_new
from memory.services.consolidation import LIVE_STATUSES, dependency_memory_id, statuses
from memory.services.weights import decay_limit_days


@dataclass(frozen=True)
class PlannedExpiry:
    memory_id: int
    memory_type: str
    scope_label: str
    summary: str
    expired_by: str
    reason: str

    def line(self) -> str:
        return (
            f"#{self.memory_id} [{self.scope_label}] {self.summary[:80]} → expired "
            f"({self.expired_by}): {self.reason}"
        )


@dataclass
class MaintenanceReport:
    dry_run: bool
    planned: list[PlannedExpiry] = field(default_factory=list)
    expired: int = 0
    checked: int = 0
    elapsed_ms: float = 0.0
    request_id: str = ""

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for item in self.planned:
            counts[item.expired_by] = counts.get(item.expired_by, 0) + 1
        return counts


def _live(scope_ids: list[int] | None):
    rows = Memory.objects.filter(status__in=LIVE_STATUSES)
    if scope_ids is not None:
        rows = rows.filter(scope_id__in=list(scope_ids))
    return rows


def _plans(pks_reasons: dict[int, str], expired_by: str) -> list[PlannedExpiry]:
    """Describe the memories about to expire; only their display columns are read."""
    rows = Memory.objects.filter(pk__in=list(pks_reasons)).values_list(
        "pk", "memory_type", "scope__label", "summary"
    )
    return [
        PlannedExpiry(
            memory_id=pk,
            memory_type=memory_type,
            scope_label=label,
            summary=summary,
            expired_by=expired_by,
            reason=pks_reasons[pk],
        )
        for pk, memory_type, label, summary in rows.order_by("pk")
    ]


def _memory_refs_live(referenced: set[int]) -> set[int]:
    """The referenced ids whose memory, or the version an edit turned it into, is live.

    An edit supersedes a memory with a new row; what depended on the memory depends on what it
    says, not on the row, so the dependency follows superseded_by and breaks only where the chain
    ends in a memory that is no longer live. One query per step of the longest chain."""
    rows: dict[int, tuple[str, int | None]] = {}
    walks = {memory_id: [memory_id] for memory_id in referenced}
    live: set[int] = set()
    while walks:
        unread = {walk[-1] for walk in walks.values()} - rows.keys()
        if unread:
            rows.update(
                (pk, (status, successor))
                for pk, status, successor in Memory.objects.filter(pk__in=unread).values_list(
                    "pk", "status", "superseded_by_id"
                )
            )
        following = {}
        for origin, walk in walks.items():
            status, successor = rows.get(walk[-1], ("", None))
            if status in LIVE_STATUSES:
                live.add(origin)
            elif (
                status == MemoryStatus.SUPERSEDED
                and successor is not None
                and successor not in walk
            ):
                following[origin] = [*walk, successor]
        walks = following
    return live


def _live_refs(depends_on_lists: list[list]) -> set[int]:
    referenced = {
        memory_id
        for depends_on in depends_on_lists
        for item in depends_on
        if isinstance(item, str) and (memory_id := dependency_memory_id(item))
    }
    return _memory_refs_live(referenced) if referenced else set()


def _item_broken(item, *, exists: dict[str, bool], live_refs: set[int]) -> str:
    """Why this one dependency no longer holds, or "" while it does."""
    if not isinstance(item, str):
        return ""
    kind, _, rest = item.partition(":")
    if kind == "path":
        if rest not in exists:
            exists[rest] = os.path.exists(rest)
        if not exists[rest]:
            return f"{rest} no longer exists"
    elif kind == "memory" and dependency_memory_id(item) not in live_refs:
        return f"memory #{rest} it depends on is gone"
    return ""


def _broken(depends_on: list, *, exists: dict[str, bool], live_refs: set[int]) -> str:
    """Why this dependency list no longer holds, or "" while it does."""
    for item in depends_on:
        if reason := _item_broken(item, exists=exists, live_refs=live_refs):
            return reason
    return ""


def dependencies_broken(*, depends_on: list) -> dict[str, str]:
    """The entries of one dependency list that no longer hold, each with why."""
    exists: dict[str, bool] = {}
    live_refs = _live_refs([depends_on])
    return {
        item: reason
        for item in depends_on
        if (reason := _item_broken(item, exists=exists, live_refs=live_refs))
    }


def dependencies_plan(*, scope_ids: list[int] | None = None) -> tuple[list[PlannedExpiry], int]:
    """Live memories whose depends_on no longer holds. Returns (plan, distinct dependency lists
    checked).

    Runs before retrieval, so it asks the database for the distinct dependency lists only (a few
    hundred, however many memories share them), stats each path once, and reads memory rows only
    when something is actually gone."""
    live = _live(scope_ids).exclude(depends_on=[])
    distinct = list(live.order_by().values_list("depends_on", flat=True).distinct())
    live_refs = _live_refs(distinct)
    exists: dict[str, bool] = {}
    if not any(_broken(d, exists=exists, live_refs=live_refs) for d in distinct):
        return [], len(distinct)
    gone = {}
    for pk, depends_on in live.values_list("pk", "depends_on"):
        if reason := _broken(depends_on, exists=exists, live_refs=live_refs):
            gone[pk] = reason
    return _plans(gone, ExpiredBy.SCOPE_GONE), len(distinct)


def ttl_plan(*, now: datetime) -> list[PlannedExpiry]:
    rows = _live(None).filter(expires_at__isnull=False, expires_at__lte=now)
    ended = {
        pk: f"TTL ended {at:%Y-%m-%d %H:%M}" for pk, at in rows.values_list("pk", "expires_at")
    }
    return _plans(ended, ExpiredBy.TTL) if ended else []


def decay_days(importance: int) -> int:
    if importance <= 2:
        return settings.TIDELINE_DECAY_DAYS_LOW
    if importance == 3:
        return settings.TIDELINE_DECAY_DAYS_MID
    return settings.TIDELINE_DECAY_DAYS_HIGH


def _decay_exempt_q() -> Q:
    never = Fact.objects.filter(
        Q(kind__in=settings.TIDELINE_NEVER_EXPIRE_KINDS) | Q(scope__kind=ScopeKind.GLOBAL)
    ).values("pk")
    return Q(pinned=True) | Q(memory_type=MemoryType.SELF_CONCEPT) | Q(pk__in=never)


def decay_plan(*, now: datetime) -> list[PlannedExpiry]:
    shortest = min(
        settings.TIDELINE_DECAY_DAYS_LOW,
        settings.TIDELINE_DECAY_DAYS_MID,
        settings.TIDELINE_DECAY_DAYS_HIGH,
    )
    rows = (
        _live(None)
        .exclude(_decay_exempt_q())
        .annotate(anchor=Coalesce("last_activated", "recorded_at"))
        .filter(anchor__lt=now - timedelta(days=shortest))
        .values_list("pk", "importance", "anchor", "narrative__emotion_intensity")
    )
    decayed = {}
    for pk, importance, anchor, intensity in rows:
        days = decay_limit_days(base_days=decay_days(importance), emotion_intensity=intensity or 0)
        idle = now - anchor
        if idle > timedelta(days=days):
            felt = f", emotion intensity {intensity:g}" if intensity else ""
            decayed[pk] = (
                f"no activation for {idle.days} days "
                f"(importance {importance}{felt}: {days:g}-day limit)"
            )
    return _plans(decayed, ExpiredBy.DECAY) if decayed else []


def lifecycle_plan(*, now: datetime | None = None) -> tuple[list[PlannedExpiry], int]:
    """Everything maintenance would expire at `now`, one entry per memory. Reads only."""
    now = now or timezone.now()
    dependencies, checked = dependencies_plan()
    plan: dict[int, PlannedExpiry] = {}
    for item in [*dependencies, *ttl_plan(now=now), *decay_plan(now=now)]:
        plan.setdefault(item.memory_id, item)
    return sorted(plan.values(), key=lambda item: item.memory_id), checked


def _run_request_id(request_id: str) -> str:
    """The request id every audit row of one run carries, so the run's expiries read as one
    decision: the caller's, else the surrounding call's, else a fresh one."""
    context = audit_context_current()
    return request_id or (context.request_id if context else "") or request_id_new()


def _apply(plan: list[PlannedExpiry], *, actor: str, request_id: str, now: datetime) -> int:
    if not plan:
        return 0
    expired = 0
    with transaction.atomic():
        locked = {
            memory.pk: memory
            for memory in Memory.objects.select_for_update()
            .filter(pk__in=[item.memory_id for item in plan], status__in=LIVE_STATUSES)
            .only("pk", "memory_type", "status", "expired_by", "valid_from", "valid_to", "summary")
        }
        for item in plan:
            memory = locked.get(item.memory_id)
            if memory is None:
                continue  # changed since the plan was made (another maintain, an owner action)
            before = {"status": memory.status, "expired_by": memory.expired_by}
            memory.status = MemoryStatus.EXPIRED
            memory.expired_by = item.expired_by
            ended = memory.valid_to if memory.valid_to and memory.valid_to < now else now
            # A memory dated ahead (or whose TTL falls before its valid_from) ends where it began.
            memory.valid_to = max(ended, memory.valid_from)
            memory.save(update_fields=["status", "expired_by", "valid_to", "updated_at"])
            audit_record(
                actor=actor,
                action=AuditAction.EXPIRE,
                target=memory,
                reason=f"{item.expired_by}: {item.reason}",
                before=before,
                after={
                    "status": memory.status,
                    "expired_by": item.expired_by,
                    "statuses": statuses(memory),
                },
                request_id=request_id,
            )
            expired += 1
    return expired


def lifecycle_maintain(
    *,
    dry_run: bool = False,
    now: datetime | None = None,
    actor: str = Actor.SYSTEM,
    request_id: str = "",
) -> MaintenanceReport:
    """Expire what depends on something gone, what outlived its TTL, and what decayed. With
    `dry_run` return the plan and write nothing."""
    started = time.perf_counter()
    now = now or timezone.now()
    plan, checked = lifecycle_plan(now=now)
    report = MaintenanceReport(
        dry_run=dry_run, planned=plan, checked=checked, request_id=_run_request_id(request_id)
    )
    if not dry_run:
        report.expired = _apply(plan, actor=actor, request_id=report.request_id, now=now)
    report.elapsed_ms = (time.perf_counter() - started) * 1000
    return report


def dependencies_check(
    *, scope_ids: list[int], actor: str = Actor.SYSTEM, request_id: str = ""
) -> MaintenanceReport:
    """The cheap check retrieval runs first: expire memories in these scopes whose depends_on is
    gone, so a deleted project's memories never surface."""
    started = time.perf_counter()
    plan, checked = dependencies_plan(scope_ids=scope_ids)
    report = MaintenanceReport(
        dry_run=False, planned=plan, checked=checked, request_id=_run_request_id(request_id)
    )
    report.expired = _apply(plan, actor=actor, request_id=report.request_id, now=timezone.now())
    report.elapsed_ms = (time.perf_counter() - started) * 1000
    return report


def intervals_repair(*, actor: str = Actor.SYSTEM, request_id: str = "") -> int:
    """End every memory that ends before it begins where it begins, with an audit row each.
    Releases before stop 45 stored such rows when a fact dated before the key's current value
    replaced it; a read of the past then found neither row. Returns how many were repaired."""
    request_id = request_id or request_id_new()
    with transaction.atomic():
        inverted = list(
            Memory.objects.select_for_update()
            .filter(valid_to__lt=F("valid_from"))
            .only("pk", "memory_type", "valid_from", "valid_to", "summary")
        )
        for memory in inverted:
            ended = memory.valid_to
            # Copied in the database, not read and written back: SQLite compares the stored text,
            # and a valid_from stored in another form than the ORM writes (a raw write's "+00:00")
            # would still sort after its own value re-written, and the row stay inverted.
            Memory.objects.filter(pk=memory.pk).update(
                valid_to=F("valid_from"), updated_at=timezone.now()
            )
            memory.valid_to = memory.valid_from
            interval_repair_audit(memory=memory, ended=ended, actor=actor, request_id=request_id)
    return len(inverted)


def interval_repair_audit(
    *, memory: Memory, ended: datetime, actor: str, request_id: str = ""
) -> None:
    """The audit row of a memory that ended (`ended`) before it began and now ends where it
    begins: repaired in the store, or on its way in from an older release's export."""
    audit_record(
        actor=actor,
        action=AuditAction.UPDATE,
        target=memory,
        reason="ended before it began (a backdated write of an older release): "
        "now ends where it begins",
        before={"valid_to": ended.isoformat()},
        after={"valid_to": memory.valid_to.isoformat()},
        request_id=request_id,
    )
