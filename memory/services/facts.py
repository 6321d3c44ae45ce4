import re
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from memory.models import (
    Actor,
    AuditAction,
    ExpiredBy,
    Fact,
    FactKind,
    MemoryStatus,
    Profile,
    ProfileKind,
    ScopeKind,
)
from memory.models.memories import FACT_KIND_TAGS, FACT_VALUE_MAX_CHARS, PREDICATE_PATTERN
from memory.services.audit import audit_record
from memory.services.embedding import embedding_schedule
from memory.services.errors import InvalidInput
from memory.services.evidence import evidence_link, evidence_validate
from memory.services.scopes import scope_validate

_PREDICATE = re.compile(PREDICATE_PATTERN)


@dataclass(frozen=True)
class FactInput:
    scope_id: int
    profile_name: str
    kind: str
    predicate: str
    value: str
    profile_kind: str = ProfileKind.USER
    summary: str = ""
    confidence: float = 1.0
    importance: int = 3
    depends_on: list[str] = field(default_factory=list)
    expires_at: datetime | None = None
    valid_from: datetime | None = None
    pinned: bool = False
    secret: bool = False
    source_turn_ids: list[int] = field(default_factory=list)


def fact_validate(data: FactInput) -> None:
    if data.kind not in FactKind.values:
        raise InvalidInput(f"kind must be one of {FactKind.values}", field="kind")
    if not isinstance(data.predicate, str) or not _PREDICATE.fullmatch(data.predicate):
        raise InvalidInput(
            f"predicate {data.predicate!r} must match [a-z][a-z0-9_]{{1,40}} (a stable key)",
            field="predicate",
        )
    value = (data.value or "").strip()
    if not value:
        raise InvalidInput("value must not be empty", field="value")
    if len(value) > FACT_VALUE_MAX_CHARS:
        raise InvalidInput(
            f"value is {len(value)} characters; at most {FACT_VALUE_MAX_CHARS}", field="value"
        )
    if not (data.profile_name or "").strip():
        raise InvalidInput("a fact needs the profile it is about", field="profile_name")
    if data.profile_kind not in ProfileKind.values:
        raise InvalidInput(
            f"profile_kind must be one of {ProfileKind.values}", field="profile_kind"
        )
    if not 0.0 <= data.confidence <= 1.0:
        raise InvalidInput("confidence must be between 0 and 1", field="confidence")
    if not isinstance(data.importance, int) or not 1 <= data.importance <= 5:
        raise InvalidInput("importance must be an integer from 1 to 5", field="importance")
    if len(data.summary) > 500:
        raise InvalidInput("summary is longer than 500 characters", field="summary")


def fact_summary(
    *, kind: str, profile_name: str, predicate: str, value: str, scope_label: str, scope_kind: str
) -> str:
    """The owner's one-line reading: "[偏好] 用户 · responds_in: 简体中文", with the project label in
    front for project facts ("[项目·archive-manager] …")."""
    prefix = f"[{scope_label}] " if scope_kind == ScopeKind.PROJECT else ""
    readable_predicate = predicate.replace("_", " ")
    return (
        f"{prefix}[{FACT_KIND_TAGS[FactKind(kind)]}] {profile_name} · {readable_predicate}: {value}"
    )


def profile_ensure(*, scope_id: int, name: str, kind: str) -> Profile:
    profile, _ = Profile.objects.get_or_create(
        scope_id=scope_id, name=name.strip(), defaults={"kind": kind}
    )
    return profile


def fact_current(*, scope_id: int, profile_id: int, predicate: str) -> Fact | None:
    return (
        Fact.objects.filter(
            scope_id=scope_id,
            profile_id=profile_id,
            predicate=predicate,
            status=MemoryStatus.ACTIVE,
        )
        .order_by("-recorded_at", "-pk")
        .first()
    )


def fact_write(
    *, data: FactInput, actor: str = Actor.AGENT, reason: str = "", request_id: str = ""
) -> Fact:
    """Store a fact under its stable key (scope + profile + predicate).

    Same value as the current row → skip (nothing new is stored). A new value → invalidate: the old
    row gets `valid_to`, `superseded` and a link to its successor. Confidence below the candidate
    threshold → the new row waits in the candidate pool and supersedes nothing yet.
    """
    fact_validate(data)
    scope = scope_validate(scope_id=data.scope_id)
    evidence_validate(turn_ids=data.source_turn_ids, scope_id=data.scope_id)
    value = data.value.strip()
    now = timezone.now()
    valid_from = data.valid_from or now
    candidate = data.confidence < settings.TIDELINE_CANDIDATE_CONFIDENCE
    with transaction.atomic():
        profile = profile_ensure(scope_id=scope.pk, name=data.profile_name, kind=data.profile_kind)
        current = fact_current(scope_id=scope.pk, profile_id=profile.pk, predicate=data.predicate)
        if current is not None and current.value == value and not candidate:
            evidence_link(memory=current, turn_ids=data.source_turn_ids)
            audit_record(
                actor=actor,
                action=AuditAction.SKIP,
                target=current,
                reason=reason or "same value already current",
                after={"source_turn_ids": data.source_turn_ids},
                request_id=request_id,
            )
            return current
        fact = Fact(
            scope=scope,
            profile=profile,
            kind=data.kind,
            predicate=data.predicate,
            value=value,
            status=MemoryStatus.CANDIDATE if candidate else MemoryStatus.ACTIVE,
            confidence=data.confidence,
            importance=data.importance,
            summary=(
                data.summary.strip()
                or fact_summary(
                    kind=data.kind,
                    profile_name=profile.name,
                    predicate=data.predicate,
                    value=value,
                    scope_label=scope.label,
                    scope_kind=scope.kind,
                )
            ),
            depends_on=data.depends_on,
            expires_at=data.expires_at,
            valid_from=valid_from,
            pinned=data.pinned,
            secret=data.secret,
            supersedes=None if candidate else current,
        )
        fact.save()
        before = None
        if current is not None and not candidate:
            before = {"id": current.pk, "value": current.value, "status": current.status}
            current.status = MemoryStatus.SUPERSEDED
            current.expired_by = ExpiredBy.SUPERSEDED
            current.valid_to = valid_from
            current.superseded_by = fact
            current.save(
                update_fields=["status", "expired_by", "valid_to", "superseded_by", "updated_at"]
            )
        evidence_link(memory=fact, turn_ids=data.source_turn_ids)
        audit_record(
            actor=actor,
            action=AuditAction.INVALIDATE if before else AuditAction.INSERT,
            target=fact,
            reason=reason
            or (
                f"{data.predicate} changed; superseded #{current.pk}" if before else "fact written"
            ),
            before=before,
            after={"value": value, "status": fact.status, "supersedes": before and before["id"]},
            request_id=request_id,
        )
        embedding_schedule(memory_ids=[fact.pk])
    return fact
