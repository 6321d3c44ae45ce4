"""The one-DREAM-at-a-time lease, and how it survives a crash.

The holder writes who it is (host, pid, the kernel's start time of that pid) and renews a short
expiry as it works (`lease_heartbeat`, between layers, inside long loops, and before each LLM call
for as long as that call may take). A lease is free when its expiry passed, or, on the holder's own
host, as soon as the holder process is gone (or its pid now belongs to another process): a killed
run is taken over at once, not after hours.
"""

import contextvars
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from dream.models import DreamLease
from memory.models import Actor, AuditAction
from memory.services.audit import audit_record

logger = logging.getLogger("tideline.dream")

LEASE_NAME = "dream"
_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.get_fixed_timezone(0))


class LeaseLost(Exception):
    """Another run took the lease over (this holder's heartbeat had run out): stop writing."""


@dataclass(frozen=True)
class Holder:
    token: str
    host: str
    pid: int
    process_started: str


def _process_started(pid: int) -> str:
    """The start time of `pid` in clock ticks since boot (field 22 of /proc/<pid>/stat), '' where
    /proc is not there. With the pid, it names one process: a pid reused later has another."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # The command name (field 2) may hold spaces and parentheses: count fields after its end.
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else ""


def _process_state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat[stat.rindex(")") + 2 :].split()[0]


def holder_here() -> Holder:
    pid = os.getpid()
    return Holder(
        token=uuid.uuid4().hex,
        host=socket.gethostname()[:255],
        pid=pid,
        process_started=_process_started(pid),
    )


def holder_alive(*, host: str, pid: int | None, process_started: str) -> bool | None:
    """True or False for a holder on this host; None when it ran elsewhere (only its heartbeat can
    tell then)."""
    if not pid or host != socket.gethostname()[:255]:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if _process_state(pid) in {"Z", "X"}:
        return False
    started = _process_started(pid)
    return not (process_started and started and started != process_started)


def _lease_seconds() -> int:
    return settings.TIDELINE_DREAM_LEASE_SECONDS


@dataclass(frozen=True)
class LeaseGrant:
    """The lease is ours. `taken_from` describes the dead holder it was taken from (None when the
    lease was free or had expired), so the run can record the takeover under its own id."""

    taken_from: dict | None = None


def lease_acquire(
    *, holder: Holder, seconds: int | None = None, name: str = LEASE_NAME
) -> LeaseGrant | None:
    """Take the lease if it is free: expired, or held by a process that is gone from this host.
    One conditional UPDATE on (name, previous holder), so of two concurrent callers one wins.
    None when someone alive holds it."""
    seconds = seconds or _lease_seconds()
    try:
        with transaction.atomic():
            DreamLease.objects.get_or_create(name=name, defaults={"expires_at": _EPOCH})
    except IntegrityError:
        pass
    now = timezone.now()
    current = DreamLease.objects.get(name=name)
    expired = current.expires_at <= now
    dead = (
        not expired
        and holder_alive(
            host=current.host, pid=current.pid, process_started=current.process_started
        )
        is False
    )
    if not (expired or dead):
        return None
    with transaction.atomic():
        taken = DreamLease.objects.filter(
            name=name, holder=current.holder, expires_at=current.expires_at
        ).update(
            holder=holder.token,
            host=holder.host,
            pid=holder.pid,
            process_started=holder.process_started,
            run_id=None,
            acquired_at=now,
            heartbeat_at=now,
            expires_at=now + timedelta(seconds=seconds),
        )
    if not taken:
        return None
    # A lease released by its holder lies at the epoch; one that ran out still names a holder.
    abandoned = expired and current.holder and current.expires_at > _EPOCH
    if not (dead or abandoned):
        return LeaseGrant()
    why = "is gone" if dead else "stopped renewing its heartbeat"
    logger.warning("DREAM lease taken over from %s pid %s (%s)", current.host, current.pid, why)
    return LeaseGrant(
        taken_from={
            "host": current.host,
            "pid": current.pid,
            "run_id": current.run_id,
            "heartbeat_at": current.heartbeat_at.isoformat() if current.heartbeat_at else None,
            "why": why,
        }
    )


def lease_takeover_record(*, grant: LeaseGrant, holder: Holder, name: str = LEASE_NAME) -> None:
    """The audit row of a takeover, written once the new run exists (so it carries its id)."""
    if grant.taken_from is None:
        return
    lease = DreamLease.objects.get(name=name)
    previous = grant.taken_from
    with transaction.atomic():
        audit_record(
            actor=Actor.SYSTEM,
            action=AuditAction.UPDATE,
            target=lease,
            reason=(
                f"DREAM lease taken over: holder {previous['host']} pid {previous['pid']} "
                f"{previous['why']}"
                + (f" (run #{previous['run_id']} interrupted)" if previous["run_id"] else "")
            ),
            before=previous,
            after={"host": holder.host, "pid": holder.pid},
        )


def lease_renew(*, holder: Holder, seconds: int | None = None, name: str = LEASE_NAME) -> None:
    """Push the expiry `seconds` ahead (the lease's own length by default). Raises LeaseLost when
    the lease is no longer this holder's."""
    now = timezone.now()
    with transaction.atomic():
        renewed = DreamLease.objects.filter(name=name, holder=holder.token).update(
            heartbeat_at=now, expires_at=now + timedelta(seconds=seconds or _lease_seconds())
        )
    if not renewed:
        raise LeaseLost(f"the DREAM lease is no longer held by pid {holder.pid}")


def lease_attach_run(*, holder: Holder, run_id: int, name: str = LEASE_NAME) -> None:
    with transaction.atomic():
        DreamLease.objects.filter(name=name, holder=holder.token).update(run_id=run_id)


def lease_release(*, holder: Holder, name: str = LEASE_NAME) -> None:
    with transaction.atomic():
        DreamLease.objects.filter(name=name, holder=holder.token).update(expires_at=_EPOCH)


def lease_describe(*, name: str = LEASE_NAME) -> str:
    """Who holds the lease, for the record of a run that could not start."""
    lease = DreamLease.objects.filter(name=name).first()
    if lease is None:
        return "nobody holds the DREAM lease"
    beat = lease.heartbeat_at.isoformat() if lease.heartbeat_at else "never"
    run = f"run #{lease.run_id}" if lease.run_id else "a run"
    return (
        f"{run} holds the DREAM lease: {lease.host or lease.holder} pid {lease.pid}, last "
        f"heartbeat {beat}, expires {lease.expires_at.isoformat()}"
    )


# --- the heartbeat of the run in progress -----------------------------------------------------

_current: contextvars.ContextVar["_Beat | None"] = contextvars.ContextVar(
    "tideline_dream_lease", default=None
)


@dataclass
class _Beat:
    holder: Holder
    last: float = 0.0


@contextmanager
def lease_kept(holder: Holder) -> Iterator[Holder]:
    """Inside this block, `lease_heartbeat()` renews `holder`'s lease."""
    token = _current.set(_Beat(holder=holder, last=time.monotonic()))
    try:
        yield holder
    finally:
        _current.reset(token)


def lease_heartbeat(*, quiet_seconds: float = 0.0) -> None:
    """Renew the current run's lease (no-op outside a run). Renews at most every third of the
    lease length, unless the caller is about to go quiet for `quiet_seconds` (an LLM call), in
    which case the expiry is pushed past that silence at once."""
    beat = _current.get()
    if beat is None:
        return
    seconds = _lease_seconds()
    now = time.monotonic()
    if not quiet_seconds and now - beat.last < seconds / 3:
        return
    lease_renew(holder=beat.holder, seconds=int(seconds + quiet_seconds))
    beat.last = now
