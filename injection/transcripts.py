"""Reading agent runtimes' transcripts: which lines are conversation, and what they say.

Pure functions, text in and turns out, shared by the session importer and by the transcript route
the Claude Code hook posts to — so the hook stays a thin, dependency-free sender and both paths
read a transcript the same way.
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from memory.services.bounds import moment_storable, text_storable, text_well_formed
from memory.services.capture import command_echo

TURN_MAX_CHARS = 100_000


@dataclass(frozen=True)
class TranscriptTurn:
    role: str
    content: str
    turn_id: str | None
    occurred_at: datetime | None


def text_of(content) -> str:
    """The human-readable text of a message's content: a string, or the text parts of a list
    (tool calls and tool results are not conversation)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        )
    return ""


def moment_parse(value) -> datetime | None:
    """An ISO-8601 timestamp as transcripts write it, or None when there is none or it is not
    one the store can hold (a bad timestamp never costs the turn)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment_storable(moment) else None


def claude_code_turns(lines: Iterable[str]) -> list[TranscriptTurn]:
    """Turns from Claude Code transcript JSONL lines: user and assistant text only; subagent
    (sidechain) lines, meta lines and command echoes left out; each keyed by its own uuid. A line
    that is not one (bad JSON, nesting too deep to read, text that is not a string) is skipped and
    never costs the other lines."""
    turns = []
    for line in lines:
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(entry, dict) or entry.get("type") not in ("user", "assistant"):
            continue
        if entry.get("isSidechain") or entry.get("isMeta"):
            continue
        message = entry.get("message")
        if not isinstance(message, dict):
            continue
        text = text_well_formed(text_storable(text_of(message.get("content")))).strip()
        if not text or (entry["type"] == "user" and command_echo(text)):
            continue
        turns.append(
            TranscriptTurn(
                role="assistant" if entry["type"] == "assistant" else "user",
                content=text[:TURN_MAX_CHARS],
                turn_id=text_well_formed(str(entry.get("uuid") or "")[:200]) or None,
                occurred_at=moment_parse(entry.get("timestamp")),
            )
        )
    return turns
