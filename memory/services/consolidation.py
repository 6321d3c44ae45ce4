"""The consolidation state machine every candidate memory goes through (seed 003, DESIGN §3.3).

    insert      nothing like it is stored yet
    merge       a near-duplicate is live (identical normalised text, or embedding cosine at or
                above the embedding model's threshold): the stored row absorbs the incoming
                evidence and confidence; the incoming text is kept in the audit row
    promote     a merge (or a stronger write) lifts a candidate's confidence over the threshold
    invalidate  a fact's stable key (scope + profile + predicate) gets a new value: the old row is
                superseded with valid_to, the new one is active
    skip        exactly this is already current
    reject      the write gate said no: the candidate is stored as `rejected` with its reason
    expire      lifecycle maintenance (TTL, decay, depends_on gone) — see maintenance.py

Pinned memories are never merged into. Texts whose numbers or negation differ are never merged,
however close their vectors are: "port 8000" is not "port 8001", "likes X" is not "does not like X".
Confidence below settings.TIDELINE_CANDIDATE_CONFIDENCE waits in the candidate pool; evidence
combines as independent support (1 − (1−a)(1−b)), so a repeated weak observation is promoted.
"""

import logging
import re
import unicodedata
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path

import numpy as np
from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from memory.models import AuditAction, Memory, MemoryStatus
from memory.services.audit import audit_record
from memory.services.embedding import embedder_get
from memory.services.errors import InvalidInput

logger = logging.getLogger("tideline.consolidation")

LIVE_STATUSES = (MemoryStatus.ACTIVE, MemoryStatus.CANDIDATE)


class Decision(StrEnum):
    INSERT = "insert"
    MERGE = "merge"
    PROMOTE = "promote"
    INVALIDATE = "invalidate"
    SKIP = "skip"
    REJECT = "reject"
    EXPIRE = "expire"


@dataclass(frozen=True)
class Embedded:
    """A candidate's vector, computed before the write transaction opens."""

    vector: np.ndarray | None
    model_id: str
    text: str


@dataclass(frozen=True)
class Match:
    memory: Memory
    similarity: float
    how: str  # "identical-text" or "embedding"


_NOT_ALNUM = re.compile(r"[\W_]+")


def text_normalise(text: str) -> str:
    """Case, width, whitespace and punctuation do not make two memories different."""
    return _NOT_ALNUM.sub("", unicodedata.normalize("NFKC", text or "").casefold())


_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_NEGATION = re.compile(
    r"不|没|沒|別|别|無|无|非|未|ない|ません|ず\b|\bno\b|\bnot\b|\bnever\b|n't\b|\bnunca\b|\bjamás\b",
    re.IGNORECASE,
)


def _numbers(text: str) -> list[str]:
    return sorted(_NUMBER.findall(unicodedata.normalize("NFKC", text or "")))


def _negated(text: str) -> bool:
    return bool(_NEGATION.search(unicodedata.normalize("NFKC", text or "")))


def texts_compatible(a: str, b: str) -> bool:
    return _numbers(a) == _numbers(b) and _negated(a) == _negated(b)


def merge_threshold(model_id: str) -> float:
    return settings.TIDELINE_MERGE_THRESHOLDS.get(
        model_id, settings.TIDELINE_MERGE_THRESHOLD_DEFAULT
    )


def confidence_combine(stored: float, incoming: float) -> float:
    """Two independent pieces of support: 1 − (1−a)(1−b), rounded for stable audit rows."""
    return round(1.0 - (1.0 - stored) * (1.0 - incoming), 6)


def statuses(*memories: Memory) -> dict[str, str]:
    """The status of every memory a decision touched, so replaying the audit log reproduces them."""
    return {str(memory.pk): memory.status for memory in memories}


def rejection_audit(
    *, memory: Memory, verdict, actor: str, reason: str, request_id: str, extra: dict | None = None
) -> None:
    """The audit row of a gate refusal. The refused memory is kept, never silently dropped: the
    owner can read why and restore it."""
    audit_record(
        actor=verdict.judge,
        action=AuditAction.REJECT,
        target=memory,
        reason=verdict.message,
        after={
            "status": memory.status,
            "statuses": statuses(memory),
            "gate": verdict.reason,
            "requested_by": actor,
            "note": reason,
            **(extra or {}),
        },
        request_id=request_id,
    )


def is_candidate(confidence: float) -> bool:
    return confidence < settings.TIDELINE_CANDIDATE_CONFIDENCE


def candidate_embed(*, text: str) -> Embedded:
    """Embed a candidate for near-duplicate search. Never inside a transaction. An embedder that
    is off or failing leaves only identical-text merging; the write itself goes on."""
    embedder = embedder_get()
    if embedder is None:
        return Embedded(vector=None, model_id="", text=text)
    try:
        vector = np.asarray(embedder.embed([text]), dtype=np.float32).reshape(-1)
    except Exception:
        logger.exception("embedding a candidate for near-duplicate search failed")
        return Embedded(vector=None, model_id=embedder.model_id, text=text)
    return Embedded(vector=vector, model_id=embedder.model_id, text=text)


def merge_window(*, scope_id: int, memory_type: str, secret: bool) -> QuerySet:
    """(pk, search_text, embedding, embedding_model) of the scope's newest
    settings.TIDELINE_MERGE_WINDOW live, unpinned memories of this type and secrecy, newest
    first. Read in
    order from the memory_scope_type_recent index: every write runs it, and sorting the scope's
    rows instead made a write cost O(scope size) (about 1 s per captured utterance at 10k
    narratives on SQLite under load, several at 100k)."""
    return (
        Memory.objects.filter(
            scope_id=scope_id,
            memory_type=memory_type,
            status__in=LIVE_STATUSES,
            pinned=False,
            secret=secret,
        )
        .order_by("-recorded_at", "-pk")
        .values_list("pk", "search_text", "embedding", "embedding_model")[
            : settings.TIDELINE_MERGE_WINDOW
        ]
    )


def near_duplicate_find(
    *,
    memory_type: str,
    scope_id: int,
    text: str,
    embedded: Embedded | None,
    secret: bool,
) -> Match | None:
    """The live, unpinned memory of this type, scope and secrecy that the candidate duplicates, if
    any: identical normalised text first, then the closest vector at or above the model's
    threshold (among the scope's newest settings.TIDELINE_MERGE_WINDOW such memories)."""
    window = list(merge_window(scope_id=scope_id, memory_type=memory_type, secret=secret))
    wanted = text_normalise(text)
    if wanted:
        for pk, search_text, _, _ in window:
            if text_normalise(search_text) == wanted:
                return Match(
                    memory=Memory.objects.get(pk=pk).child, similarity=1.0, how="identical-text"
                )
    if embedded is None or embedded.vector is None:
        return None
    vector = embedded.vector
    comparable = [
        (pk, search_text, bytes(blob))
        for pk, search_text, blob, model_id in window
        if blob and model_id == embedded.model_id and len(blob) == vector.nbytes
    ]
    if not comparable:
        return None
    matrix = np.frombuffer(b"".join(blob for _, _, blob in comparable), dtype=np.float32)
    similarities = matrix.reshape(len(comparable), -1) @ vector
    threshold = merge_threshold(embedded.model_id)
    for row in np.argsort(-similarities):
        if similarities[row] < threshold:
            break
        pk, search_text, _ = comparable[row]
        if texts_compatible(text, search_text):
            return Match(
                memory=Memory.objects.get(pk=pk).child,
                similarity=float(similarities[row]),
                how="embedding",
            )
    return None


# --- Dependencies ------------------------------------------------------------------------------


# The largest id a row can have (a signed 64-bit key on both backends): a bigger one names no row,
# and asking the database for it overflows SQLite's integer.
ROW_ID_MAX = 2**63 - 1


def dependency_memory_id(item: str) -> int | None:
    """The memory id a `memory:<id>` dependency names, or None when it names none (another kind,
    non-ASCII digits such as "²", or an id no row can have)."""
    kind, _, rest = item.partition(":")
    if kind != "memory" or not (rest.isascii() and rest.isdigit()):
        return None
    memory_id = int(rest)
    return memory_id if 0 < memory_id <= ROW_ID_MAX else None


def depends_on_validate(
    depends_on: list, *, scope_id: int, writer_sees_secrets: bool, edited_id: int | None = None
) -> list[str]:
    """`path:/absolute/dir` or `memory:<id>`; anything else is refused before it is stored.

    A memory dependency follows evidence's rule: a memory of this memory's own scope, and not a
    secret unless the writer may read secrets. Otherwise a key could learn, from whether the write
    is taken and whether maintenance later expires it, that another project's or a secret memory
    exists and is live. The refusal is the same for a memory that does not exist. An edit keeps the
    dependencies the edited memory (`edited_id`) had without asking again, but may not name that
    memory itself."""
    if not isinstance(depends_on, list | tuple):
        raise InvalidInput("depends_on must be a list", field="depends_on")
    cleaned = []
    for item in depends_on:
        if not isinstance(item, str):
            raise InvalidInput("depends_on entries must be strings", field="depends_on")
        kind, sep, rest = item.strip().partition(":")
        if sep and kind == "path" and Path(rest).is_absolute() and "\x00" not in rest:
            cleaned.append(f"path:{rest}")
        elif sep and kind == "memory" and rest.isascii() and rest.isdigit():
            cleaned.append(f"memory:{int(rest)}")
        else:
            raise InvalidInput(
                f"depends_on entry {item!r} must be 'path:/absolute/path' or 'memory:<id>'",
                field="depends_on",
            )
    cleaned = list(dict.fromkeys(cleaned))
    cited = {item: dependency_memory_id(item) for item in cleaned if item.startswith("memory:")}
    if not cited:
        return cleaned
    if edited_id and edited_id in cited.values():
        # The edit supersedes the memory it names, and a dependency follows the supersede chain:
        # the new version would depend on itself, a condition that can never fail.
        raise InvalidInput(
            f"depends_on entry 'memory:{edited_id}' names the memory being edited",
            field="depends_on",
        )
    kept = (
        Memory.objects.filter(pk=edited_id, scope_id=scope_id)
        .values_list("depends_on", flat=True)
        .first()
        if edited_id
        else None
    ) or []
    asked = {memory_id for item, memory_id in cited.items() if item not in kept and memory_id}
    allowed = Memory.objects.filter(pk__in=asked, scope_id=scope_id)
    if not writer_sees_secrets:
        allowed = allowed.filter(secret=False)
    found = set(allowed.values_list("pk", flat=True)) if asked else set()
    unknown = [
        item for item, memory_id in cited.items() if item not in kept and memory_id not in found
    ]
    if unknown:
        raise InvalidInput(
            f"{', '.join(unknown)} names no memory of this memory's scope",
            field="depends_on",
        )
    return cleaned


# --- Bitemporal reads --------------------------------------------------------------------------


def valid_q(*, as_of: datetime | None = None, prefix: str = "") -> Q:
    """Which rows count as true. Without `as_of`: current only (active, not past valid_to). With
    `as_of`: what Tideline held valid at that moment — recorded by then, valid_from ≤ as_of <
    valid_to — whatever it became later (superseded, expired); candidates and rejected rows never
    count."""
    now = timezone.now()
    if as_of is None:
        return Q(**{f"{prefix}status": MemoryStatus.ACTIVE}) & (
            Q(**{f"{prefix}valid_to__isnull": True}) | Q(**{f"{prefix}valid_to__gt": now})
        )
    return Q(
        **{
            f"{prefix}status__in": (
                MemoryStatus.ACTIVE,
                MemoryStatus.SUPERSEDED,
                MemoryStatus.EXPIRED,
            ),
            f"{prefix}recorded_at__lte": as_of,
            f"{prefix}valid_from__lte": as_of,
        }
    ) & (Q(**{f"{prefix}valid_to__isnull": True}) | Q(**{f"{prefix}valid_to__gt": as_of}))


def memories_as_of(*, scope_ids: list[int], as_of: datetime | None = None):
    """Memories valid in these scopes now, or at `as_of`."""
    return Memory.objects.filter(valid_q(as_of=as_of), scope_id__in=list(scope_ids))
