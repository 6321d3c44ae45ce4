"""The inbox (seed 003): captured raw utterances wait here until `flush_inbox` turns them into
memory candidates — by rules, or by the configured LLM with the rules as the fallback — and runs
each candidate through the write gate, scope assignment and consolidation.

Each item is processed exactly once: it is claimed (pending → processed/skipped) in the same
transaction that stores its memories, so a re-run finds nothing to do and a crash leaves it
pending. Subagent utterances (delegation depth ≥ 1) are not the owner's words and are not
captured unless settings.TIDELINE_CAPTURE_SUBAGENTS says so.

Rule extraction is deliberately conservative: the user's name, job, reply language and editor
become profile facts in the global scope; statements about this machine go to the workspace;
any other statement becomes a narrative candidate (confidence below the candidate threshold)
in the project it was said in — promoted only when repeated or confirmed, and a repeat inside the
session that said it is no confirmation. Questions and small talk (too few words that say
something: "hi", "sounds good", "continue", "好的") are skipped.
"""

import logging
import re
from collections import Counter
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from memory.models import (
    Actor,
    AuditAction,
    AuditEvent,
    Fact,
    FactKind,
    InboxItem,
    InboxStatus,
    MemoryType,
    NarrativeLayer,
    ProfileKind,
    Scope,
    ScopeKind,
    Session,
    SessionOrigin,
)
from memory.models.memories import FACT_VALUE_MAX_CHARS, PREDICATE_PATTERN
from memory.services.attribution import (
    MACHINE,
    PROJECT,
    USER_SUBJECT,
    fact_attribute,
    text_attribute,
)
from memory.services.audit import audit_record
from memory.services.capture import CAPTURED_MAX_CHARS
from memory.services.consolidation import (
    LIVE_STATUSES,
    Decision,
    near_duplicate_find,
    text_normalise,
)
from memory.services.errors import InvalidInput
from memory.services.facts import FactInput, PreparedFact, fact_commit, fact_prepare
from memory.services.gate import gate_content_words
from memory.services.llm import LLMUnavailable, llm_complete_json
from memory.services.narratives import (
    NarrativeInput,
    PreparedNarrative,
    narrative_commit,
    narrative_prepare,
)
from memory.services.scopes import (
    project_root,
    scope_global,
    scope_resolve_for_write,
    scope_validate,
    scope_workspace,
)

logger = logging.getLogger("tideline.inbox")

INBOX_MAX_CHARS = CAPTURED_MAX_CHARS
# A SQL LIMIT must fit a 64-bit integer on both databases.
FLUSH_LIMIT_MAX = 2**62
# Rules are sure of a matched profile pattern, unsure of free text (it waits as a candidate).
RULE_PROFILE_CONFIDENCE = 0.8
RULE_STATEMENT_CONFIDENCE = 0.45
# A statement needs this many different words that say something (stop words and small talk
# aside) to become a memory: "I prefer tabs" has two, "sounds good" and "continue" none, "this is
# wrong" one.
CAPTURE_MIN_CONTENT_WORDS = 2
# Said of oneself, one word is enough: "I'm vegetarian", "Soy zurdo", "我是左撇子", "東京在住です".
_ABOUT_ONESELF = re.compile(
    r"^(?:(?:i['’]m|i am|my|soy|estoy|tengo|vivo|mi)\b|我是|我有|我在|我叫|私は|僕は)|です[。!！]?$",
    re.IGNORECASE,
)
CANDIDATE_MAX_CHARS = 500
USER_PROFILE = "用户"
SCOPE_HINTS = ("global", "workspace", "project")


@dataclass(frozen=True)
class Candidate:
    """One memory an utterance yields, before gate and consolidation."""

    scope_hint: str  # global | workspace | project
    confidence: float
    importance: int = 3
    # A fact when predicate is set, else a narrative with `text` as its gesture.
    text: str = ""
    profile: str = USER_PROFILE
    kind: str = FactKind.PREFERENCE
    predicate: str = ""
    value: str = ""
    summary: str = ""
    tags: tuple[str, ...] = ()

    @property
    def is_fact(self) -> bool:
        return bool(self.predicate)


@dataclass
class FlushReport:
    processed: int = 0
    skipped: int = 0
    llm_fallbacks: int = 0
    decisions: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.processed + self.skipped


# --- Capture -----------------------------------------------------------------------------------


def _capture_scope(cwd: str) -> Scope:
    # Said in a place that cannot be read, an utterance is refused, and said in a directory this
    # machine lacks, it is filed in a project of its own, as every write is: global is the scope
    # every project reads. Said nowhere, it is the user's own and global.
    if not cwd:
        return scope_global()
    return scope_resolve_for_write(cwd=cwd)


def inbox_capture(
    *,
    content: str,
    cwd: str = "",
    session_id: int | None = None,
    scope_id: int | None = None,
    origin: str = SessionOrigin.USER,
    delegation_depth: int = 0,
    actor: str = Actor.AGENT,
    request_id: str = "",
) -> InboxItem | None:
    """Queue one utterance for flush_inbox. Returns None (and writes nothing) for a subagent's
    words unless capturing them is configured. The session header, when given, decides origin."""
    content = (content or "").strip()
    if not content:
        raise InvalidInput("content must not be empty", field="content")
    if len(content) > INBOX_MAX_CHARS:
        raise InvalidInput(f"content is longer than {INBOX_MAX_CHARS} characters", field="content")
    if origin not in SessionOrigin.values:
        raise InvalidInput(f"origin must be one of {SessionOrigin.values}", field="origin")
    if not isinstance(delegation_depth, int) or delegation_depth < 0:
        raise InvalidInput(
            "delegation_depth must be a non-negative integer", field="delegation_depth"
        )
    session = None
    if session_id is not None:
        session = Session.objects.filter(pk=session_id).first()
        if session is None:
            raise InvalidInput(f"unknown session {session_id!r}", field="session")
        delegation_depth = max(delegation_depth, session.delegation_depth)
        if session.is_subagent:
            origin = SessionOrigin.SUBAGENT
        cwd = cwd or session.cwd
    if delegation_depth >= 1:
        origin = SessionOrigin.SUBAGENT
    if origin == SessionOrigin.SUBAGENT and not settings.TIDELINE_CAPTURE_SUBAGENTS:
        return None
    if scope_id is not None:
        scope = scope_validate(scope_id=scope_id)
    elif session is not None:
        scope = session.scope
    else:
        scope = _capture_scope(cwd)
    with transaction.atomic():
        item = InboxItem.objects.create(
            session=session,
            scope=scope,
            cwd=cwd,
            content=content,
            origin=origin,
            delegation_depth=delegation_depth,
        )
        audit_record(
            actor=actor,
            action=AuditAction.RECORD,
            target=item,
            reason=f"utterance captured into the inbox ({origin}, scope {scope.label})",
            after={"status": item.status, "scope_id": scope.pk, "origin": origin},
            request_id=request_id,
        )
    return item


# --- Rule extraction (zh / ja / es / en) ---------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[。！？!?\n])|(?<=[.;；])\s+")
_QUESTION = re.compile(
    r"[?？]\s*$|^(?:¿|为什么|怎么|如何|是否|能不能|可不可以|有没有|what|why|how|when|where|who|"
    r"which|can|could|would|should|is|are|do|does|did|qué|cómo|por qué|cuándo|dónde|quién)\b",
    re.IGNORECASE,
)
_VALUE = r"(?P<value>[^，,。.!！?？;；\n]{1,60}?)"
_TAIL = r"\s*[。.!！]?\s*$"
_JOBS_EN = "engineer|developer|programmer|designer|student|teacher|researcher|scientist|manager|writer|doctor|nurse|lawyer"
_JOBS_ES = "ingenier[oa]|desarrollador[a]?|programador[a]?|diseñador[a]?|estudiante|profesor[a]?|investigador[a]?|médic[oa]|abogad[oa]"

# (pattern, predicate, summary template) → a global profile fact about the user.
_PROFILE_PATTERNS: list[tuple[re.Pattern, str, str, str]] = [
    (re.compile(rf"^我(?:的名字)?叫{_VALUE}{_TAIL}"), "name", FactKind.FACT, "[事实] 用户名叫{v}"),
    (re.compile(rf"^我的名字是{_VALUE}{_TAIL}"), "name", FactKind.FACT, "[事实] 用户名叫{v}"),
    (
        re.compile(rf"^my name is {_VALUE}{_TAIL}", re.IGNORECASE),
        "name",
        FactKind.FACT,
        "[fact] The user's name is {v}",
    ),
    (
        re.compile(rf"^me llamo {_VALUE}{_TAIL}", re.IGNORECASE),
        "name",
        FactKind.FACT,
        "[hecho] El usuario se llama {v}",
    ),
    (
        # "私は…です" alone is any self-description (私はエンジニアです, 私は猫派です), which replaced
        # the user's name: after 私は only the name forms are a name.
        re.compile(
            rf"^(?:私の名前は|私は(?=.+(?:と申します|といいます))){_VALUE}"
            rf"(?:です|と申します|といいます){_TAIL}"
        ),
        "name",
        FactKind.FACT,
        "[事実] ユーザーの名前は{v}",
    ),
    (
        re.compile(rf"^我(?:是一名|的职业是|的工作是){_VALUE}{_TAIL}"),
        "occupation",
        FactKind.FACT,
        "[事实] 用户的职业是{v}",
    ),
    (
        re.compile(rf"^I work as an? {_VALUE}{_TAIL}", re.IGNORECASE),
        "occupation",
        FactKind.FACT,
        "[fact] The user works as {v}",
    ),
    (
        re.compile(rf"^I(?:'m| am) an? (?P<value>[\w -]{{0,40}}(?:{_JOBS_EN})){_TAIL}", re.I),
        "occupation",
        FactKind.FACT,
        "[fact] The user works as {v}",
    ),
    (
        re.compile(rf"^trabajo como {_VALUE}{_TAIL}", re.IGNORECASE),
        "occupation",
        FactKind.FACT,
        "[hecho] El usuario trabaja como {v}",
    ),
    (
        re.compile(rf"^soy (?P<value>(?:{_JOBS_ES})[\w -]{{0,40}}){_TAIL}", re.IGNORECASE),
        "occupation",
        FactKind.FACT,
        "[hecho] El usuario trabaja como {v}",
    ),
    (
        re.compile(rf"^(?:私の職業は|職業は){_VALUE}です{_TAIL}"),
        "occupation",
        FactKind.FACT,
        "[事実] ユーザーの職業は{v}",
    ),
    (
        re.compile(rf"^(?:请|以后)?(?:都)?(?:用|使用){_VALUE}(?:回复|回答|交流){_TAIL}"),
        "responds_in",
        FactKind.PREFERENCE,
        "[偏好] 用户希望回复用{v}",
    ),
    (
        re.compile(rf"^(?:please )?(?:reply|respond|answer) (?:to me )?in {_VALUE}{_TAIL}", re.I),
        "responds_in",
        FactKind.PREFERENCE,
        "[preference] The user wants replies in {v}",
    ),
    (
        re.compile(rf"^(?:por favor,? )?respónde(?:me)? en {_VALUE}{_TAIL}", re.IGNORECASE),
        "responds_in",
        FactKind.PREFERENCE,
        "[preferencia] El usuario quiere respuestas en {v}",
    ),
    (
        re.compile(rf"^{_VALUE}で(?:返事|返信|回答)して(?:ください|ほしい)?{_TAIL}"),
        "responds_in",
        FactKind.PREFERENCE,
        "[好み] ユーザーは{v}での返事を希望",
    ),
    (
        re.compile(rf"^我的编辑器是{_VALUE}{_TAIL}"),
        "editor",
        FactKind.PREFERENCE,
        "[偏好] 用户的编辑器是{v}",
    ),
    (
        re.compile(rf"^我(?:平时)?用{_VALUE}写代码{_TAIL}"),
        "editor",
        FactKind.PREFERENCE,
        "[偏好] 用户的编辑器是{v}",
    ),
    (
        re.compile(rf"^my (?:code )?editor is {_VALUE}{_TAIL}", re.IGNORECASE),
        "editor",
        FactKind.PREFERENCE,
        "[preference] The user's editor is {v}",
    ),
    (
        re.compile(rf"^mi editor (?:de código )?es {_VALUE}{_TAIL}", re.IGNORECASE),
        "editor",
        FactKind.PREFERENCE,
        "[preferencia] El editor del usuario es {v}",
    ),
    (
        re.compile(rf"^(?:私の)?エディタは{_VALUE}です{_TAIL}"),
        "editor",
        FactKind.PREFERENCE,
        "[好み] ユーザーのエディタは{v}",
    ),
]

# First person rewritten to a named subject, so the memory reads the same out of context.
_FIRST_PERSON = [
    (re.compile(r"^我(?=喜欢|偏好|更喜欢|习惯|讨厌|不喜欢|希望|想要)"), "用户"),
    (re.compile(r"^I (prefer|like|love|hate|dislike|want)\b", re.I), r"The user \1s"),
    (re.compile(r"^(?:yo )?prefiero ", re.I), "El usuario prefiere "),
    (re.compile(r"^me gusta ", re.I), "Al usuario le gusta "),
    (re.compile(r"^(?:私は)?(?=.+(?:が好き|が苦手|を好む))"), "ユーザーは"),
]


def _sentences(content: str) -> list[str]:
    return [part.strip() for part in _SENTENCE_END.split(content) if part and part.strip()]


def inbox_extract_rules(content: str) -> list[Candidate]:
    """Candidates from one utterance by rule (see the module docstring)."""
    candidates: list[Candidate] = []
    for sentence in _sentences(content):
        if _QUESTION.search(sentence):
            continue
        profile = _profile_fact(sentence)
        if profile is not None:
            candidates.append(profile)
            continue
        # Small talk ("hi", "sounds good", "continue", "好的", "はい") and bare fragments are
        # conversation, not memories, and are passed over as questions are. Counted on what
        # would be stored, so a pasted run of 100k characters costs no more than 500.
        needed = 1 if _ABOUT_ONESELF.search(sentence.strip()) else CAPTURE_MIN_CONTENT_WORDS
        if gate_content_words(text=sentence[:CANDIDATE_MAX_CHARS]) < needed:
            continue
        text = sentence
        for pattern, replacement in _FIRST_PERSON:
            text = pattern.sub(replacement, text, count=1)
        if MACHINE.search(text):
            hint = "workspace"
        elif USER_SUBJECT.match(text) and text != sentence:
            hint = "global"
        else:
            hint = "project"
        candidates.append(
            Candidate(
                scope_hint=hint,
                confidence=RULE_STATEMENT_CONFIDENCE,
                text=text[:CANDIDATE_MAX_CHARS],
            )
        )
    return candidates


def _profile_fact(sentence: str) -> Candidate | None:
    for pattern, predicate, kind, template in _PROFILE_PATTERNS:
        match = pattern.match(sentence)
        if match is None:
            continue
        value = next((group for group in match.groups() if group), "").strip()
        if not value or len(value) > FACT_VALUE_MAX_CHARS:
            return None
        return Candidate(
            scope_hint="global",
            confidence=RULE_PROFILE_CONFIDENCE,
            importance=4,
            profile=USER_PROFILE,
            kind=kind,
            predicate=predicate,
            value=value,
            summary=template.format(v=value),
            text=sentence,
        )
    return None


# --- LLM extraction ----------------------------------------------------------------------------

_EXTRACT_SYSTEM = (
    "You extract long-term memories from one thing a user said to their AI assistant. Keep only "
    "what will still be true and useful later, each readable on its own with a named subject; "
    "never store instructions to the assistant, questions or fragments. Answer only a JSON "
    'object {"memories": [...]}, possibly empty. Each memory is either a fact '
    '{"type": "fact", "scope": "global"|"workspace"|"project", "profile": who it is about, '
    '"kind": "preference"|"fact"|"episode"|"reflection"|"impression"|"relationship", '
    '"predicate": a stable snake_case key, "value": at most 60 characters, "summary": one '
    'sentence, "confidence": 0..1, "importance": 1..5} or a narrative {"type": "narrative", '
    '"scope": ..., "gesture": one self-contained sentence, "importance": 1..5, "confidence": '
    '0..1, "tags": [..]}. The user profile (name, job, preferences) is global; this machine '
    "(install paths, data dirs) is workspace; a project's features, bugs and decisions are "
    "project."
)
_PREDICATE = re.compile(PREDICATE_PATTERN)


def _number(value, *, low: float, high: float, integer: bool = False):
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("not a number")
    if integer and int(value) != value:
        raise ValueError("not an integer")
    if not low <= value <= high:
        raise ValueError("out of range")
    return int(value) if integer else float(value)


def _scope_held(hint: str, *, attributed: str) -> str:
    """The LLM only suggests where a memory goes: it leaves the place it was said in (for global,
    which every project reads, or the workspace) only where the rules would send it too, so an LLM
    that errs, or is steered by the text it reads, cannot carry a project's words to every other
    project."""
    return hint if hint in (PROJECT, attributed) else PROJECT


def _llm_candidate(raw) -> Candidate:
    """One LLM memory, validated; anything out of range raises ValueError."""
    if not isinstance(raw, dict) or raw.get("scope") not in SCOPE_HINTS:
        raise ValueError("bad memory or scope")
    confidence = _number(raw.get("confidence", 0.7), low=0, high=1)
    importance = _number(raw.get("importance", 3), low=1, high=5, integer=True)
    if raw.get("type") == "fact":
        predicate, value = raw.get("predicate"), raw.get("value")
        profile, kind = raw.get("profile"), raw.get("kind")
        if not (isinstance(predicate, str) and _PREDICATE.fullmatch(predicate)):
            raise ValueError("bad predicate")
        if not (isinstance(value, str) and 0 < len(value.strip()) <= FACT_VALUE_MAX_CHARS):
            raise ValueError("bad value")
        if not (isinstance(profile, str) and 0 < len(profile.strip()) <= 120):
            raise ValueError("bad profile")
        if kind not in FactKind.values:
            raise ValueError("bad kind")
        summary = raw.get("summary") or ""
        if not isinstance(summary, str) or len(summary) > 500:
            raise ValueError("bad summary")
        attributed = fact_attribute(
            kind=kind,
            profile_kind=ProfileKind.USER
            if profile.strip() == USER_PROFILE
            else ProfileKind.PERSON,
            predicate=predicate,
            value=value,
        )
        return Candidate(
            scope_hint=_scope_held(raw["scope"], attributed=attributed.hint),
            confidence=confidence,
            importance=importance,
            profile=profile.strip(),
            kind=kind,
            predicate=predicate,
            value=value.strip(),
            summary=summary.strip(),
            text=value.strip(),
        )
    if raw.get("type") == "narrative":
        gesture, tags = raw.get("gesture"), raw.get("tags", [])
        if not (isinstance(gesture, str) and 0 < len(gesture.strip()) <= 500):
            raise ValueError("bad gesture")
        if not (isinstance(tags, list) and all(isinstance(t, str) and t.strip() for t in tags)):
            raise ValueError("bad tags")
        return Candidate(
            scope_hint=_scope_held(raw["scope"], attributed=text_attribute(text=gesture).hint),
            confidence=confidence,
            importance=importance,
            text=gesture.strip(),
            tags=tuple(tag.strip()[:100] for tag in tags[:10]),
        )
    raise ValueError("unknown memory type")


def inbox_extract_llm(content: str) -> list[Candidate]:
    """Candidates by the configured LLM. Raises LLMUnavailable on any failure, including an
    answer with anything out of range — the caller then uses the rules."""
    reply = llm_complete_json(system=_EXTRACT_SYSTEM, user=content)
    memories = reply.data.get("memories")
    if not isinstance(memories, list) or len(memories) > 20:
        raise LLMUnavailable("LLM extraction did not answer a list of memories")
    try:
        return [_llm_candidate(raw) for raw in memories]
    except ValueError as exc:
        raise LLMUnavailable(f"LLM extraction answered out of range: {exc}") from exc


# --- Flush -------------------------------------------------------------------------------------


def _target_scope(hint: str, item_scope: Scope) -> Scope:
    if hint == "global":
        return scope_global()
    if hint == "workspace":
        return scope_workspace()
    # A statement made outside any project belongs to the scope it was said in (fail-closed:
    # never some other project's).
    return item_scope


def _prepare(candidate: Candidate, *, scope: Scope, depends_on: list[str], turn_ids: list[int]):
    if candidate.is_fact:
        return fact_prepare(
            data=FactInput(
                scope_id=scope.pk,
                profile_name=candidate.profile,
                profile_kind=ProfileKind.USER
                if candidate.profile == USER_PROFILE
                else ProfileKind.PERSON,
                kind=candidate.kind,
                predicate=candidate.predicate,
                value=candidate.value,
                summary=candidate.summary,
                confidence=candidate.confidence,
                importance=candidate.importance,
                depends_on=depends_on,
                source_turn_ids=turn_ids,
            ),
            use_llm=False,
        )
    return narrative_prepare(
        data=NarrativeInput(
            scope_id=scope.pk,
            gesture=candidate.text,
            importance=candidate.importance,
            confidence=candidate.confidence,
            layer=NarrativeLayer.FACT,
            tags=list(candidate.tags),
            depends_on=depends_on,
            source_turn_ids=turn_ids,
        ),
        use_llm=False,
    )


def _decision(memory, audit_before: int) -> str:
    event = (
        AuditEvent.objects.filter(
            pk__gt=audit_before, target_type=memory._meta.model_name, target_id=memory.pk
        )
        .order_by("-pk")
        .first()
    )
    return event.action if event is not None else "unknown"


def _said_in_session(item: InboxItem) -> set[int]:
    """The memories the other captures of this item's session made or restated."""
    if item.session_id is None:
        return set()
    said: set[int] = set()
    for result in (
        InboxItem.objects.filter(session_id=item.session_id)
        .exclude(pk=item.pk)
        .exclude(status=InboxStatus.PENDING)
        .values_list("result", flat=True)
    ):
        if isinstance(result, dict):
            said.update(result.get("memory_ids", []))
    return said


def _restated_memory(ready: PreparedFact | PreparedNarrative, *, said: set[int]) -> int | None:
    """The memory among `said` that this candidate would merge into, if any. One session saying
    the same thing again is one voice repeating itself, not a second observation: merged, it would
    raise the memory's confidence and promote a candidate ("I prefer tabs" said twice in one
    session would become active)."""
    if not said or not ready.verdict.passed:
        return None
    if isinstance(ready, PreparedFact):
        wanted = text_normalise(ready.value)
        same_key = Fact.objects.filter(
            scope=ready.scope,
            profile__name=ready.data.profile_name.strip(),
            predicate=ready.data.predicate,
            status__in=LIVE_STATUSES,
        )
        return next(
            (
                fact.pk
                for fact in same_key
                if fact.pk in said and text_normalise(fact.value) == wanted
            ),
            None,
        )
    match = near_duplicate_find(
        memory_type=MemoryType.NARRATIVE,
        scope_id=ready.scope.pk,
        text=ready.embedded.text if ready.embedded else ready.data.gesture,
        embedded=ready.embedded,
        secret=ready.data.secret,
    )
    return match.memory.pk if match is not None and match.memory.pk in said else None


def inbox_flush(
    *,
    use_llm: bool = False,
    limit: int | None = None,
    actor: str = Actor.SYSTEM,
    request_id: str = "",
    progress=None,
) -> FlushReport:
    """Process every pending inbox item once. LLM calls and embeddings run outside the write
    transactions; each item commits (its memories and its own processed mark) in one."""
    if limit is not None and not 1 <= limit <= FLUSH_LIMIT_MAX:
        raise InvalidInput(f"limit must be from 1 to {FLUSH_LIMIT_MAX}", field="limit")
    report = FlushReport()
    pending = list(
        InboxItem.objects.filter(status=InboxStatus.PENDING)
        .order_by("captured_at", "pk")
        .values_list("pk", flat=True)[: limit or None]
    )
    for position, item_id in enumerate(pending, start=1):
        item = InboxItem.objects.select_related("scope").get(pk=item_id)
        if item.status != InboxStatus.PENDING:
            continue
        judge = Actor.RULE
        candidates = None
        if use_llm:
            try:
                candidates = inbox_extract_llm(item.content)
                judge = Actor.LLM
            except LLMUnavailable as exc:
                logger.warning("inbox item %s: %s; using the rules", item.pk, exc)
                report.llm_fallbacks += 1
        if candidates is None:
            candidates = inbox_extract_rules(item.content)
        errors = []
        try:
            item_scope = item.scope or _capture_scope(item.cwd)
        except InvalidInput as exc:
            # Only a hand-made import holds an item without a scope; one from a place no write
            # may name is skipped, not filed in global.
            item_scope, candidates = scope_global(), []
            errors.append(str(exc))
        root = project_root(cwd=item.cwd) if item_scope.kind == ScopeKind.PROJECT else None
        prepared = []
        for candidate in candidates:
            scope = _target_scope(candidate.scope_hint, item_scope)
            depends_on = [f"path:{root}"] if root and scope.pk == item_scope.pk else []
            try:
                prepared.append(
                    _prepare(
                        candidate,
                        scope=scope,
                        depends_on=depends_on,
                        # Evidence stays inside one scope: a global fact learnt in a project
                        # must not lead other projects back to that project's conversation
                        # (the inbox item keeps the link for the owner).
                        turn_ids=[item.turn_id] if item.turn_id and scope == item_scope else [],
                    )
                )
            except InvalidInput as exc:
                errors.append(str(exc))
        with transaction.atomic():
            status = InboxStatus.PROCESSED if prepared else InboxStatus.SKIPPED
            claimed = InboxItem.objects.filter(pk=item.pk, status=InboxStatus.PENDING).update(
                status=status, processed_at=timezone.now()
            )
            if not claimed:
                continue  # another flush took it
            audit_mark = (
                AuditEvent.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
            )
            said = _said_in_session(item)
            memories = []
            repeats = []
            for ready in prepared:
                if (restated := _restated_memory(ready, said=said)) is not None:
                    repeats.append(restated)
                    continue
                commit = fact_commit if isinstance(ready.data, FactInput) else narrative_commit
                # A flush answers the owner only, so what it captures is compared with secrets
                # too: a restated secret value stays secret instead of being replaced in plain.
                memory = commit(
                    prepared=ready,
                    actor=judge,
                    reason="",
                    request_id=request_id,
                    writer_sees_secrets=True,
                )
                memories.append(memory)
                said.add(memory.pk)
            decisions = [_decision(memory, audit_mark) for memory in memories]
            decisions += [Decision.SKIP.value] * len(repeats)
            result = {
                "extractor": judge,
                "memory_ids": [memory.pk for memory in memories] + repeats,
                "decisions": decisions,
                "errors": errors,
                "repeats": repeats,
            }
            InboxItem.objects.filter(pk=item.pk).update(result=result)
            audit_record(
                actor=actor,
                action=AuditAction.UPDATE,
                target_type="inboxitem",
                target_id=item.pk,
                reason=(
                    f"inbox item {status}: {len(memories)} candidate(s) via {judge}"
                    + (f" ({', '.join(decisions)})" if decisions else "")
                    + (
                        f"; {len(repeats)} repeat(s) of what this session already said, "
                        "not counted as support"
                        if repeats
                        else ""
                    )
                ),
                before={"status": InboxStatus.PENDING},
                after={"status": status, **result},
                request_id=request_id,
            )
        report.decisions.update(decisions)
        report.errors.extend(errors)
        if status == InboxStatus.PROCESSED:
            report.processed += 1
        else:
            report.skipped += 1
        if progress is not None:
            progress(position, len(pending), item, result)
    return report
