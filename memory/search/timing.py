"""Time in questions and in turns: which turns a question about when prefers.

A question that asks when something happened ("When did James go bowling?") is answered by the turn
that anchors the event in time ("yesterday I went bowling"), while its neighbours share the same
words and no date. A question that names a day ("What was James doing on March 16, 2022?") is
answered by what was said on that day or in the days after it ("yesterday I …", "last week …"),
and one that names a month with its year ("What did Melanie paint in July 2023?", "the last week
of October 2023") by what was said in that month or the days after it. A day or a stretch named
relative to the moment of asking ("yesterday", "last month", 上周三) is read as the day or stretch it
names then (memory/search/relative_days.py).
memory/search/turn_priors.py adds these priors to turn_search's fused score, and memory_search
to memories by their valid_from.
"""

import calendar
import re
from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime
from functools import cache

import numpy as np
from django.conf import settings

from memory.search.intent import asks_when
from memory.search.relative_days import relative_spans
from memory.search.text import (
    CJK_MONTH_NUMBER,
    ISO_DATE,
    MONTH_ABBREVIATIONS,
    MONTHS,
    NUMERIC_DATE,
    SPANISH_MONTHS,
    cjk_number,
    han_folded,
    text_terms,
)

# Words that place what a turn says in time. Latin words are read as text_terms makes them
# (stemmed), so the in-process index and PostgreSQL's stored `own` terms read the same set; CJK
# words are terms as written, Han-folded as text_terms folds them (先週 is 先周; jieba keeps each
# of these whole, and a two-character word is its own Japanese bigram). Plain "day" and "time" are left out ("have a nice day", "a great time"); "may"
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

# A named day (or month) weighs fully at its own date and fades to nothing this many days after it
# (what is said about a day is mostly said in the sessions after it: "yesterday", "last week") and
# one day before it (a session dated just before the day, in another time zone).
DAY_AFTER_DAYS = 7.0
DAY_BEFORE_DAYS = 1.0

_MONTH_NUMBER = {name: number for number, name in enumerate(MONTHS, start=1)}
_MONTH_NUMBER |= {short: _MONTH_NUMBER[name] for short, name in MONTH_ABBREVIATIONS.items()}
_MONTH_NUMBER |= SPANISH_MONTHS
_MONTH = "|".join(sorted(_MONTH_NUMBER, key=len, reverse=True))
_ORDINAL = r"(?:st|nd|rd|th)?"
# March 16, 2022 · Mar 16th 2022 · 16 March 2022 · 16th of March, 2022 · 16 de marzo de 2022 ·
# 2022年3月16日 · 2024-01-10, 2024/01/10 · 10.01.2024 and 10/01/2024 (both readings when ambiguous).
# Before the year, a space, a comma, or both ("December 1,2023" is written too).
_YEAR_AFTER = r"(?:, ?| )"
_MONTH_DAY_YEAR = re.compile(rf"\b({_MONTH})\.? (\d{{1,2}}){_ORDINAL}{_YEAR_AFTER}(\d{{4}})\b")
_DAY_MONTH_YEAR = re.compile(
    rf"\b(\d{{1,2}}){_ORDINAL} (?:of |de )?({_MONTH})\.?{_YEAR_AFTER}(?:de |del )?(\d{{4}})\b"
)
_CJK_DATE = re.compile(r"(\d{4})\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*[日号號]")
_FULL_DATES = (_MONTH_DAY_YEAR, _DAY_MONTH_YEAR, _CJK_DATE, ISO_DATE, NUMERIC_DATE)
# A day named without its year ("on May 8th", "the 15th of August", "5月16日"): people leave the
# year out when it goes without saying, so the day is read in every year around the rows ranked.
_MONTH_DAY = re.compile(rf"\b({_MONTH})\.? (\d{{1,2}}){_ORDINAL}\b")
_DAY_MONTH = re.compile(rf"\b(\d{{1,2}}){_ORDINAL} (?:of |de )?({_MONTH})\b")
_CJK_MONTH_DAY = re.compile(r"(?<!\d)(\d{1,2})\s*月\s*(\d{1,2})\s*[日号號]")
# A month named with its year and no day ("in October 2023", "the last week of October 2023",
# "a finales de octubre de 2023", 2023年10月底) names a stretch of days; a word for part of the
# month narrows it to its first, middle or last third (days 1-10, 11-20, 21 to the end).
_MONTH_THIRDS = ((1, 10), (11, 20), (21, 31))
# "early", "mid" and "late" come straight before the month ("mid-October"); the others are also
# everyday words ("we start May…"), so they count only before "of" or "de".
_LATIN_PARTS = {
    "early": 0, "mid": 1, "late": 2,
    "beginning": 0, "start": 0, "first week": 0, "first weekend": 0, "first half": 0,
    "principios": 0, "comienzos": 0, "inicios": 0, "middle": 1, "mediados": 1,
    "end": 2, "last week": 2, "last weekend": 2, "second half": 2, "finales": 2, "fines": 2,
}  # fmt: skip
_CJK_PARTS = {"初": 0, "上旬": 0, "中旬": 1, "下旬": 2, "底": 2, "末": 2}
_BEFORE_MONTH = ("early", "mid", "late")
_PART_OF = "|".join(
    sorted((part for part in _LATIN_PARTS if part not in _BEFORE_MONTH), key=len, reverse=True)
)
_LATIN_PART = rf"(?:the )?(?:({'|'.join(_BEFORE_MONTH)})[ -]|({_PART_OF}) (?:of|de) )"
_CJK_PART = "|".join(sorted(_CJK_PARTS, key=len, reverse=True))
_MONTH_YEAR = re.compile(rf"\b(?:{_LATIN_PART})?({_MONTH})\.?,? (?:of |de |del )?(\d{{4}})\b")
_CJK_MONTH_YEAR = re.compile(rf"(\d{{4}})\s*年\s*{CJK_MONTH_NUMBER}\s*月({_CJK_PART})?")
# A month named without its year ("in October", "the end of June", "en octubre", 10月底), read
# in every year around the rows ranked, as a day without its year is. Only a full month name
# after "in" or "during", or after a word for part of it, counts: "en mar" is at sea, "may" a verb.
_FULL_MONTH = "|".join(sorted([*MONTHS, *SPANISH_MONTHS], key=len, reverse=True))
_MONTH_ALONE = re.compile(rf"\b(?:{_LATIN_PART}|(?:in|during|en|durante) )({_FULL_MONTH})\b")
_CJK_MONTH_ALONE = re.compile(
    rf"(?<![\d年一二三四五六七八九十]){CJK_MONTH_NUMBER}\s*月({_CJK_PART})?"
)


@cache
def time_terms() -> frozenset[str]:
    """The terms that mark a turn as placing itself in time."""
    terms = {term for word in LATIN_TIME_WORDS.split() for term in text_terms(word)}
    cjk = {han_folded(word) for word in CJK_TIME_WORDS.split()}
    return frozenset(terms | cjk | {str(year) for year in YEARS})


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


def _blanked(text: str, patterns: tuple[re.Pattern, ...]) -> str:
    """`text` with what the patterns match blanked out, so a reader of a shorter form does not
    read again what a longer one has claimed ("March" inside "March 16, 2022")."""
    for pattern in patterns:
        text = pattern.sub(lambda match: " " * len(match.group(0)), text)
    return text


def monthdays_named(query: str) -> list[tuple[int, int]]:
    """(month, day) of each day the query names without a year, in the order found (a day that
    cannot exist in any year dropped; a date that has its year is days_named's)."""
    text = _blanked(query.lower(), _FULL_DATES)
    found = [(_MONTH_NUMBER[m], int(d)) for m, d in _MONTH_DAY.findall(text)]
    found += [(_MONTH_NUMBER[m], int(d)) for d, m in _DAY_MONTH.findall(text)]
    found += [(int(m), int(d)) for m, d in _CJK_MONTH_DAY.findall(text)]
    # 2000 is a leap year: February 29th exists in it.
    return list(dict.fromkeys(day for day in found if _day("2000", *day) is not None))


def _span(year: str, month: int, third: int | None) -> tuple[date, date] | None:
    """The first and last day of a month, or of one third of it (None for a month no calendar
    has: month 13, year 0)."""
    try:
        last = calendar.monthrange(int(year), month)[1]
        first_day, last_day = (1, last) if third is None else _MONTH_THIRDS[third]
        return date(int(year), month, first_day), date(int(year), month, min(last_day, last))
    except ValueError:
        return None


def periods_named(query: str) -> list[tuple[date, date]]:
    """(first day, last day) of each month, or part of a month, the query names with its year and
    no day, in the order found (a full date is days_named's)."""
    text = _blanked(query.lower(), _FULL_DATES)
    found = [
        _span(year, _MONTH_NUMBER[month], _LATIN_PARTS.get(before or part))
        for before, part, month, year in _MONTH_YEAR.findall(text)
    ]
    found += [
        _span(year, cjk_number(month), _CJK_PARTS.get(part))
        for year, month, part in _CJK_MONTH_YEAR.findall(text)
    ]
    return list(dict.fromkeys(span for span in found if span is not None))


def monthperiods_named(query: str) -> list[tuple[int, int | None]]:
    """(month, third: 0-2 or None for the whole month) of each month the query names without a
    year or a day, in the order found."""
    claimed = (*_FULL_DATES, _MONTH_DAY, _DAY_MONTH, _CJK_MONTH_DAY, _MONTH_YEAR, _CJK_MONTH_YEAR)
    text = _blanked(query.lower(), claimed)
    found = [
        (_MONTH_NUMBER[month], _LATIN_PARTS.get(before or part))
        for before, part, month in _MONTH_ALONE.findall(text)
    ]
    found += [
        (cjk_number(month), _CJK_PARTS.get(part)) for month, part in _CJK_MONTH_ALONE.findall(text)
    ]
    return list(dict.fromkeys(found))


def _years_around(epochs: np.ndarray) -> list[int]:
    """The calendar years of `epochs`, with the year before and after each (a day named near a new
    year falls in the neighbouring one)."""
    finite = epochs[np.isfinite(epochs)]
    years = np.unique(finite.astype("datetime64[s]").astype("datetime64[Y]").astype(np.int64))
    return sorted({int(year) + 1970 + step for year in years for step in (-1, 0, 1)})


def _each_year(epochs: np.ndarray, yearless: list[tuple], build: Callable) -> list:
    """`build(year, *item)` for each day or month named without its year, in every year around
    `epochs`, leaving out what a year does not have (February 29th in 2023)."""
    if not yearless:
        return []
    return [
        built
        for year in _years_around(epochs)
        for item in yearless
        if (built := build(str(year), *item)) is not None
    ]


def _nearness(epochs: np.ndarray, spans: list[tuple[date, date]]) -> np.ndarray:
    """How near each moment is to the nearest span of days: 1 from the first day's start to the
    last day's start, fading to 0 over DAY_AFTER_DAYS after that and DAY_BEFORE_DAYS before."""
    nearness = np.zeros(len(epochs), dtype=np.float64)
    for first, last in spans:
        start = datetime(first.year, first.month, first.day, tzinfo=UTC).timestamp()
        end = datetime(last.year, last.month, last.day, tzinfo=UTC).timestamp()
        before = (epochs - start) / 86400.0
        after = (epochs - end) / 86400.0
        fade = np.where(
            before < 0,
            1.0 + before / DAY_BEFORE_DAYS,
            np.where(after > 0, 1.0 - after / DAY_AFTER_DAYS, 1.0),
        )
        nearness = np.maximum(nearness, np.clip(fade, 0.0, 1.0))
    return nearness


def time_priors(
    *, query: str, asked_at: datetime, occurred_at: np.ndarray, mentions: np.ndarray
) -> Callable[[np.ndarray], np.ndarray] | None:
    """The time priors of `query`, asked at `asked_at`, over a table's rows (when each happened,
    as epochs: a turn's occurred_at, a memory's valid_from; mentions_time flags), or None when the
    query asks nothing about time."""
    asks = asks_when(query) and settings.TIDELINE_SEARCH_PRIOR_WHEN > 0
    days = days_named(query) if settings.TIDELINE_SEARCH_PRIOR_DAY > 0 else []
    monthdays = monthdays_named(query) if settings.TIDELINE_SEARCH_PRIOR_DAY > 0 else []
    periods = periods_named(query) if settings.TIDELINE_SEARCH_PRIOR_PERIOD > 0 else []
    months = monthperiods_named(query) if settings.TIDELINE_SEARCH_PRIOR_PERIOD > 0 else []
    # A relative day weighs as a named day, a relative week, month or year as a named month. A
    # query that also names a date ("last week, as mentioned on November 6, 2023") counts from
    # that date, not from the moment of asking, and the date itself already places it.
    if not (days or monthdays or periods or months):
        for first, last in relative_spans(query, asked_at.astimezone(UTC).date()):
            if first == last and settings.TIDELINE_SEARCH_PRIOR_DAY > 0:
                days.append(first)
            elif first != last and settings.TIDELINE_SEARCH_PRIOR_PERIOD > 0:
                periods.append((first, last))
    if not asks and not days and not monthdays and not periods and not months:
        return None

    def priors(rows: np.ndarray) -> np.ndarray:
        prior = np.zeros(len(rows), dtype=np.float32)
        if asks:
            prior += np.float32(settings.TIDELINE_SEARCH_PRIOR_WHEN) * mentions[rows]
        named = days + _each_year(
            occurred_at[rows], monthdays, lambda year, month, day: _day(year, month, str(day))
        )
        if named:
            nearness = _nearness(occurred_at[rows], [(day, day) for day in named])
            prior += (settings.TIDELINE_SEARCH_PRIOR_DAY * nearness).astype(np.float32)
        spans = periods + _each_year(occurred_at[rows], months, _span)
        if spans:
            nearness = _nearness(occurred_at[rows], spans)
            prior += (settings.TIDELINE_SEARCH_PRIOR_PERIOD * nearness).astype(np.float32)
        return prior

    return priors
