"""Text helpers for the injection envelope: token counting, tag stripping, clipping, relative time.

Token counting is a documented approximation, because a real BPE (tiktoken) needs a download this
install cannot make: every CJK/kana/hangul character counts as one token, every other
whitespace-separated word as 1.3 tokens, rounded up. On mixed Chinese/English memory text this
stays within about ±20% of cl100k and errs high on English, so a budget is never overshot by much.
"""

import math
import re
from datetime import datetime

from django.utils import timezone

_CJK = re.compile(
    r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f]"
)
# Angle-bracket markup (<system-reminder>, </tideline-memory>, <br/>) could close our envelope or
# pose as runtime instructions, so it never survives into injected text.
_TAG = re.compile(r"</?[A-Za-z][\w:.-]*(?:\s[^<>]*)?/?>")
_SPACES = re.compile(r"[ \t]+")


def tokens_estimate(text: str) -> int:
    cjk = len(_CJK.findall(text))
    words = len(_CJK.sub(" ", text).split())
    return math.ceil(cjk + words * 1.3)


def tags_strip(text: str) -> str:
    return _SPACES.sub(" ", _TAG.sub("", text or "")).strip()


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
