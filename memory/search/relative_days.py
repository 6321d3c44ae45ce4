"""Days a question names relative to the moment it is asked from: "yesterday", "last week",
"three days ago", 上个月, 先週, hace dos días.

"What did we decide yesterday?" names a day as surely as "on March 16, 2022" does, but which day
depends on when it is asked: now for an agent asking live, or the moment a search of the past is
made from (`as_of`, `until`). Each reading is a stretch of calendar days, (first, last); a single
day is (day, day). memory/search/timing.py weighs a single day as a named day and a longer stretch
as a named month.

Only what says where it lies is read. "Last time", "recently" and a bare weekday ("on Monday")
are left alone: they name no stretch a search could prefer without guessing. Tomorrow and next
week are plans, said before them, and are left alone too.
"""

import calendar
import re
from collections.abc import Callable
from datetime import date, timedelta

Span = tuple[date, date]

_ENGLISH_NUMBERS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
_ENGLISH_NUMBERS += ["eleven", "twelve"]
_SPANISH_NUMBERS = ["uno", "dos", "tres", "cuatro", "cinco", "seis", "siete", "ocho", "nueve"]
_SPANISH_NUMBERS += ["diez", "once", "doce"]
_NUMBER_WORDS = {
    **{word: n for n, word in enumerate(_ENGLISH_NUMBERS, start=1)},
    **{word: n for n, word in enumerate(_SPANISH_NUMBERS, start=1)},
    "a": 1, "an": 1, "un": 1, "una": 1,
}  # fmt: skip
_LATIN_NUMBER = rf"(\d{{1,3}}|{'|'.join(sorted(_NUMBER_WORDS, key=len, reverse=True))})"
_CJK_DIGITS = {numeral: n for n, numeral in enumerate("一二三四五六七八九", start=1)}
_CJK_DIGITS |= {"两": 2, "兩": 2}
# 3, 三, 十, 十五, 二十, 二十五 (up to 99): a number as Chinese and Japanese write it.
_CJK_NUMBER = r"(\d{1,3}|[一二三四五六七八九]?十[一二三四五六七八九]?|[一二三四五六七八九两兩])"

_UNITS = {
    "day": "day", "día": "day", "天": "day", "日": "day",
    "week": "week", "semana": "week", "周": "week", "週": "week", "週間": "week",
    "星期": "week", "礼拜": "week", "禮拜": "week",
    "month": "month", "mes": "month", "月": "month", "ヶ月": "month", "か月": "month",
    "カ月": "month",
    "year": "year", "año": "year", "年": "year",
}  # fmt: skip
_UNITS |= {
    f"{counter}{unit}": _UNITS[unit] for counter in "个個" for unit in ("月", "星期", "礼拜")
}
_UNITS["個禮拜"] = "week"
# 三个月前 and 3ヶ月前 are three months ago; a bare 5月前 is "before May", and is not read.
_CJK_UNIT = "天|日|週間|周|[个個]?星期|[个個]?礼拜|[个個]?禮拜|[个個]月|ヶ月|か月|カ月|年"
_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_SPANISH_WEEKDAYS = ["lunes", "martes", "miércoles", "jueves", "viernes", "sábado", "domingo"]
# After 上周: 一 (Monday) … 六, and 日 or 天 (Sunday). Before 曜日: 月 (Monday) … 日.
_CJK_WEEKDAYS = {numeral: n for n, numeral in enumerate("一二三四五六")} | {"日": 6, "天": 6}
_JAPANESE_WEEKDAYS = {day: n for n, day in enumerate("月火水木金土日")}
_LAST_WEEK_CJK = "上周|上週|上星期|上个星期|上個星期|上礼拜|上禮拜"


def _number(word: str) -> int:
    """3, three, tres, 三, 十五, 二十 as a number."""
    if word.isdigit():
        return int(word)
    if word in _NUMBER_WORDS:
        return _NUMBER_WORDS[word]
    if "十" not in word:
        return _CJK_DIGITS[word]
    tens, _, ones = word.partition("十")
    return _CJK_DIGITS.get(tens, 1) * 10 + _CJK_DIGITS.get(ones, 0)


def _days_back(today: date, days: int) -> Span:
    day = today - timedelta(days=days)
    return day, day


def _week_of(day: date) -> Span:
    monday = day - timedelta(days=day.weekday())
    return monday, monday + timedelta(days=6)


def _months_back(today: date, months: int) -> Span:
    index = today.year * 12 + today.month - 1 - months
    year, month = index // 12, index % 12 + 1
    return date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1])


def _years_back(today: date, years: int) -> Span:
    return date(today.year - years, 1, 1), date(today.year - years, 12, 31)


def _ago(today: date, count: int, unit: str) -> Span:
    """The day, calendar week, month or year `count` of them before today."""
    kind = _UNITS[unit]
    if kind == "day":
        return _days_back(today, count)
    if kind == "week":
        return _week_of(today - timedelta(days=7 * count))
    if kind == "month":
        return _months_back(today, count)
    return _years_back(today, count)


def _weekday_before(today: date, weekday: int) -> Span:
    """The last such weekday before today ("last Friday" asked on a Friday is a week ago)."""
    return _days_back(today, (today.weekday() - weekday - 1) % 7 + 1)


def _weekday_of_last_week(today: date, weekday: int) -> Span:
    """That weekday in the calendar week before this one (上周三, 先週の水曜日; and "last
    weekend" is that week's Saturday and Sunday)."""
    day = _week_of(today)[0] - timedelta(days=7 - weekday)
    return day, day


def _weekend_before(today: date) -> Span:
    saturday = _weekday_of_last_week(today, 5)[0]
    return saturday, saturday + timedelta(days=1)


Reader = Callable[[re.Match, date], Span]
# Longer forms first: each reading blanks what it read, so "the day before yesterday" is not also
# "yesterday", 一昨日 not also 昨日, 上周三 not also 上周. A week or month "of" something ("the
# last week of October") is a part of that month, which timing.py reads.
_READERS: tuple[tuple[str, Reader], ...] = (
    (r"\bthe day before yesterday\b|\banteayer\b|\bantier\b|前天|一昨日|おととい",
     lambda m, t: _days_back(t, 2)),
    (r"\byesterday\b|\blast night\b|\bayer\b|\banoche\b|昨天|昨晚|昨夜|昨日|きのう",
     lambda m, t: _days_back(t, 1)),
    (r"\btoday\b|\btonight\b|\bthis (?:morning|afternoon|evening)\b|\bhoy\b"
     r"|\besta (?:mañana|tarde|noche)\b|今天|今晚|今早|今朝|今日|きょう",
     lambda m, t: _days_back(t, 0)),
    (rf"\b{_LATIN_NUMBER} (day|week|month|year)s? ago\b",
     lambda m, t: _ago(t, _number(m[1]), m[2])),
    (rf"\bhace {_LATIN_NUMBER} (día|semana|mes|año)(?:s|es)?\b",
     lambda m, t: _ago(t, _number(m[1]), m[2])),
    (rf"(?<![\d一二三四五六七八九十]){_CJK_NUMBER}\s*({_CJK_UNIT})前",
     lambda m, t: _ago(t, _number(m[1]), m[2])),
    (rf"\b(?:last|this past|past) ({'|'.join(_WEEKDAYS)})\b",
     lambda m, t: _weekday_before(t, _WEEKDAYS.index(m[1]))),
    (rf"\bel ({'|'.join(_SPANISH_WEEKDAYS)}) pasado\b",
     lambda m, t: _weekday_before(t, _SPANISH_WEEKDAYS.index(m[1]))),
    (rf"(?:{_LAST_WEEK_CJK})([一二三四五六日天])",
     lambda m, t: _weekday_of_last_week(t, _CJK_WEEKDAYS[m[1]])),
    (r"先週の?([月火水木金土日])曜",
     lambda m, t: _weekday_of_last_week(t, _JAPANESE_WEEKDAYS[m[1]])),
    (r"\b(?:last|this past|past) weekend\b|\bel fin de semana pasado\b",
     lambda m, t: _weekend_before(t)),
    (r"\b(?:the|this) (?:past|last) week\b(?! of)",
     lambda m, t: (t - timedelta(days=7), t)),
    (rf"\b(?:last|previous) week\b(?! of)|\bla semana pasada\b|{_LAST_WEEK_CJK}|先週",
     lambda m, t: _week_of(t - timedelta(days=7))),
    (r"\bthis week\b|\besta semana\b|这周|這週|本周|本週|这个星期|這個星期|今週",
     lambda m, t: (_week_of(t)[0], t)),
    (r"\b(?:last|previous) month\b(?! of)|\bel mes pasado\b|上个月|上個月|先月",
     lambda m, t: _months_back(t, 1)),
    (r"\bthis month\b|\beste mes\b|这个月|這個月|本月|今月",
     lambda m, t: (date(t.year, t.month, 1), t)),
    (r"\blast year\b|\bel año pasado\b|去年|昨年",
     lambda m, t: _years_back(t, 1)),
    (r"\bthis year\b|\beste año\b|今年",
     lambda m, t: (date(t.year, 1, 1), t)),
)  # fmt: skip
_COMPILED = tuple((re.compile(pattern), reader) for pattern, reader in _READERS)


def relative_spans(query: str, today: date) -> list[Span]:
    """The stretches of days `query` names relative to `today`, longest forms first (duplicates
    dropped; a stretch that would begin before year 1 is left out)."""
    text = query.lower()
    found: list[Span] = []
    for pattern, reader in _COMPILED:
        # finditer reads the text as it was before this pattern; each match is blanked at its
        # own length, so the positions of the ones after it still hold.
        for match in pattern.finditer(text):
            start, end = match.span()
            text = text[:start] + " " * (end - start) + text[end:]
            try:
                found.append(reader(match, today))
            except (OverflowError, ValueError):
                continue
    return list(dict.fromkeys(found))
