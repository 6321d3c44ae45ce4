"""Importing past sessions: Claude Code JSONL transcripts, Hermes session files, generic JSONL.

Parsers are pure (text in, sessions out); `sessions_import` writes one file's sessions through
the timeline services. Every turn carries a stable id from its source (the transcript's uuid, or the
session and position), so importing the same files again adds nothing.
"""

import json
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from django.utils.dateparse import parse_datetime

from injection.services.sync import SessionRef, session_open, turns_sync
from injection.transcripts import claude_code_turns, text_of
from memory.models import Actor, ContextTurn, Scope, ScopeKind, Session
from memory.services.bounds import (
    MOMENT_EARLIEST,
    MOMENT_LATEST,
    moment_storable,
    text_storable,
    text_well_formed,
)
from memory.services.errors import InvalidInput
from memory.services.scopes import scope_resolve, scope_resolve_for_write
from memory.services.timeline import (
    TURN_MAX_CHARS,
    TurnInput,
    segment_external_id,
    turns_validate,
)

FORMATS = ("claude", "hermes", "jsonl")
IMPORTED_ROLES = ("user", "assistant")
HERMES_STATE_FILE = "state.db"
# Hermes writes request dumps for debugging next to its session snapshots; they are not sessions.
HERMES_DEBUG_DUMP_PREFIX = "request_dump_"
# Turns recorded per write: a long session shows its progress, and holds the write lock only
# that long at a time.
IMPORT_BATCH_TURNS = 200


def _storable(text: str) -> str:
    """Text from a file as the store can hold it on either backend: no NUL (PostgreSQL's text
    refuses it), no lone surrogate (no database encodes one)."""
    return text_well_formed(text_storable(text))


@dataclass
class ParsedSession:
    runtime: str
    external_id: str
    cwd: str = ""
    turns: list[TurnInput] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.external_id = _storable(self.external_id)
        self.cwd = _storable(self.cwd)


def _when(value, *, turn_id: str) -> datetime | None:
    """When a turn happened, or None when its source does not say. A time that cannot be read,
    or that the store cannot hold, refuses the file: stored as "now" it would put the turn in
    the wrong place of the timeline for good."""
    if value is None or value == "":
        return None
    moment = None
    try:
        if isinstance(value, datetime):
            moment = value
        elif isinstance(value, int | float) and not isinstance(value, bool):
            moment = datetime.fromtimestamp(value, tz=UTC)
        elif isinstance(value, str):
            moment = parse_datetime(value.replace("Z", "+00:00"))
    except (OverflowError, OSError, ValueError):
        moment = None
    if moment is None or not moment_storable(moment):
        raise InvalidInput(
            f"turn {turn_id}: time {value!r} is not an ISO date-time or epoch between"
            f" {MOMENT_EARLIEST.date()} and {MOMENT_LATEST.date()}"
        )
    # Hermes writes naive local times (datetime.now()): this machine's zone.
    return moment.astimezone() if moment.tzinfo is None else moment


def _turn(role: str, content: str, turn_id: str, when) -> TurnInput:
    return TurnInput(
        role=role,
        content=_storable(content)[:TURN_MAX_CHARS],
        occurred_at=_when(when, turn_id=turn_id),
        meta={"external_id": _storable(turn_id)[:200]},
    )


def claude_parse(path: Path) -> Iterator[ParsedSession]:
    """One Claude Code transcript (~/.claude/projects/<project>/<session>.jsonl)."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    session_id, cwd = path.stem, ""
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            session_id = str(entry.get("sessionId") or session_id)
            cwd = cwd or str(entry.get("cwd") or "")
            if cwd and entry.get("sessionId"):
                break
    turns = [
        _turn(turn.role, turn.content, turn.turn_id or f"{session_id}:{n}", turn.occurred_at)
        for n, turn in enumerate(claude_code_turns(lines))
    ]
    yield ParsedSession(runtime="claude_code", external_id=session_id, cwd=cwd, turns=turns)


def hermes_parse(path: Path) -> Iterator[ParsedSession]:
    """Hermes Agent's sessions: its canonical store `~/.hermes/state.db`, or the JSON snapshots
    it writes when `sessions.write_json_snapshots` is on (`~/.hermes/sessions/session_<id>.json`:
    session_id, session_start, messages without timestamps or cwd)."""
    if path.suffix == ".db":
        yield from hermes_state_parse(path)
        return
    if path.name.startswith(HERMES_DEBUG_DUMP_PREFIX):
        return
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except ValueError as exc:
        raise InvalidInput(f"{path.name}: not JSON ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise InvalidInput(f"{path.name}: not a Hermes session (no messages list)")
    session_id = str(data.get("session_id") or path.stem.removeprefix("session_"))
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    cwd = str(data.get("cwd") or metadata.get("cwd") or "")
    started = data.get("session_start")
    turns = []
    for n, message in enumerate(data["messages"]):
        if not isinstance(message, dict) or message.get("role") not in IMPORTED_ROLES:
            continue
        text = text_of(message.get("content")).strip()
        if text:
            when = message.get("timestamp") or message.get("created_at") or started
            turns.append(_turn(message["role"], text, f"{session_id}:{n}", when))
    yield ParsedSession(runtime="hermes", external_id=session_id, cwd=cwd, turns=turns)


HERMES_STATE_MESSAGES = """
    SELECT id, role, content, timestamp FROM messages
    WHERE session_id = ? AND active = 1 AND role IN ('user', 'assistant')
    ORDER BY timestamp, id
"""


def hermes_state_parse(path: Path) -> Iterator[ParsedSession]:
    """Every session in a Hermes `state.db` (read-only), each turn named by its message row."""
    try:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise InvalidInput(f"{path.name}: cannot open ({exc})") from exc
    try:
        sessions = connection.execute(
            "SELECT id, cwd FROM sessions ORDER BY started_at, id"
        ).fetchall()
        for session_id, cwd in sessions:
            turns = [
                _turn(role, text.strip(), f"{session_id}:m{row_id}", when)
                for row_id, role, text, when in connection.execute(
                    HERMES_STATE_MESSAGES, (session_id,)
                )
                if text and text.strip()
            ]
            yield ParsedSession(
                runtime="hermes", external_id=str(session_id), cwd=str(cwd or ""), turns=turns
            )
    except sqlite3.Error as exc:
        raise InvalidInput(f"{path.name}: not a Hermes state.db ({exc})") from exc
    finally:
        connection.close()


def jsonl_parse(path: Path) -> Iterator[ParsedSession]:
    """Generic JSONL, one turn per line: {"session", "role", "content", "ts", "cwd"?, "id"?}."""
    sessions: dict[str, ParsedSession] = {}
    for number, line in enumerate(
        path.read_text(encoding="utf-8", errors="replace").splitlines(), 1
    ):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise InvalidInput(f"{path.name} line {number}: not JSON") from exc
        if not isinstance(row, dict) or not row.get("session") or not row.get("content"):
            raise InvalidInput(f"{path.name} line {number}: needs session, role and content")
        if row.get("role") not in ("user", "assistant", "system", "tool"):
            raise InvalidInput(f"{path.name} line {number}: unknown role {row.get('role')!r}")
        name = str(row["session"])[:200]
        session = sessions.setdefault(
            name, ParsedSession(runtime="generic", external_id=name, cwd=str(row.get("cwd") or ""))
        )
        turn_id = str(row.get("id") or f"{name}:{len(session.turns)}")
        try:
            turn = _turn(row["role"], text_of(row["content"]), turn_id, row.get("ts"))
        except InvalidInput as exc:
            raise InvalidInput(f"{path.name} line {number}: {exc}") from exc
        session.turns.append(turn)
    yield from sessions.values()


PARSERS = {"claude": claude_parse, "hermes": hermes_parse, "jsonl": jsonl_parse}


def format_guess(path: Path) -> str:
    """hermes for .json and .db; claude for transcripts (every line has a "type"); else JSONL."""
    if path.suffix in (".json", ".db"):
        return "hermes"
    with path.open(encoding="utf-8", errors="replace") as handle:
        for line in handle:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and "session" in row and "role" in row:
                return "jsonl"
            if isinstance(row, dict) and "type" in row:
                return "claude"
    return "jsonl"


def _importable(path: Path) -> bool:
    return path.suffix in (".jsonl", ".json") or path.name == HERMES_STATE_FILE


def files_collect(paths: Iterable[str]) -> list[Path]:
    found = []
    for name in paths:
        path = Path(name).expanduser()
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*") if _importable(p)))
        elif path.is_file():
            found.append(path)
        else:
            raise InvalidInput(f"{name}: no such file or directory")
    return found


def scope_of_transcript(*, cwd: str, source: str) -> Scope:
    """Where an imported session belongs, fail-closed: never global, where it would be shown to
    every project as "where the last session left off". Its cwd ("~" being the importing user's
    home) is read as any write's (scope_resolve_for_write): one that is no absolute path, or too
    long to key a scope, is refused (InvalidInput). A directory that is gone, or outside every
    project, is a project keyed by it; a session that names no cwd, one keyed by its file."""
    if not cwd:
        return scope_resolve(explicit=f"project:{os.path.abspath(source)}")
    path = os.path.expanduser(cwd)
    try:
        scope = scope_resolve_for_write(cwd=path)
    except InvalidInput as exc:
        raise InvalidInput(f"cwd {cwd!r} is refused: {exc.message}") from exc
    if scope.kind != ScopeKind.GLOBAL:
        return scope
    return scope_resolve(explicit=f"project:{path}")


def _recorded_before(parsed: ParsedSession) -> bool:
    """Whether an earlier import holds every turn of this session, in any scope (its first part
    or a segment of it): importing it again elsewhere would open an empty segment there."""
    first = Session.objects.filter(runtime=parsed.runtime, external_id=parsed.external_id).first()
    if first is None:
        return False
    parts = [first.pk] + [
        pk
        for pk, external_id, scope_id in first.children.values_list("pk", "external_id", "scope_id")
        if external_id == segment_external_id(external_id=first.external_id, scope_id=scope_id)
    ]
    wanted = {turn.external_id for turn in parsed.turns}
    held = ContextTurn.objects.filter(session_id__in=parts, external_id__in=wanted)
    return len(set(held.values_list("external_id", flat=True))) == len(wanted)


@dataclass
class FileImportReport:
    sessions: int = 0
    recorded: int = 0
    skipped: int = 0
    # Why each session left out was refused: the file's other sessions are imported.
    refused: list[str] = field(default_factory=list)


def sessions_import(
    *,
    path: Path,
    format: str = "auto",
    scope: Scope | None = None,
    actor: str = Actor.OWNER,
    progress: Callable[[str, int, int], None] | None = None,
) -> FileImportReport:
    """Import every session of one file, each in the scope of its own cwd (or `scope`), skipping
    every turn already imported. The whole file is read and every turn checked before the first
    session is opened, so a file refused for what it holds leaves no session behind; a session
    whose cwd names no place is left out and said so in the report. `progress(file name, turns
    done, turns in the file)` follows every batch of turns written."""
    try:
        kind = format_guess(path) if format == "auto" else format
        sessions = list(PARSERS[kind](path))
    except OSError as exc:
        raise InvalidInput(f"cannot read it ({exc.strerror or exc})") from exc
    for parsed in sessions:
        if parsed.turns:
            try:
                turns_validate(turns=parsed.turns)
            except InvalidInput as exc:
                raise InvalidInput(f"session {parsed.external_id}: {exc}") from exc
    report = FileImportReport()
    placed = []
    for parsed in sessions:
        try:
            placed.append((parsed, scope or scope_of_transcript(cwd=parsed.cwd, source=str(path))))
        except InvalidInput as exc:
            report.refused.append(f"session {parsed.external_id}: {exc}; left out")
    total = sum(len(parsed.turns) for parsed, _ in placed)
    done = 0
    for parsed, home in placed:
        report.sessions += 1
        if _recorded_before(parsed):
            report.skipped += len(parsed.turns)
            done += len(parsed.turns)
            if progress and parsed.turns:
                progress(path.name, done, total)
            continue
        session = session_open(
            ref=SessionRef(
                runtime=parsed.runtime,
                external_id=parsed.external_id,
                scope_id=home.pk,
                cwd=parsed.cwd,
            ),
            actor=actor,
        )
        for start in range(0, len(parsed.turns), IMPORT_BATCH_TURNS):
            batch = parsed.turns[start : start + IMPORT_BATCH_TURNS]
            # The owner's import reads every scope: a session imported again under another
            # project skips what its first import recorded.
            result = turns_sync(session=session, turns=batch, actor=actor, scope_ids_readable=None)
            report.recorded += len(result.recorded)
            report.skipped += result.skipped
            done += len(batch)
            if progress:
                progress(path.name, done, total)
    return report
