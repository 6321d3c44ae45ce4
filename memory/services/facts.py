import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from memory.models import (
    Actor,
    AuditAction,
    ExpiredBy,
    Fact,
    FactKind,
    Memory,
    MemoryStatus,
    Profile,
    ProfileKind,
    Scope,
    ScopeKind,
)
from memory.models.memories import FACT_KIND_TAGS, FACT_VALUE_MAX_CHARS, PREDICATE_PATTERN
from memory.services.audit import audit_record
from memory.services.consolidation import (
    Decision,
    confidence_combine,
    depends_on_validate,
    is_candidate,
    rejection_audit,
    statuses,
    text_normalise,
    valid_q,
)
from memory.services.embedding import embedding_schedule
from memory.services.errors import Conflict, InvalidInput
from memory.services.evidence import evidence_link, evidence_validate
from memory.services.gate import GateVerdict, gate_check
from memory.services.races import atomic_retrying
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
    # An edit of this row: written only while it is still the key's current value.
    supersedes_id: int | None = None


# How far ahead of this server's clock a writer's "now" may run (clocks of agents' machines drift).
CLOCK_SKEW = timedelta(minutes=5)


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
    # A fact is what is or was true. One dated ahead would replace the current value today while
    # not yet being true itself (T3 said the new on-call engineer had started); a plan is a
    # narrative.
    if data.valid_from is not None and data.valid_from > timezone.now() + CLOCK_SKEW:
        raise InvalidInput(
            "valid_from is in the future: a fact records what is or was true (write a plan as a "
            "narrative)",
            field="valid_from",
        )
    starts = data.valid_from or timezone.now()
    if data.expires_at is not None and data.expires_at <= starts:
        raise InvalidInput("expires_at must be after valid_from (or now)", field="expires_at")


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


def _profile_locked(*, scope_id: int, name: str, kind: str) -> Profile:
    """The profile, locked until the transaction ends: writers of facts about one profile take
    turns, so each reads the current row its successor will replace (a no-op on SQLite, whose
    IMMEDIATE transactions already take turns)."""
    profile = profile_ensure(scope_id=scope_id, name=name, kind=kind)
    return Profile.objects.select_for_update().get(pk=profile.pk)


def _fact_current_locked(*, scope_id: int, profile_id: int, predicate: str) -> Fact | None:
    """The key's current row, locked until the transaction ends. The profile lock orders writers
    of the key, but an expiry or a restore locks only the memory: without this lock an edit could
    read the row, wait, and then supersede a row an expiry had ended meanwhile, undoing the expiry
    that had been answered 200. Locked, the read waits and sees what the other committed."""
    return (
        Fact.objects.select_for_update()
        .filter(
            scope_id=scope_id,
            profile_id=profile_id,
            predicate=predicate,
            status=MemoryStatus.ACTIVE,
        )
        .order_by("-recorded_at", "-pk")
        .first()
    )


def fact_ttl_days(*, kind: str, scope_kind: str) -> int | None:
    """Episodes fade after settings.TIDELINE_TTL_EPISODE_DAYS, a project's facts after
    TIDELINE_TTL_PROJECT_FACT_DAYS; preferences and reflections (TIDELINE_NEVER_EXPIRE_KINDS) and
    the user's own profile facts never."""
    if kind in settings.TIDELINE_NEVER_EXPIRE_KINDS:
        return None
    if kind == FactKind.EPISODE:
        return settings.TIDELINE_TTL_EPISODE_DAYS
    if kind == FactKind.FACT and scope_kind == ScopeKind.PROJECT:
        return settings.TIDELINE_TTL_PROJECT_FACT_DAYS
    return None


def _ttl_from(fact: Fact, start: datetime) -> datetime | None:
    days = fact_ttl_days(kind=fact.kind, scope_kind=fact.scope.kind)
    return start + timedelta(days=days) if days else None


@dataclass(frozen=True)
class PreparedFact:
    """A fact checked and judged outside any transaction, ready for fact_commit."""

    data: FactInput
    scope: Scope
    value: str
    depends_on: list[str]
    verdict: GateVerdict


def fact_prepare(
    *, data: FactInput, use_llm: bool | None = None, writer_sees_secrets: bool = False
) -> PreparedFact:
    """Validate (bad input raises InvalidInput and nothing is written) and run the write gate.
    May call the LLM judge, so never call it inside a transaction."""
    fact_validate(data)
    scope = scope_validate(scope_id=data.scope_id)
    evidence_validate(turn_ids=data.source_turn_ids, scope_id=data.scope_id)
    depends_on = depends_on_validate(
        data.depends_on,
        scope_id=data.scope_id,
        writer_sees_secrets=writer_sees_secrets,
        edited_id=data.supersedes_id,
    )
    value = data.value.strip()
    if use_llm is None:
        use_llm = settings.TIDELINE_GATE_USE_LLM
    verdict = gate_check(
        text=value,
        subject=data.profile_name.strip(),
        predicate=data.predicate,
        value=value,
        # The summary is the text T1 and T4 inject for a fact, so it is checked as the value is.
        attached=[data.summary],
        use_llm=use_llm and not data.secret,
    )
    return PreparedFact(data=data, scope=scope, value=value, depends_on=depends_on, verdict=verdict)


def _retire(old: Fact, *, at: datetime) -> None:
    """The old row stops being current before its successor becomes current, so the key never
    has two active rows, not even inside the transaction. A row that begins after `at` (dated
    ahead, or replaced by a successor dated before it) ends where it began: valid for no time,
    never for a negative one."""
    old.status = MemoryStatus.SUPERSEDED
    old.expired_by = ExpiredBy.SUPERSEDED
    old.valid_to = max(at, old.valid_from)
    old.save(update_fields=["status", "expired_by", "valid_to", "updated_at"])


def _link(old: Fact, new: Fact) -> None:
    old.superseded_by = new
    old.save(update_fields=["superseded_by", "updated_at"])


def _history_record(
    *, fact: Fact, current: Fact, turn_ids: list[int], actor: str, reason: str, request_id: str
) -> Fact:
    """Store an observation older than the key's current row as the history that row ended:
    true from its own valid_from until the current row began, and never current."""
    fact.status = MemoryStatus.SUPERSEDED
    fact.expired_by = ExpiredBy.SUPERSEDED
    fact.valid_to = current.valid_from
    fact.superseded_by = current
    fact.save()
    evidence_link(memory=fact, turn_ids=turn_ids)
    audit_record(
        actor=actor,
        action=AuditAction.INSERT,
        target=fact,
        reason=reason
        or (
            f"{fact.predicate} recorded as history: valid from {fact.valid_from.isoformat()}, "
            f"before current #{current.pk} (valid from {current.valid_from.isoformat()})"
        ),
        after={
            "value": fact.value,
            "status": fact.status,
            "valid_to": fact.valid_to.isoformat(),
            "superseded_by": current.pk,
            "statuses": statuses(fact),
        },
        request_id=request_id,
    )
    # Embedded like any row, so a search of the past finds it by meaning too.
    embedding_schedule(memory_ids=[fact.pk])
    return fact


def _restated(
    *, target: Fact, prepared: PreparedFact, now: datetime, displaced: Fact | None = None
) -> tuple[Decision, dict, dict]:
    """The incoming observation supports a stored row: it absorbs the evidence and confidence,
    and restarts its TTL. A candidate promoted by it retires `displaced` (the key's current row)
    first. Returns (decision, before, after)."""
    data = prepared.data
    before = {
        "status": target.status,
        "confidence": target.confidence,
        "secret": target.secret,
        "expires_at": target.expires_at.isoformat() if target.expires_at else None,
    }
    identical = target.value == prepared.value
    # A pinned row is never merged into: it keeps exactly what the owner pinned.
    restates = identical and not is_candidate(data.confidence)
    decision = Decision.SKIP if restates or target.pinned else Decision.MERGE
    # Secrecy only tightens, and a pin is no reason to keep showing what was asked to be hidden.
    target.secret = target.secret or data.secret
    fields = ["secret", "updated_at"]
    if not target.pinned:
        target.confidence = confidence_combine(target.confidence, data.confidence)
        target.importance = max(target.importance, data.importance)
        expires = _ttl_from(target, now) if data.expires_at is None else data.expires_at
        if expires is not None:
            target.expires_at = expires
        fields += ["confidence", "importance", "expires_at"]
        if target.status == MemoryStatus.CANDIDATE and not is_candidate(target.confidence):
            decision = Decision.PROMOTE
            target.status = MemoryStatus.ACTIVE
            fields.append("status")
            if displaced is not None:
                _retire(displaced, at=now)
                target.supersedes = displaced
                fields.append("supersedes")
    target.save(update_fields=fields)
    evidence_link(memory=target, turn_ids=data.source_turn_ids)
    after = {
        "status": target.status,
        "confidence": target.confidence,
        "secret": target.secret,
        "expires_at": target.expires_at.isoformat() if target.expires_at else None,
        "incoming": {"value": prepared.value, "confidence": data.confidence},
        "source_turn_ids": data.source_turn_ids,
    }
    return decision, before, after


def _pending_candidate(
    *, scope_id: int, profile_id: int, predicate: str, value: str, include_secret: bool
) -> Fact | None:
    wanted = text_normalise(value)
    candidates = Fact.objects.filter(
        scope_id=scope_id,
        profile_id=profile_id,
        predicate=predicate,
        status=MemoryStatus.CANDIDATE,
        pinned=False,
    )
    if not include_secret:
        candidates = candidates.filter(secret=False)
    for candidate in candidates.order_by("-recorded_at", "-pk"):
        if text_normalise(candidate.value) == wanted:
            return candidate
    return None


def fact_commit(
    *,
    prepared: PreparedFact,
    actor: str = Actor.AGENT,
    reason: str = "",
    request_id: str = "",
    writer_sees_secrets: bool = False,
) -> Fact:
    """Run the consolidation state machine for one prepared fact. The caller holds the
    transaction (fact_write, or inbox_flush around a whole item).

    A writer who may not read secrets is answered as if none were stored: its value is never
    compared with a secret current value or candidate (a "same value" answer would confirm a
    guessed secret), so it supersedes a secret current row like any new value."""
    data, scope, value = prepared.data, prepared.scope, prepared.value
    now = timezone.now()
    valid_from = data.valid_from or now
    profile = _profile_locked(scope_id=scope.pk, name=data.profile_name, kind=data.profile_kind)
    fact = Fact(
        scope=scope,
        profile=profile,
        kind=data.kind,
        predicate=data.predicate,
        value=value,
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
        depends_on=prepared.depends_on,
        valid_from=valid_from,
        pinned=data.pinned,
        secret=data.secret,
    )
    fact.expires_at = data.expires_at or _ttl_from(fact, valid_from)

    if not prepared.verdict.passed:
        fact.status = MemoryStatus.REJECTED
        fact.save()
        evidence_link(memory=fact, turn_ids=data.source_turn_ids)
        rejection_audit(
            memory=fact,
            verdict=prepared.verdict,
            actor=actor,
            reason=reason,
            request_id=request_id,
        )
        return fact

    current = _fact_current_locked(
        scope_id=scope.pk, profile_id=profile.pk, predicate=data.predicate
    )
    if data.supersedes_id is not None and (current is None or current.pk != data.supersedes_id):
        raise Conflict(_edit_lost(edited_id=data.supersedes_id, current=current))
    # An edit says what the row should now be: it is applied as a new version (or is a no-op),
    # never taken as a second observation that merges into the row or raises its confidence.
    edit = data.supersedes_id is not None
    changed = _edited_fields(old=current, new=fact) if edit else {}
    if edit and not changed:
        audit_record(
            actor=actor,
            action=AuditAction.SKIP,
            target=current,
            reason=reason or "the edit changes nothing",
            request_id=request_id,
        )
        return current
    comparable = current is not None and (
        writer_sees_secrets or not current.secret or current.pk == data.supersedes_id
    )
    if not edit and comparable and text_normalise(current.value) == text_normalise(value):
        decision, before, after = _restated(target=current, prepared=prepared, now=now)
        audit_record(
            actor=actor,
            action=AuditAction(decision.value),
            target=current,
            reason=reason
            or (
                "same value already current"
                if decision == Decision.SKIP
                else f"{data.predicate} restated; evidence merged into #{current.pk}"
            ),
            before=before,
            after=after | {"statuses": statuses(current)},
            request_id=request_id,
        )
        return current

    # A writer that may read secrets is Tideline's own (the inbox, DREAM) and speaks for no agent:
    # the key's new value, or older history of it, keeps the secrecy the owner gave the current
    # one. An agent's value replaces a secret in plain, since it holds the value already.
    if writer_sees_secrets and current is not None and current.secret:
        fact.secret = True
    # A value dated before the current row began is older news, not a change (an import, or an
    # agent recalling the past): it becomes history whatever its confidence, so it neither
    # displaces the newer value nor waits as a candidate a later restatement could promote over
    # it. A write without valid_from speaks for now. A writer that may not read a secret current
    # row is answered as if none were stored, so its value supersedes as any other would.
    if (
        not edit
        and comparable
        and data.valid_from is not None
        and data.valid_from < current.valid_from
    ):
        return _history_record(
            fact=fact,
            current=current,
            turn_ids=data.source_turn_ids,
            actor=actor,
            reason=reason,
            request_id=request_id,
        )

    pending = (
        None
        if edit
        else _pending_candidate(
            scope_id=scope.pk,
            profile_id=profile.pk,
            predicate=data.predicate,
            value=value,
            include_secret=writer_sees_secrets,
        )
    )
    if pending is not None:
        decision, before, after = _restated(
            target=pending, prepared=prepared, now=now, displaced=current
        )
        touched = [pending]
        if decision == Decision.PROMOTE and current is not None:
            _link(current, pending)
            touched.append(current)
            after["superseded"] = current.pk
        audit_record(
            actor=actor,
            action=AuditAction(decision.value),
            target=pending,
            reason=reason
            or (
                f"candidate #{pending.pk} promoted: confidence {before['confidence']} → "
                f"{pending.confidence}"
                if decision == Decision.PROMOTE
                else f"more support for candidate #{pending.pk}"
            ),
            before=before,
            after=after | {"statuses": statuses(*touched)},
            request_id=request_id,
        )
        if decision == Decision.PROMOTE:
            embedding_schedule(memory_ids=[pending.pk])
        return pending

    candidate = is_candidate(data.confidence)
    fact.status = MemoryStatus.CANDIDATE if candidate else MemoryStatus.ACTIVE
    # A new observation below the threshold waits beside the current row; an edit replaces the
    # row it edits whatever its confidence, as a narrative edit does.
    replaces = current is not None and (edit or not candidate)
    fact.supersedes = current if replaces else None
    before = None
    if replaces:
        before = {"id": current.pk, "value": current.value, "status": current.status}
        _retire(current, at=valid_from)
    fact.save()
    touched = [fact]
    if before is not None:
        _link(current, fact)
        touched.append(current)
    evidence_link(memory=fact, turn_ids=data.source_turn_ids)
    # The reason is what the writer reads back; a secret it replaced unseen is not named there
    # (before and after still record it for the owner).
    named = before is not None and comparable
    audit_record(
        actor=actor,
        action=AuditAction.INVALIDATE if before else AuditAction.INSERT,
        target=fact,
        reason=reason
        or (
            f"{data.predicate} changed; superseded #{current.pk}"
            if named
            else ("candidate: confidence below threshold" if candidate else "fact written")
        ),
        before=before,
        after={
            "value": value,
            "status": fact.status,
            "supersedes": before and before["id"],
            "statuses": statuses(*touched),
            **({"changed": changed} if edit else {}),
        },
        request_id=request_id,
    )
    embedding_schedule(memory_ids=[fact.pk])
    return fact


def fact_write(
    *,
    data: FactInput,
    actor: str = Actor.AGENT,
    reason: str = "",
    request_id: str = "",
    writer_sees_secrets: bool = False,
) -> Fact:
    """Store a fact under its stable key (scope + profile + predicate), through the write gate and
    the consolidation state machine (see consolidation.py):

    gate says no → stored as `rejected` with the reason; same (normalised) value as the current
    row → skip / merge (evidence and confidence absorbed, TTL restarted); a new value → invalidate:
    the old row gets `valid_to`, `superseded` and a link to its successor; confidence below the
    candidate threshold → the row waits in the candidate pool and supersedes nothing until more
    support promotes it. A new value whose `valid_from` is earlier than the current row's is history,
    not a change: it is stored superseded by the current row, valid until that row began. An edit
    (`supersedes_id`) is never a restatement: it replaces the row it edits with a new version
    whatever it changes, or skips when it changes nothing.
    """
    prepared = fact_prepare(data=data, writer_sees_secrets=writer_sees_secrets)
    # Two first writers of one key both see no current row; the database lets one in and the
    # other runs again, now superseding the winner (last writer wins).
    return atomic_retrying(
        lambda: fact_commit(
            prepared=prepared,
            actor=actor,
            reason=reason,
            request_id=request_id,
            writer_sees_secrets=writer_sees_secrets,
        ),
        model=Memory,
        constraints=("memory_one_active_per_key", "memory_one_live_successor"),
        lost=f"{data.predicate} kept changing under this write; try again",
    )


# What an edit of a fact may change; everything else is the key itself.
_EDITABLE = (
    "value",
    "summary",
    "confidence",
    "importance",
    "depends_on",
    "expires_at",
    "pinned",
    "secret",
)


def _edited_fields(*, old: Fact, new: Fact) -> dict[str, list]:
    """{field: [before, after]} for each editable field an edit changes, as the audit stores it."""
    changed = {}
    for name in _EDITABLE:
        before, after = getattr(old, name), getattr(new, name)
        if before != after:
            changed[name] = [
                value.isoformat() if isinstance(value, datetime) else value
                for value in (before, after)
            ]
    return changed


def _edit_lost(*, edited_id: int, current: Fact | None) -> str:
    state = Memory.objects.filter(pk=edited_id).values_list("status", flat=True).first()
    # The editor may not read a secret successor, so the message names only a plain one.
    if current is None or current.secret:
        return f"fact #{edited_id} is {state or 'unknown'}, no longer current"
    return (
        f"fact #{edited_id} is {state or 'unknown'}, no longer current; the current value is "
        f"#{current.pk} ({current.value})"
    )


def facts_as_of(
    *,
    scope_ids: list[int],
    as_of: datetime | None = None,
    profile_name: str | None = None,
    predicate: str | None = None,
):
    """Facts that were true at `as_of` (bitemporal: recorded by then and valid then), or the
    current ones when `as_of` is None, in the given scopes only."""
    rows = Fact.objects.filter(valid_q(as_of=as_of), scope_id__in=list(scope_ids))
    if profile_name is not None:
        rows = rows.filter(profile__name=profile_name.strip())
    if predicate is not None:
        rows = rows.filter(predicate=predicate)
    return rows.select_related("profile", "scope").order_by("profile__name", "predicate", "-pk")
