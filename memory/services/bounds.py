"""Bounds on how much of a text the matching work (embedding a query, extracting keywords) may
see. The text itself is always stored whole; only the cost of matching it is capped."""


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
