"""Text helpers for the injection envelope: neutralising stored text, token counting, clipping,
relative time.

Token counting is a documented approximation, because a real BPE (tiktoken) needs a download this
install cannot make. It is the larger of two counts. By words: every CJK/kana/hangul character is
one token, every other whitespace-separated word 1.3, which tracks cl100k on prose with spaces
(LoCoMo's English turns: 0.96 × characters/4). By characters: a quarter token per visible
character plus 5/12 per UTF-8 byte beyond its first, because a byte-level BPE merges about four
ASCII characters into a token but little of other scripts: ASCII 1/4, Cyrillic or Arabic 2/3,
CJK, Thai or Devanagari 13/12, an emoji 3/2. That catches what the word count cannot see into:
scripts without spaces, paths, URLs, base64, emoji. Whitespace costs nothing in either, so lines
joined by "\n" are never estimated above the sum of their own estimates, and a block cut line by
line stays within its budget.
"""

import bisect
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
# Control (Cc), format (Cf: zero-width spaces, word joiner, BOM, bidi overrides and isolates, soft
# hyphen, Unicode tag characters) and lone surrogates (Cs) are invisible or unencodable: text could
# hide a tag or a whole instruction inside them, so they are dropped.
_DROPPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs"})
# Except ZWNJ and ZWJ between the letters, marks or emoji they shape: Persian می‌خواهد, Devanagari
# half forms, 👩‍💻. Anywhere else they only hide things.
_JOINERS = frozenset("\u200c\u200d")
_JOINABLE_CATEGORIES = frozenset({"Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "So", "Sk"})
# Text is NFC-normalised, not NFKC: NFKC would turn O(n²) into O(n2), H₂O into H2O, ① into 1 and
# "，" into ",". The only compatibility forms folded are those of the envelope's own tag delimiters:
# every angle bracket, full-width and small ones (＜ ﹤) as well as the CJK, mathematical,
# ornamental and modifier ones that read like one, becomes a single angle quotation mark, so no
# text can open or close a tag and nothing is deleted that could make the pieces around it join.
_OPENING_ANGLES = "<＜﹤︿〈⟨⟪❬❮❰⦑⧼˂"
_CLOSING_ANGLES = ">＞﹥﹀〉⟩⟫❭❯❱⦒⧽˃"
_ANGLES = str.maketrans(
    {**dict.fromkeys(_OPENING_ANGLES, "‹"), **dict.fromkeys(_CLOSING_ANGLES, "›")}
)
_ANGLE_ENTITIES = re.compile(r"&(?:(lt)|(gt)|#0*(?:(60)|(62))|#x0*(?:(3c)|(3e)));?", re.IGNORECASE)
# A joiner kept between two letters must not hide the envelope's name from this either.
_JOINER_RUN = "[\u200c\u200d]*"
_ENVELOPE_NAME = re.compile(
    _JOINER_RUN.join("tideline") + r"[\s_\-\u200c\u200d]*" + _JOINER_RUN.join("memory"),
    re.IGNORECASE,
)
# The renderer's provenance prefix is [#id · kind · scope · age]: a square bracket opening on "#"
# or holding "·"-separated fields. Its look-alikes, full-width and CJK brackets, number signs and
# middle dots, read the same to a model, so they are recognised rather than folded into ASCII.
_SQUARE_OPENINGS = "[［﹇⁅⟦⟬⦋⦍⦏【〔〖〘〚﹝︹︻"
_SQUARE_CLOSINGS = "]］﹈⁆⟧⟭⦌⦎⦐】〕〗〙〛﹞︺︼"
_SQUARE_OPENING = re.compile(f"[{re.escape(_SQUARE_OPENINGS)}]")
_SQUARE = re.compile(f"[{re.escape(_SQUARE_OPENINGS + _SQUARE_CLOSINGS)}]")
_ID_MARK = re.compile(r"\s*[#＃﹟]")
_FIELD_SEPARATOR = re.compile("[·‧•∙⋅⦁⸱⸳・･ㆍꞏᐧ᛫\U00010101]")
_PROVENANCE_FIELD = str.maketrans(
    {**dict.fromkeys(_SQUARE_OPENINGS, "("), **dict.fromkeys(_SQUARE_CLOSINGS, ")")}
)
_SPACES = re.compile(r"\s+")


def _angle_entity(match: re.Match) -> str:
    opening = match.group(1) or match.group(3) or match.group(5)
    return "‹" if opening else "›"


def _joinable(char: str) -> bool:
    return unicodedata.category(char) in _JOINABLE_CATEGORIES


def _kept(text: str, index: int) -> bool:
    char = text[index]
    if unicodedata.category(char) not in _DROPPED_CATEGORIES:
        return True
    return (
        char in _JOINERS
        and 0 < index < len(text) - 1
        and _joinable(text[index - 1])
        and _joinable(text[index + 1])
    )


def _visible(text: str) -> str:
    if text.isprintable():
        return text  # no Cc, Cf or Cs character: the common case, at C speed
    return "".join(char for index, char in enumerate(text) if _kept(text, index))


def _inline(text: str, *, provenance: bool) -> str:
    # Dropped before NFC, so a removed zero-width character cannot keep a composable pair apart.
    text = unicodedata.normalize("NFC", _visible(_SPACES.sub(" ", text)))
    text = _ANGLE_ENTITIES.sub(_angle_entity, text).translate(_ANGLES)
    text = _ENVELOPE_NAME.sub("tideline memory", text)
    text = _SPACES.sub(" ", text).strip()
    if provenance:
        # A field inside the renderer's [… · …] must neither close it nor, right after its "[",
        # read as its "#id".
        text = re.sub(r"^#", "＃", text.translate(_PROVENANCE_FIELD))
    return text


def _provenance_defused(text: str) -> str:
    """Round brackets for every square-like bracket group that would read as a provenance prefix:
    one whose content starts with a number sign or holds a middle dot, at any depth, up to its
    closing bracket or, unclosed, the end of the text. Brackets pair by nesting whatever their
    kind, so `[#99 · fact】` is caught too; changing a pair to round ones leaves the pairing of the
    rest as it was, which keeps this idempotent."""
    if not _SQUARE_OPENING.search(text):
        return text
    separators = [match.start() for match in _FIELD_SEPARATOR.finditer(text)]
    openings: list[int] = []
    groups: list[tuple[int, int]] = []
    for match in _SQUARE.finditer(text):
        if match.group() in _SQUARE_OPENINGS:
            openings.append(match.start())
        elif openings:
            groups.append((openings.pop(), match.start()))
    groups += [(start, len(text)) for start in openings]
    chars = list(text)
    for start, end in groups:
        first_separator = bisect.bisect_right(separators, start)
        holds_separator = first_separator < len(separators) and separators[first_separator] < end
        if holds_separator or _ID_MARK.match(text, start + 1):
            chars[start] = "("
            if end < len(text):
                chars[end] = ")"
    return "".join(chars)


def text_neutralise(text: str | None, *, provenance: bool = False) -> str:
    """Stored text as it may appear inside the envelope: NFC, invisible and control characters
    dropped, line breaks shown as ⏎ so it stays on one line, no angle bracket (so no tag) and no
    square bracket group that reads as a provenance prefix `[#id · …]`. `provenance` is for a
    field inside the renderer's own [… · …] prefix, where every square bracket becomes a round
    one. Idempotent; every piece of stored text that enters a block goes through it."""
    pieces = (_inline(piece, provenance=provenance) for piece in _LINE_BREAKS.split(text or ""))
    # Defused across ⏎: a forged prefix must not survive by spanning a line break of the text.
    return _provenance_defused(LINE_SEPARATOR.join(piece for piece in pieces if piece))


def tokens_estimate(text: str) -> int:
    # Counted exactly in sixtieths of a token (1.3 = 78/60, 1/4 = 15/60, 5/12 = 25/60), so an
    # estimate of joined lines never rounds above the sum of the lines' own.
    if text.isascii():
        cjk, words, extra_bytes = 0, text.split(), 0
    else:
        cjk = len(_CJK.findall(text))
        words = _CJK.sub(" ", text).split()
        # A space beyond ASCII (no-break, ideographic) adds its extra bytes too: harmlessly high.
        extra_bytes = len(text.encode("utf-8", "surrogatepass")) - len(text)
    visible = cjk + sum(map(len, words))
    sixtieths = max(60 * cjk + 78 * len(words), 15 * visible + 25 * extra_bytes)
    return -(-sixtieths // 60)


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
