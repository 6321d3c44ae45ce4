"""Every input an operation takes, defined once: REST bodies and queries use these models, and
each MCP tool's parameters are generated from the same model. So the two shells cannot drift:
same fields, same limits, and unknown fields refused (422 / tool error naming the field)."""

import re
import unicodedata
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from memory.services.bounds import (
    MOMENT_EARLIEST,
    MOMENT_LATEST,
    moment_storable,
    text_storable,
)

PLAIN_DIGITS = re.compile(r"0|[1-9][0-9]*")


def _digits_read(value: Any) -> Any:
    """A whole number sent as text — a query string's or a path's only form — is read only when
    written in plain digits: int() also reads "+669", " 3", "03" and "5_0", and lax parsing "3.0"
    and true, so a slip named memory 669, or scope 1 (global)."""
    if isinstance(value, str) and PLAIN_DIGITS.fullmatch(value):
        return int(value)
    return value


# Numbers and flags are strict: a bool is no number, and no number or word ("yes") a flag. Each
# type is one flat Annotated with the digits reader last: nested, or with the reader before the
# limits, the limits drop out of the published schemas (OpenAPI, MCP tools).
Whole = Annotated[int, Field(strict=True), BeforeValidator(_digits_read)]
Id = Annotated[int, Field(strict=True, ge=1, le=2**62), BeforeValidator(_digits_read)]
Dimension = Annotated[int, Field(strict=True, ge=1, le=5), BeforeValidator(_digits_read)]
SessionBudget = Annotated[int, Field(strict=True, ge=50, le=200_000), BeforeValidator(_digits_read)]
Number = Annotated[float, Field(strict=True)]
Flag = Annotated[bool, Field(strict=True)]

MemoryType = Literal["", "narrative", "fact", "self_concept"]
MemoryStatusFilter = Literal["", "candidate", "active", "superseded", "expired", "rejected"]
ThreadStatusName = Literal["open", "explored", "abandoned"]
Reason = Annotated[str, Field(max_length=500)]
DependsOn = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=1024)]], Field(max_length=20)
]
Tags = Annotated[list[Annotated[str, Field(min_length=1, max_length=100)]], Field(max_length=30)]
TurnIds = Annotated[list[Id], Field(max_length=200)]


def _moment_checked(moment: datetime) -> datetime:
    """A moment the store can hold; one without a time zone is read as UTC, as the store keeps
    every moment, so the answer to a write shows what a later read will."""
    if not moment_storable(moment):
        raise ValueError(f"must lie between {MOMENT_EARLIEST.date()} and {MOMENT_LATEST.date()}")
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


Moment = Annotated[datetime, AfterValidator(_moment_checked)]


def _visible(name: str) -> str:
    """A session id a person could read back: spaces or zero-width characters alone named a
    session nobody could tell apart from the next one typed the same invisible way."""
    if name and not any(
        not char.isspace() and unicodedata.category(char) not in ("Cf", "Cc", "Zs") for char in name
    ):
        raise ValueError("must contain a visible character")
    return name


SessionName = Annotated[str, Field(max_length=200), AfterValidator(_visible)]


def _storable(value: Any) -> Any:
    if isinstance(value, str):
        return text_storable(value)
    if isinstance(value, list):
        return [_storable(item) for item in value]
    if isinstance(value, dict):
        return {key: _storable(item) for key, item in value.items()}
    return value


class Strict(BaseModel):
    # NaN and Infinity are refused as what they are, not as "less than or equal to 1".
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        """NUL characters are dropped from every text a caller sends (PostgreSQL text cannot hold
        them), so they never fail a write on one backend and pass on the other."""
        return _storable(value)


class WhereIn(Strict):
    """Where the caller is: an explicit scope id, or its working directory / git remote."""

    scope_id: Id | None = None
    cwd: str = Field("", max_length=1024, description="the caller's working directory")
    git_remote: str = Field("", max_length=512)


class SessionIn(WhereIn):
    session_id: Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_visible)]
    runtime: str | None = Field(
        None,
        min_length=1,
        max_length=60,
        description="the agent runtime (claude-code, hermes, …); without it the session id alone "
        "names the session",
    )
    origin: Literal["user", "subagent"] = "user"
    delegation_depth: Whole = Field(0, ge=0, le=50)
    parent_session_id: SessionName = ""


class SessionStartIn(SessionIn):
    budget_tokens: SessionBudget | None = None


class TurnIn(SessionIn):
    content: str = Field(..., min_length=1, max_length=100_000)
    role: Literal["user", "assistant"] = "user"
    turn_id: str | None = Field(None, max_length=200)
    record: Flag = True
    budget_tokens: SessionBudget | None = None


class TurnItem(Strict):
    role: Literal["user", "assistant", "system", "tool"]
    content: str = Field(..., min_length=1, max_length=100_000)
    speaker: str = Field("", max_length=120)
    occurred_at: Moment | None = None
    turn_id: str | None = Field(None, max_length=200)


class TurnsIn(SessionIn):
    turns: list[TurnItem] = Field(..., min_length=1, max_length=500)


class TranscriptIn(SessionIn):
    """Raw transcript lines as the runtime wrote them; the server reads out the conversation."""

    format: Literal["claude_code"] = "claude_code"
    lines: list[Annotated[str, Field(max_length=1_000_000)]] = Field(
        ..., min_length=1, max_length=5000
    )


class TurnRecordIn(SessionIn, TurnItem):
    """One turn, for callers that record as they go (MCP context_record)."""


class MemoryCommon(WhereIn):
    confidence: Number = Field(1.0, ge=0, le=1)
    pinned: Flag = False
    secret: Flag = Field(False, description="shown to the owner only; never returned to agents")
    depends_on: DependsOn = Field(
        default_factory=list, description='conditions, e.g. "path:/abs/dir" or "memory:<id>"'
    )
    expires_at: Moment | None = None
    valid_from: Moment | None = None
    reason: Reason = ""


class FactIn(MemoryCommon):
    profile_name: str = Field(..., min_length=1, max_length=120)
    profile_kind: Literal["user", "person", "self", "project"] = "user"
    kind: Literal["preference", "fact", "episode", "reflection", "impression", "relationship"]
    predicate: str = Field(..., min_length=2, max_length=41, pattern=r"^[a-z][a-z0-9_]{1,40}$")
    value: str = Field(..., min_length=1, max_length=60)
    summary: str = Field("", max_length=500)
    importance: Dimension = 3
    source_turn_ids: TurnIds = Field(default_factory=list)


class NarrativeFields(Strict):
    """A narrative's own fields, all optional, with the limits every write and edit share."""

    context: str = Field("", max_length=20_000)
    moment: str = Field("", max_length=20_000)
    cognition_direction: str = Field("", max_length=500)
    importance: Dimension | None = None
    emotional: Dimension | None = None
    unresolved: Dimension | None = None
    layer: Literal["fact", "experience", "decision"] = "experience"
    ntype: str = Field("general", min_length=1, max_length=32)
    tags: Tags = Field(default_factory=list)
    entities_role: str = Field("", max_length=300)
    related_entities: Tags = Field(default_factory=list)
    valence: Number = Field(0.0, ge=-1, le=1)
    emotion_intensity: Number = Field(0.0, ge=0, le=10)
    summary: str = Field("", max_length=500)


class NarrativeIn(MemoryCommon, NarrativeFields):
    gesture: str = Field(..., min_length=1, max_length=500)
    source_turn_ids: TurnIds = Field(default_factory=list)


class MemoryChanges(NarrativeFields):
    """What an edit may change. Only the fields sent change; the kind of memory decides which
    apply (facts: value, summary, confidence, importance; self-concept: content)."""

    gesture: str | None = Field(None, min_length=1, max_length=500)
    value: str | None = Field(None, min_length=1, max_length=60)
    content: str | None = Field(None, min_length=1, max_length=4000)
    confidence: Number | None = Field(None, ge=0, le=1)
    depends_on: DependsOn | None = None
    expires_at: Moment | None = None
    pinned: Flag | None = None
    secret: Flag | None = None

    @field_validator("layer", "ntype", "tags", "related_entities", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("must not be null")
        return value


class MemoryPatch(Strict):
    changes: MemoryChanges
    reason: Reason = ""


class MemoryEditIn(MemoryPatch):
    memory_id: Id


class MemoryExpireIn(Strict):
    memory_id: Id
    reason: str = Field(..., min_length=1, max_length=500)


class RecallIn(Strict):
    memory_id: Id
    evidence_turns: Whole = Field(5, ge=0, le=50)


class ListIn(WhereIn):
    memory_type: MemoryType = ""
    status: MemoryStatusFilter = "active"
    limit: Whole = Field(50, ge=1, le=200)
    offset: Whole = Field(0, ge=0, le=1_000_000)


class SearchIn(WhereIn):
    q: str = Field(..., min_length=1, max_length=2000, description="what to look for")
    limit: Whole = Field(10, ge=1, le=100)
    memory_type: MemoryType = ""


class TurnSearchIn(WhereIn):
    q: str = Field(..., min_length=1, max_length=2000, description="what to look for")
    limit: Whole = Field(10, ge=1, le=100)


class SessionSearchIn(WhereIn):
    q: str = Field(
        ..., min_length=1, max_length=2000, description="what the conversation was about"
    )
    limit: Whole = Field(5, ge=1, le=50)


class SurfaceIn(WhereIn):
    text: str = Field(..., min_length=1, max_length=20_000)
    budget_tokens: Whole = Field(2000, ge=50, le=20_000)


class TimelineIn(WhereIn):
    session_id: SessionName = ""
    around_turn_id: Id | None = None
    limit: Whole = Field(20, ge=1, le=200)


class ProfilesIn(WhereIn):
    name: str = Field("", max_length=120)


class SelfConceptIn(Strict):
    field: Literal["fact", "terrain", "self_reflection"]
    content: str = Field(..., min_length=1, max_length=4000)
    reason: Reason = ""


class ThreadIn(WhereIn):
    content: str = Field(..., min_length=1, max_length=4000)
    importance: Dimension = 3
    emotional: Dimension = 3
    recurrence: Dimension = 3
    unresolved: Dimension = 3


class ThreadQuery(WhereIn):
    status: Literal["", "open", "explored", "abandoned"] = "open"
    limit: Whole = Field(50, ge=1, le=200)


class ThreadPatch(Strict):
    status: ThreadStatusName
    reason: Reason = ""


class ThreadUpdateIn(ThreadPatch):
    thread_id: Id


class SnapshotIn(WhereIn):
    content: str = Field(..., min_length=1, max_length=4000)


class SnapshotQuery(WhereIn):
    limit: Whole = Field(1, ge=1, le=200)


class AttentionIn(WhereIn):
    days: Whole = Field(30, ge=1, le=365)


WHERE_FIELDS = frozenset(WhereIn.model_fields)
SESSION_FIELDS = frozenset(SessionIn.model_fields) - WHERE_FIELDS
