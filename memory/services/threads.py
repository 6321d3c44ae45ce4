from django.db import transaction

from memory.models import Actor, AuditAction, Snapshot, Thread, ThreadStatus
from memory.services.audit import audit_record
from memory.services.errors import InvalidInput, NotFound
from memory.services.gate import gate_injection, gate_orders
from memory.services.scopes import scope_validate
from memory.services.weights import weight_compute

CONTENT_MAX_CHARS = 4000


def _check_content(content: str) -> str:
    content = (content or "").strip()
    if not content:
        raise InvalidInput("content must not be empty", field="content")
    if len(content) > CONTENT_MAX_CHARS:
        raise InvalidInput(
            f"content is longer than {CONTENT_MAX_CHARS} characters", field="content"
        )
    # Threads and snapshots are injected at session start as the agent's own ("who I am"), and
    # have no rejected status to hold a refused one in: an injection, or a standing order the
    # agent would obey from then on, is refused outright.
    for verdict in (gate_injection(texts=[content]), gate_orders(text=content)):
        if not verdict.passed:
            raise InvalidInput(verdict.message, field="content")
    return content


def snapshot_write(
    *,
    scope_id: int,
    content: str,
    session_id: int | None = None,
    actor: str = Actor.AGENT,
    reason: str = "",
    request_id: str = "",
) -> Snapshot:
    content = _check_content(content)
    scope_validate(scope_id=scope_id)
    with transaction.atomic():
        snapshot = Snapshot.objects.create(
            scope_id=scope_id, session_id=session_id, content=content
        )
        audit_record(
            actor=actor,
            action=AuditAction.INSERT,
            target=snapshot,
            reason=reason or "snapshot written",
            request_id=request_id,
        )
    return snapshot


def thread_write(
    *,
    scope_id: int,
    content: str,
    importance: int = 3,
    emotional: int = 3,
    recurrence: int = 3,
    unresolved: int = 3,
    source_memory_id: int | None = None,
    actor: str = Actor.AGENT,
    reason: str = "",
    request_id: str = "",
) -> Thread:
    content = _check_content(content)
    for name, value in (
        ("importance", importance),
        ("emotional", emotional),
        ("recurrence", recurrence),
        ("unresolved", unresolved),
    ):
        if not isinstance(value, int) or not 1 <= value <= 5:
            raise InvalidInput(f"{name} must be an integer from 1 to 5", field=name)
    scope_validate(scope_id=scope_id)
    with transaction.atomic():
        thread = Thread.objects.create(
            scope_id=scope_id,
            content=content,
            importance=importance,
            emotional=emotional,
            recurrence=recurrence,
            unresolved=unresolved,
            weight=weight_compute(
                importance=importance,
                emotional=emotional,
                recurrence=recurrence,
                unresolved=unresolved,
            ),
            source_memory_id=source_memory_id,
        )
        audit_record(
            actor=actor,
            action=AuditAction.INSERT,
            target=thread,
            reason=reason or "thread opened",
            after={"weight": thread.weight},
            request_id=request_id,
        )
    return thread


def thread_set_status(
    *, thread_id: int, status: str, actor: str = Actor.AGENT, reason: str = "", request_id: str = ""
) -> Thread:
    if status not in ThreadStatus.values:
        raise InvalidInput(f"status must be one of {ThreadStatus.values}", field="status")
    with transaction.atomic():
        thread = Thread.objects.select_for_update().filter(pk=thread_id).first()
        if thread is None:
            raise NotFound(f"unknown thread {thread_id}")
        before = thread.status
        thread.status = status
        thread.save(update_fields=["status", "updated_at"])
        audit_record(
            actor=actor,
            action=AuditAction.UPDATE,
            target=thread,
            reason=reason or f"thread {before} → {status}",
            before={"status": before},
            after={"status": status},
            request_id=request_id,
        )
    return thread
