"""Bounds on what a caller's input may be: how much of a text the matching work (embedding a
query, extracting keywords) may see — the text itself is always stored whole, only the cost of
matching it is capped — and which moments the store can hold."""

from datetime import UTC, datetime

# Moments a caller may give: well inside datetime's years 1–9999, so that converting a time zone
# or adding a TTL of years to one cannot overflow.
MOMENT_EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
MOMENT_LATEST = datetime(9000, 1, 1, tzinfo=UTC)


def text_bounded(text: str, *, limit: int) -> str:
    """At most `limit` characters: the head and the tail of a longer text, because a long turn
    usually asks its question before a pasted document or after a pasted log."""
    if len(text) <= limit:
        return text
    head = limit // 2
    return f"{text[:head]}\n{text[len(text) - (limit - head - 1) :]}"


def text_storable(text: str) -> str:
    """The text without NUL characters, which PostgreSQL text cannot hold: both backends store the
    same thing, and a NUL in a pasted log never fails a write."""
    return text.replace("\x00", "") if "\x00" in text else text


def text_well_formed(text: str) -> str:
    """The text with any lone UTF-16 surrogate (which JSON's "\\ud800" escape can carry, and no
    database can store) replaced by "?"."""
    return text.encode("utf-8", errors="replace").decode("utf-8")


def moment_storable(moment: datetime) -> bool:
    """Whether the store can hold this moment and compute with it (a naive one read as UTC)."""
    try:
        utc = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    except OverflowError:
        return False
    return MOMENT_EARLIEST <= utc < MOMENT_LATEST
