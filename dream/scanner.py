"""Layer 0 (no LLM): what the day left unindexed.

- Track A: narratives without source links (no Evidence back to the raw turns);
- Track B: every context turn that no narrative's evidence covers yet, grouped per session into
  chunks where consecutive turns are at most 10 minutes apart; chunks shorter than 3 turns wait for
  more context. Coverage is per turn, never a cut-off in time: a narrative written later (by an
  agent, or by an earlier solidification) covers exactly the turns it cites, so it never hides
  older conversation that nobody consolidated. Subagent sessions are not the owner's and are left
  out;
- Tracks C/D: narratives and turns still waiting for an embedding (pending or failed).

The markdown report is what the owner reads and what solidification works from; the JSON carries
every id.
"""

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from memory.models import (
    ContextTurn,
    EmbeddingStatus,
    Evidence,
    MemoryStatus,
    Narrative,
    Scope,
    SessionOrigin,
)

MISSING_EMBEDDING = (EmbeddingStatus.PENDING, EmbeddingStatus.FAILED)
SCANNED_STATUSES = (MemoryStatus.ACTIVE, MemoryStatus.CANDIDATE)
MARKDOWN_LIST_LIMIT = 50


@dataclass(frozen=True)
class Chunk:
    session_id: int
    scope_id: int
    turn_ids: list[int]
    started_at: datetime
    ended_at: datetime


def turns_chunk(
    turns: list[tuple[int, datetime]], *, gap_minutes: int, min_turns: int
) -> list[list[int]]:
    """Split (id, time) pairs, in time order, wherever two neighbours are more than `gap_minutes`
    apart; keep the runs of at least `min_turns`."""
    gap = timedelta(minutes=gap_minutes)
    runs: list[list[int]] = []
    current: list[int] = []
    previous: datetime | None = None
    for turn_id, occurred_at in turns:
        if previous is not None and occurred_at - previous > gap:
            runs.append(current)
            current = []
        current.append(turn_id)
        previous = occurred_at
    if current:
        runs.append(current)
    return [run for run in runs if len(run) >= min_turns]


def turns_cited():
    """Ids of the turns an active memory's evidence cites: what solidification has covered. A
    candidate the inbox's rules drew from a turn does not count: the conversation still waits to
    be solidified."""
    return Evidence.objects.filter(memory__status=MemoryStatus.ACTIVE).values("turn_id")


def _unindexed_turns(*, since: datetime | None):
    """Owner turns no active memory's evidence covers yet, whenever they happened and whatever was
    written after them (or only those at or after `since`)."""
    found = (
        ContextTurn.objects.exclude(pk__in=turns_cited())
        .filter(session__origin=SessionOrigin.USER, session__delegation_depth=0)
        .order_by("session_id", "occurred_at", "seq")
    )
    if since is not None:
        found = found.filter(occurred_at__gte=since)
    return found


def chunks_find(*, since: datetime | None = None) -> list[Chunk]:
    # Per session and scope: a session that moved to another repository continues there, and a
    # chunk (so a solidify prompt) never spans two scopes.
    by_part: dict[tuple[int, int], list[tuple[int, datetime]]] = {}
    for pk, session_id, scope_id, occurred_at in _unindexed_turns(since=since).values_list(
        "pk", "session_id", "scope_id", "occurred_at"
    ):
        by_part.setdefault((session_id, scope_id), []).append((pk, occurred_at))
    chunks = []
    for (session_id, scope_id), rows in sorted(by_part.items()):
        rows.sort(key=lambda row: (row[1], row[0]))
        times = dict(rows)
        for run in turns_chunk(
            rows,
            gap_minutes=settings.TIDELINE_DREAM_CHUNK_GAP_MINUTES,
            min_turns=settings.TIDELINE_DREAM_CHUNK_MIN_TURNS,
        ):
            chunks.append(
                Chunk(
                    session_id=session_id,
                    scope_id=scope_id,
                    turn_ids=run,
                    started_at=times[run[0]],
                    ended_at=times[run[-1]],
                )
            )
    return chunks


def scan_run(*, since: datetime | None = None) -> dict:
    """The four tracks as plain data."""
    linked = Evidence.objects.values("memory_id")
    track_a = list(
        Narrative.objects.filter(status__in=SCANNED_STATUSES)
        .exclude(pk__in=linked)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    track_c = list(
        Narrative.objects.filter(
            status__in=SCANNED_STATUSES, embedding_status__in=MISSING_EMBEDDING
        )
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    track_d = list(
        ContextTurn.objects.filter(embedding_status__in=MISSING_EMBEDDING)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    chunks = chunks_find(since=since)
    return {
        "scanned_at": timezone.now().isoformat(),
        "since": since.isoformat() if since else None,
        "track_a": {"count": len(track_a), "narrative_ids": track_a},
        "track_b": {
            "count": len(chunks),
            "turns": sum(len(chunk.turn_ids) for chunk in chunks),
            "chunks": [
                asdict(chunk)
                | {
                    "started_at": chunk.started_at.isoformat(),
                    "ended_at": chunk.ended_at.isoformat(),
                }
                for chunk in chunks
            ],
        },
        "track_c": {"count": len(track_c), "narrative_ids": track_c},
        "track_d": {"count": len(track_d), "turn_ids": track_d},
    }


def _ids(ids: list[int]) -> str:
    shown = ", ".join(str(pk) for pk in ids[:MARKDOWN_LIST_LIMIT])
    more = len(ids) - MARKDOWN_LIST_LIMIT
    return shown + (f", … ({more} more)" if more > 0 else "") if ids else "none"


def scan_markdown(report: dict) -> str:
    """The report as the owner (and the solidify prompt's author) reads it."""
    labels = dict(Scope.objects.values_list("pk", "label"))
    gestures = dict(
        Narrative.objects.filter(
            pk__in=report["track_a"]["narrative_ids"][:MARKDOWN_LIST_LIMIT]
        ).values_list("pk", "gesture")
    )
    lines = [f"# Layer 0 scan · {report['scanned_at']}", ""]
    if report["since"]:
        lines += [f"Turns since {report['since']}.", ""]
    lines.append(f"## Track A · narratives without source links ({report['track_a']['count']})")
    for pk in report["track_a"]["narrative_ids"][:MARKDOWN_LIST_LIMIT]:
        lines.append(f"- #{pk} {gestures.get(pk, '')[:100]}")
    track_b = report["track_b"]
    lines += [
        "",
        f"## Track B · unindexed context ({track_b['count']} chunks, {track_b['turns']} turns)",
    ]
    for number, chunk in enumerate(track_b["chunks"], start=1):
        lines.append(
            f"- chunk {number} · session {chunk['session_id']} · "
            f"{labels.get(chunk['scope_id'], chunk['scope_id'])} · "
            f"{chunk['started_at']} → {chunk['ended_at']} · {len(chunk['turn_ids'])} turns · "
            f"context ids {', '.join(str(pk) for pk in chunk['turn_ids'])}"
        )
    lines += [
        "",
        f"## Track C · narratives waiting for an embedding ({report['track_c']['count']})",
        _ids(report["track_c"]["narrative_ids"]),
        "",
        f"## Track D · turns waiting for an embedding ({report['track_d']['count']})",
        _ids(report["track_d"]["turn_ids"]),
        "",
    ]
    return "\n".join(lines)
