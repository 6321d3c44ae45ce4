"""Text helpers for the injection envelope: neutralising stored text, token counting, clipping,
relative time.

Token counting is a documented approximation, because a real BPE (tiktoken) needs a download this
install cannot make: every CJK/kana/hangul character counts as one token, every other
whitespace-separated word as 1.3 tokens, rounded up. On mixed Chinese/English memory text this
stays within about ±20% of cl100k and errs high on English, so a budget is never overshot by much.
"""

import math
import re
import unicodedata
from datetime import datetime

from django.utils import timezone

_CJK = re.compile(
    r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f]"
)

# Everything Python's str.splitlines() breaks on: CR, LF, VT, FF, FS/GS/RS, NEL, LS, PS.
_LINE_BREAKS = re.compile(r"[\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]+")
LINE_SEPARATOR = " ⏎ "
# Control (Cc), format (Cf: zero-width spaces and joiners, word joiner, BOM, bidi overrides, soft
# hyphen, Unicode tag characters) and lone surrogates (Cs) are invisible or unencodable: text could
# hide a tag inside them, so they are dropped.
_DROPPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs"})
# After NFKC, full-width and small forms (＜ ﹤) are already "<"; the angle brackets NFKC keeps
# (CJK, mathematical, ornamental, modifier arrowheads) read like one too. Each becomes a single
# angle quotation mark, so no text can open or close a tag and nothing is deleted that could make
# the pieces around it join into a new one.
_OPENING_ANGLES = "<〈⟨⟪❬❮❰⦑⧼˂"
_CLOSING_ANGLES = ">〉⟩⟫❭❯❱⦒⧽˃"
_ANGLES = str.maketrans(
    {**dict.fromkeys(_OPENING_ANGLES, "‹"), **dict.fromkeys(_CLOSING_ANGLES, "›")}
)
_ANGLE_ENTITIES = re.compile(r"&(?:(lt)|(gt)|#0*(?:(60)|(62))|#x0*(?:(3c)|(3e)));?", re.IGNORECASE)
_ENVELOPE_NAME = re.compile(r"tideline[\s_-]*memory", re.IGNORECASE)
# "[#" opens the renderer's provenance prefix; inside text it reads "[＃" instead.
_PROVENANCE_OPENING = re.compile(r"\[\s*#")
_PROVENANCE_FIELD = str.maketrans({"[": "(", "]": ")"})
_SPACES = re.compile(r"\s+")


def _angle_entity(match: re.Match) -> str:
    opening = match.group(1) or match.group(3) or match.group(5)
    return "‹" if opening else "›"


def _visible(text: str) -> str:
    if text.isprintable():
        return text  # no Cc, Cf or Cs character: the common case, at C speed
    return "".join(char for char in text if unicodedata.category(char) not in _DROPPED_CATEGORIES)


def _inline(text: str, *, provenance: bool) -> str:
    text = _visible(_SPACES.sub(" ", text))
    # NFKC again after dropping: a removed zero-width character can leave a composable pair.
    text = unicodedata.normalize("NFKC", _visible(unicodedata.normalize("NFKC", text)))
    text = _ANGLE_ENTITIES.sub(_angle_entity, text).translate(_ANGLES)
    text = _ENVELOPE_NAME.sub("tideline memory", text)
    text = _PROVENANCE_OPENING.sub("[＃", text)
    text = _SPACES.sub(" ", text).strip()
    if provenance:
        # A field right after the renderer's "[" must not read as its "#id".
        text = re.sub(r"^#", "＃", text.translate(_PROVENANCE_FIELD))
    return text


def text_neutralise(text: str | None, *, provenance: bool = False) -> str:
    """Stored text as it may appear inside the envelope: NFKC, invisible and control characters
    dropped, line breaks shown as ⏎ so it stays on one line, no angle bracket (so no tag) and no
    provenance opening "[#". `provenance` is for a field inside the renderer's own [… · …]
    prefix, where square brackets become round ones. Idempotent; every piece of stored text that
    enters a block goes through it."""
    pieces = (_inline(piece, provenance=provenance) for piece in _LINE_BREAKS.split(text or ""))
    return LINE_SEPARATOR.join(piece for piece in pieces if piece)


def tokens_estimate(text: str) -> int:
    cjk = len(_CJK.findall(text))
    words = len(_CJK.sub(" ", text).split())
    return math.ceil(cjk + words * 1.3)


def clip(text: str, limit: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def age_label(when: datetime | None, *, now: datetime | None = None) -> str:
    """今天 / today, 昨天 / yesterday, N天前 / N days ago, then months and years."""
    if when is None:
        return "时间不明 / unknown time"
    now = now or timezone.now()
    days = (timezone.localdate(now) - timezone.localdate(when)).days
    if days <= 0:
        return "今天 / today"
    if days == 1:
        return "昨天 / yesterday"
    if days < 31:
        return f"{days}天前 / {days} days ago"
    if days < 365:
        months = days // 30
        return f"{months}个月前 / {months} month{'s' if months > 1 else ''} ago"
    years = days // 365
    return f"{years}年前 / {years} year{'s' if years > 1 else ''} ago"
