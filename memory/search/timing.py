"""Time in questions and in turns: which turns a question about when prefers.

A question that asks when something happened ("When did James go bowling?") is answered by the turn
that anchors the event in time ("yesterday I went bowling"), while its neighbours share the same
words and no date. A question that names a day ("What was James doing on March 16, 2022?") is
answered by what was said on that day or in the days after it ("yesterday I …", "last week …").
memory/search/turn_priors.py adds these two priors to turn_search's fused score.
"""

import re
from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime
from functools import cache

import numpy as np
from django.conf import settings

from memory.search.intent import asks_when
from memory.search.text import (
    ISO_DATE,
    MONTH_ABBREVIATIONS,
    MONTHS,
    NUMERIC_DATE,
    SPANISH_MONTHS,
    text_terms,
)

# Words that place what a turn says in time. Latin words are read as text_terms makes them
# (stemmed), so the in-process index and PostgreSQL's stored `own` terms read the same set; CJK
# words are terms as written (jieba keeps each of these whole, and a two-character word is its own
# Japanese bigram). Plain "day" and "time" are left out ("have a nice day", "a great time"); "may"
# too (the verb).
LATIN_TIME_WORDS = (
    "yesterday today tonight tomorrow ago recently lately weekend week month year "
    "monday tuesday wednesday thursday friday saturday sunday summer winter autumn "
    + " ".join(month for month in MONTHS if month != "may")
    + " ayer anoche hoy mañana semana mes año recientemente"
)
CJK_TIME_WORDS = (
    "昨天 今天 明天 前天 后天 上周 下周 上个月 下个月 去年 今年 明年 最近 那天 周末 "
    "昨日 今日 明日 先週 来週 先月 来月 来年 週末"
)
# Years are terms as written; a turn naming one is anchored in time.
YEARS = range(1950, 2100)

# A named day weighs fully at its own date and fades to nothing this many days after it (what is
# said about a day is mostly said in the sessions after it: "yesterday", "last week") and one day
# before it (a session dated just before the day, in another time zone).
DAY_AFTER_DAYS = 7.0
DAY_BEFORE_DAYS = 1.0

_MONTH_NUMBER = {name: number for number, name in enumerate(MONTHS, start=1)}
_MONTH_NUMBER |= {short: _MONTH_NUMBER[name] for short, name in MONTH_ABBREVIATIONS.items()}
_MONTH_NUMBER |= SPANISH_MONTHS
_MONTH = "|".join(sorted(_MONTH_NUMBER, key=len, reverse=True))
_ORDINAL = r"(?:st|nd|rd|th)?"
# March 16, 2022 · Mar 16th 2022 · 16 March 2022 · 16th of March, 2022 · 16 de marzo de 2022 ·
# 2022年3月16日 · 2024-01-10, 2024/01/10 · 10.01.2024 and 10/01/2024 (both readings when ambiguous).
_MONTH_DAY_YEAR = re.compile(rf"\b({_MONTH})\.? (\d{{1,2}}){_ORDINAL},? (\d{{4}})\b")
_DAY_MONTH_YEAR = re.compile(
    rf"\b(\d{{1,2}}){_ORDINAL} (?:of |de )?({_MONTH})\.?,? (?:de |del )?(\d{{4}})\b"
)
_CJK_DATE = re.compile(r"(\d{4})\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*[日号號]")
_FULL_DATES = (_MONTH_DAY_YEAR, _DAY_MONTH_YEAR, _CJK_DATE, ISO_DATE, NUMERIC_DATE)
# A day named without its year ("on May 8th", "the 15th of August", "5月16日"): people leave the
# year out when it goes without saying, so the day is read in every year around the rows ranked.
_MONTH_DAY = re.compile(rf"\b({_MONTH})\.? (\d{{1,2}}){_ORDINAL}\b")
_DAY_MONTH = re.compile(rf"\b(\d{{1,2}}){_ORDINAL} (?:of |de )?({_MONTH})\b")
_CJK_MONTH_DAY = re.compile(r"(?<!\d)(\d{1,2})\s*月\s*(\d{1,2})\s*[日号號]")


@cache
def time_terms() -> frozenset[str]:
    """The terms that mark a turn as placing itself in time."""
    terms = {term for word in LATIN_TIME_WORDS.split() for term in text_terms(word)}
    return frozenset(terms | set(CJK_TIME_WORDS.split()) | {str(year) for year in YEARS})


def mentions_time(own_terms: Iterable[str]) -> bool:
    """Whether a turn's own terms place it in time (a relative or explicit date)."""
    return not time_terms().isdisjoint(own_terms)


def _day(year: str, month: int, day: str) -> date | None:
    try:
        return date(int(year), month, int(day))
    except ValueError:
        return None


def days_named(query: str) -> list[date]:
    """The calendar days a query names explicitly, in the order found (invalid dates dropped)."""
    text = query.lower()
    found = [_day(y, _MONTH_NUMBER[m], d) for m, d, y in _MONTH_DAY_YEAR.findall(text)]
    found += [_day(y, _MONTH_NUMBER[m], d) for d, m, y in _DAY_MONTH_YEAR.findall(text)]
    found += [_day(y, int(m), d) for y, m, d in _CJK_DATE.findall(text)]
    found += [_day(y, int(m), d) for y, _, m, d in ISO_DATE.findall(text)]
    for first, second, year in NUMERIC_DATE.findall(text):
        found += [_day(year, int(second), first), _day(year, int(first), second)]
    return list(dict.fromkeys(day for day in found if day is not None))


def monthdays_named(query: str) -> list[tuple[int, int]]:
    """(month, day) of each day the query names without a year, in the order found (a day that
    cannot exist in any year dropped; a date that has its year is days_named's)."""
    text = query.lower()
    for full in _FULL_DATES:
        text = full.sub(lambda match: " " * len(match.group(0)), text)
    found = [(_MONTH_NUMBER[m], int(d)) for m, d in _MONTH_DAY.findall(text)]
    found += [(_MONTH_NUMBER[m], int(d)) for d, m in _DAY_MONTH.findall(text)]
    found += [(int(m), int(d)) for m, d in _CJK_MONTH_DAY.findall(text)]
    # 2000 is a leap year: February 29th exists in it.
    return list(dict.fromkeys(day for day in found if _day("2000", *day) is not None))


def _years_around(epochs: np.ndarray) -> list[int]:
    """The calendar years of `epochs`, with the year before and after each (a day named near a new
    year falls in the neighbouring one)."""
    finite = epochs[np.isfinite(epochs)]
    years = np.unique(finite.astype("datetime64[s]").astype("datetime64[Y]").astype(np.int64))
    return sorted({int(year) + 1970 + step for year in years for step in (-1, 0, 1)})


def time_priors(
    *, query: str, occurred_at: np.ndarray, mentions: np.ndarray
) -> Callable[[np.ndarray], np.ndarray] | None:
    """The time priors of `query` over a table's rows (when each happened, as epochs: a turn's
    occurred_at, a memory's valid_from; mentions_time flags), or None when the query asks nothing
    about time."""
    asks = asks_when(query) and settings.TIDELINE_SEARCH_PRIOR_WHEN > 0
    days = days_named(query) if settings.TIDELINE_SEARCH_PRIOR_DAY > 0 else []
    monthdays = monthdays_named(query) if settings.TIDELINE_SEARCH_PRIOR_DAY > 0 else []
    if not asks and not days and not monthdays:
        return None

    def priors(rows: np.ndarray) -> np.ndarray:
        prior = np.zeros(len(rows), dtype=np.float32)
        if asks:
            prior += np.float32(settings.TIDELINE_SEARCH_PRIOR_WHEN) * mentions[rows]
        named = list(days)
        if monthdays:
            named += [
                day
                for year in _years_around(occurred_at[rows])
                for month, number in monthdays
                if (day := _day(str(year), month, str(number))) is not None
            ]
        if named:
            nearness = np.zeros(len(rows), dtype=np.float64)
            for day in named:
                start = datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()
                offset = (occurred_at[rows] - start) / 86400.0
                fade = np.where(
                    offset >= 0, 1.0 - offset / DAY_AFTER_DAYS, 1.0 + offset / DAY_BEFORE_DAYS
                )
                nearness = np.maximum(nearness, np.clip(fade, 0.0, 1.0))
            prior += (settings.TIDELINE_SEARCH_PRIOR_DAY * nearness).astype(np.float32)
        return prior

    return priors
