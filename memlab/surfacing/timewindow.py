"""Deterministic time-window parsing for ``temporal:windowed`` and the router's temporal rule.

:func:`parse_time_window` reads at most one window from a query, relative to the clock's ``now``.
It is a small rule-based reader, not a general date parser; ``tests/data/time_windows.csv`` is
its golden table (query, clock, expected window or none).

Semantics
---------
Windows
    Half-open ``[start, end)``, timezone-aware, in the clock's timezone (memlab's clocks are
    UTC; a naive ``now`` is taken as UTC). A window that runs "up to now" ends at
    ``now + 1 µs`` so that an item created at exactly ``now`` is inside it. A reading that
    would give an empty window (``start >= end``, e.g. "since 2030" with the clock in 2024) is
    no window.
Calendar units
    A day is midnight to midnight, a month its first day to the next month's first day, a year
    1 January to 1 January. Weeks start on Monday (ISO 8601); a weekend is Saturday 00:00 to
    Monday 00:00.
Relative expressions
    ``today`` is midnight to now; ``yesterday`` the previous calendar day. ``last|past week``,
    ``month``, ``year``, ``day``, ``hour`` and ``last|past N <unit>s`` are rolling: the
    last N units up to now (a month is 30 days, a year 365). ``this week|month|year`` run from
    the calendar unit's start (Monday for a week) to now. ``N <unit>s ago`` is one unit wide,
    centred on ``now - N units``. ``the day|week|month|year before last`` is the unit before
    the rolling last one: ``[now - 2 units, now - 1 unit)``. ``last weekend`` is the weekend
    before this week's Monday; ``this weekend`` is the current one, and only on a Saturday or
    Sunday. Counts may be digits or words (``a``, ``one`` … ``twelve``, ``a couple of``).
Weekdays
    Full names only (``monday`` … ``sunday``), as one calendar day. ``on Monday``, ``this
    Monday`` and a weekday as an operand of an operator or range (``since Monday``) are the
    most recent Monday up to and including today; ``last Monday`` (also ``past``,
    ``previous``, ``this past``) is the most recent Monday strictly before today, so with the
    clock on Saturday 2024-06-15 "last Tuesday" is 2024-06-11 and "last Saturday" 2024-06-08.
    A weekday without one of these cues ("Friday I went", "Monday's meeting") is not read.
Seasons
    Meteorological seasons of the northern hemisphere, three calendar months each: spring is
    March-May, summer June-August, autumn (or fall) September-November, winter December-
    February. ``winter 2024`` is December 2023 to 1 March 2024 (the winter whose January is
    in 2024). ``summer 2023``, ``summer of 2023`` and ``the summer of 2023`` need no cue; a
    season without a year needs ``in``, ``during``, ``over``, ``throughout``, ``from``,
    ``of``, ``this`` or ``last`` and is then the most recent one that has started by ``now``
    ("in the fall" in June 2024 is autumn 2023); ``last summer`` is the most recent one that
    has ended. "the fall of Rome" and "in Spring Boot" are not seasons.
Quarters
    Calendar quarters: Q1 is January-March … Q4 October-December. ``Q1 2024``, ``2024 Q1``,
    ``Q1-2024``, ``Q1 of 2024`` and ``the first quarter of 2024`` need no cue; without a year
    (``in Q3``, ``during the second quarter``) the quarter needs the same cues as a season
    and is the most recent one that has started; ``last Q2`` the most recent one that has
    ended. ``this quarter``/``last quarter`` are not read.
Weeks of a month
    ``the first|second|third|fourth week of May [2023]`` are the 7-day spans from the 1st,
    8th, 15th and 22nd (the first week of May is ``[1 May, 8 May)``); ``the last week of
    May`` is the month's last seven days. Without a year, the most recent such week that has
    started.
Parts of a year
    A year in thirds: ``early 2023`` (also ``the start|beginning of 2023``) is January-April,
    ``mid-2023`` (``the middle of 2023``) May-August, ``late 2023`` (``the end of 2023``)
    September-December. ``early``/``mid``/``late`` before a month name keep the whole month
    ("mid-May" is May).
Dates
    ``2023-05-08``, ``8 May 2023``, ``8th of May, 2023``, ``May 8th 2023``, ``May 2023``,
    ``May of 2023``; month names may be abbreviated (``Sep``, ``Sept``, ``Sep.``). A date
    without a year is the most recent one that has started by ``now``: with the clock at
    2024-06-15, "in May" and "in June" are May and June 2024, "in July" is July 2023, "on 20
    June" is 20 June 2023; "last May" is the most recent May before the current month.
    A date with an explicit year may lie in the future ("December 2025").
When a month name or a number is a date
    A month name with a day or a year is always a date. A month name alone, or a four-digit
    number alone, is a date only after a temporal cue: ``in``, ``during``, ``throughout``,
    ``from``, ``of`` (months only), ``last`` (months only), ``early``, ``mid``, ``late``,
    ``end of``, ``start of``, ``beginning of`` (these five narrow a year, see above),
    a season or quarter, ``year``, or as an operand of ``since``/``after``/``before``/
    ``until`` or of a range. A four-digit number is moreover a year only within the plausible range
    ``[now.year - 100, now.year + 10]`` (:data:`YEARS_BACK`, :data:`YEARS_AHEAD`), and never
    when it is part of a longer number or a decimal. So "port 2049", "2049 users", "the trojan
    2023 incident", "top 100" and "version 2.2023" have no window, while "in 2023" and "since
    2019" do. A bare "may" also needs the cue ("you may need") and "3 may" needs an ordinal,
    "of" or a preceding "on"/"the" ("these 3 may be related").
Operators
    ``between A and B`` / ``from A to|until|till|through B`` cover the whole of both ends:
    ``[start(A), end(B))``; if B has a year and A has none, A is its most recent occurrence
    starting no later than B ("between May and June 2023" is May-June 2023), and if A has a
    year and B has none, B is its first occurrence starting no earlier than A. ``since A``
    is ``[start(A), now]``, ``after A`` is ``[end(A), now]``, ``before A`` (or ``prior to A``) is
    ``[1970-01-01, start(A))`` (the Unix epoch: memlab timestamps are epoch seconds),
    ``until|till A`` is ``[1970-01-01, end(A))``. ``N <unit>s before A`` is the N units
    before ``start(A)``, ``N <unit>s after A`` the N units after ``end(A)``; ``the <unit>``
    counts as one.
Empty operator windows
    When a range, offset or operator has read its date but its window is empty or lies in
    the future without a written year ("after today", "after June 2024", "since 2024-06-16"
    or "since December 2024" with the clock at 2024-06-15 12:00, "before 1960", "the day
    after today"), that phrase gives no window: its date is never read again on its own
    (which would give the opposite of what was asked). Another date elsewhere in the query
    may still give the window.
Precedence
    Ranges, then ``N units before|after``, then ``since|after|before|until``, then relative
    expressions (including ``last|this <season|quarter|month>``), then dates (dates with a
    year or a day, then a cued month, season or quarter, then ``on|last|this <weekday>``,
    then a cued year); the first reading that gives a window wins. A weekday is read after
    a written date: in "what did she finish last Friday on 23 January, 2022" the window is
    23 January 2022.

What is not understood (the query gets no window from it): "tomorrow"/"next …", parts of a
day ("this morning"), "a few", abbreviated weekdays ("Tue"), "the last Monday in May" (read
as May), "this|last quarter", fiscal years and quarters other than the calendar's, seasons of
the southern hemisphere, "the week of 3 May", early/mid/late parts of a month.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone, tzinfo

__all__ = ["TimeWindow", "parse_time_window", "with_tail", "YEARS_BACK", "YEARS_AHEAD"]

#: A bare four-digit number is a year only from ``now.year - YEARS_BACK`` ...
YEARS_BACK = 100
#: ... to ``now.year + YEARS_AHEAD``.
YEARS_AHEAD = 10

_MONTHS = {m: i + 1 for i, m in enumerate(
    "january february march april may june july august september october november december".split())}
_MONTHS.update({m[:3]: i for m, i in list(_MONTHS.items())})
_MONTH = (r"(?P<mon>jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
          r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\b\.?")
_ORD = r"(?:st|nd|rd|th)"
_DAY_RE = r"(?<![\d.])(?P<day>\d{1,2})(?P<ord>" + _ORD + r")?\b"
_YEAR_IN = r"(?P<year>\d{4})(?!\d|[.,]\d)"  # a year inside a date ("May 8,2023")
_YEAR_RE = r"(?<![\d.,])" + _YEAR_IN  # a year on its own: not part of a longer number
_UNIT_H = {"hour": 1, "day": 24, "week": 24 * 7, "month": 24 * 30, "year": 24 * 365}
_UNIT = r"(?P<unit>hour|day|week|month|year)s?\b"
_NUMBER_WORDS = {w: i + 1 for i, w in enumerate(
    "one two three four five six seven eight nine ten eleven twelve".split())}
_NUMBER_WORDS.update({"a": 1, "an": 1, "the": 1})
_COUNT = (r"(?P<count>\d{1,6}|(?:a\s+)?couple\s+of|an?|one|two|three|four|five|six|seven|eight|nine"
          r"|ten|eleven|twelve)")
_WEEKDAYS = {w: i for i, w in enumerate(
    "monday tuesday wednesday thursday friday saturday sunday".split())}
_WEEKDAY = r"(?P<wd>monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b"
#: Meteorological seasons (northern hemisphere): the month each starts in; each is 3 months.
_SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}
_SEASON = r"(?P<season>spring|summer|autumn|fall|winter)\b"
_NTH = {"first": 1, "1st": 1, "second": 2, "2nd": 2, "third": 3, "3rd": 3, "fourth": 4, "4th": 4}
_QUARTER = (r"(?:q(?P<q>[1-4])(?!\w)|(?P<qn>first|second|third|fourth|1st|2nd|3rd|4th)\s+quarter"
            r"\b)")
#: Parts of a year: thirds, as (first month, months).
_PARTS = {"early": (1, 4), "start": (1, 4), "beginning": (1, 4), "mid": (5, 4), "middle": (5, 4),
          "late": (9, 4), "end": (9, 4)}
_DAY = timedelta(days=1)
_TICK = timedelta(microseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MASK = "\x00"  # fills a construct whose window is empty; no pattern reads it


@dataclass(frozen=True)
class TimeWindow:
    """``[start, end)`` (timezone-aware) and the phrase it was parsed from.

    Examples
    --------
    >>> import numpy as np
    >>> w = TimeWindow(datetime(2024, 1, 1, tzinfo=timezone.utc),
    ...                datetime(2024, 1, 2, tzinfo=timezone.utc), "1 january 2024")
    >>> w.contains_ts(np.array([w.start.timestamp(), w.end.timestamp()])).tolist()
    [True, False]
    """

    start: datetime
    end: datetime
    phrase: str

    def contains_ts(self, ts):
        """Vectorised membership for epoch seconds (start inclusive, end exclusive)."""
        return (ts >= self.start.timestamp()) & (ts < self.end.timestamp())


# ---------------------------------------------------------------------------------------------
# Anchors: one date or relative expression, read at a position of the lowered query.

@dataclass(frozen=True)
class _Anchor:
    """A parsed date expression: ``fixed`` (start, end) or a calendar date missing its year."""

    begin: int
    end: int
    fixed: tuple[datetime, datetime] | None = None
    month: int | None = None
    day: int | None = None  # negative: counted back from the end of the month
    explicit: bool = False  # a written year: the only way to a window that starts after now
    months: int = 1  # the length of a year-less month span (3 for seasons and quarters)
    days: int = 1  # the length of a year-less day span (7 for a week of a month)
    ended: bool = False  # "last <month|season|quarter>": the most recent one that has ended
    weekday: bool = False  # read after dates: "last Friday, 23 January 2022" is the date

    @property
    def undated(self) -> bool:
        return self.fixed is None


def _midnight(dt: datetime) -> datetime:
    return dt.replace(hour=0, minute=0, second=0, microsecond=0)


def _month_start(tz: tzinfo, year: int, month: int) -> datetime:
    """The first of ``month`` (which may run past 12) of ``year``."""
    return datetime(year + (month - 1) // 12, (month - 1) % 12 + 1, 1, tzinfo=tz)


def _span(tz: tzinfo, year: int, month: int | None = None, day: int | None = None,
          months: int = 1, days: int = 1) -> tuple[datetime, datetime] | None:
    """A calendar span as ``(start, end)``, or None when it is not a date.

    The year; else ``months`` months from the first of ``month``; else ``days`` days from
    ``day`` of ``month`` (a negative ``day`` counts back from the end of the month: -7 is the
    month's last seven days).
    """
    try:
        if month is None:
            return datetime(year, 1, 1, tzinfo=tz), datetime(year + 1, 1, 1, tzinfo=tz)
        if day is None:
            return _month_start(tz, year, month), _month_start(tz, year, month + months)
        if day < 0:
            start = _month_start(tz, year, month + 1) + day * _DAY
        else:
            start = datetime(year, month, day, tzinfo=tz)
        return start, start + days * _DAY
    except (ValueError, OverflowError):
        return None


def _anchor_span(a: _Anchor, tz: tzinfo, year: int) -> tuple[datetime, datetime] | None:
    return _span(tz, year, a.month, a.day, a.months, a.days)


def _latest(a: _Anchor, limit: datetime) -> tuple[datetime, datetime] | None:
    """The most recent occurrence of a year-less date that starts no later than ``limit``.

    With ``a.ended`` ("last May"), the most recent one that ends no later than ``limit``.
    """
    for year in range(limit.year, max(limit.year - 8, 0), -1):  # 8 years: any 29 February
        span = _anchor_span(a, limit.tzinfo, year)
        if span is not None and (span[1] if a.ended else span[0]) <= limit:
            return span
    return None


def _earliest(a: _Anchor, limit: datetime) -> tuple[datetime, datetime] | None:
    """The first occurrence of a year-less date that starts no earlier than ``limit``."""
    for year in range(limit.year, min(limit.year + 8, 9999) + 1):
        span = _anchor_span(a, limit.tzinfo, year)
        if span is not None and span[0] >= limit:
            return span
    return None


def _resolve(a: _Anchor, now: datetime) -> tuple[datetime, datetime] | None:
    return a.fixed if a.fixed is not None else _latest(a, now)


def _count(text: str) -> int:
    text = re.sub(r"\s+", " ", text)
    if text.endswith("couple of"):
        return 2
    return int(text) if text.isdigit() else _NUMBER_WORDS[text]


def _units(n: int, unit: str) -> timedelta:
    return timedelta(hours=n * _UNIT_H[unit])


def _plausible_year(year: int, now: datetime) -> bool:
    return now.year - YEARS_BACK <= year <= now.year + YEARS_AHEAD


_A_ISO = re.compile(r"(?<![\d.])(?P<year>\d{4})[-/](?P<month>\d{1,2})[-/](?P<day>\d{1,2})(?!\d)")
_A_DMY = re.compile(r"(?:the\s+)?" + _DAY_RE + r"(?P<of>\s+of)?\s+" + _MONTH
                    + r"(?:,?\s*" + _YEAR_IN + r")?")
_A_MDY = re.compile(_MONTH + r"\s*(?:the\s+)?" + _DAY_RE + r"(?!:)"
                    + r"(?:,?\s*" + _YEAR_IN + r")?")
_A_MY = re.compile(_MONTH + r",?\s+(?:of\s+)?" + _YEAR_RE)
_A_M = re.compile(_MONTH)
_A_Y = re.compile(_YEAR_RE)
_A_REL = re.compile(r"(?P<word>today|now|the\s+present|yesterday)\b")
_A_AGO = re.compile(_COUNT + r"\s+" + _UNIT + r"\s+ago\b")
_A_LAST_N = re.compile(r"(?:the\s+)?(?:last|past)\s+" + _COUNT + r"\s+" + _UNIT)
_A_LAST = re.compile(r"(?:the\s+)?(?P<which>last|past|this)\s+(?P<unit>hour|day|week|month|year)\b")
_A_WEEKEND = re.compile(r"(?:the\s+)?(?P<which>last|this)\s+weekend\b")
_A_BEFORE_LAST = re.compile(r"(?:the\s+)?(?P<unit>day|week|month|year)\s+before\s+last\b")
_A_WHICH = re.compile(r"(?:the\s+)?(?P<which>last|this\s+past|past|previous|this)\s+")
_A_WEEK_OF = re.compile(r"(?:the\s+)?(?P<nth>first|second|third|fourth|1st|2nd|3rd|4th|last)"
                        r"\s+week\s+of\s+(?:the\s+month\s+of\s+)?" + _MONTH
                        + r"(?:,?\s*(?:of\s+)?" + _YEAR_RE + r")?")
_A_PART_Y = re.compile(r"(?:the\s+)?(?P<part>early|mid|late"
                       r"|(?:very\s+)?(?:start|beginning|middle|end)\s+of)"
                       r"[\s-]+(?:the\s+year\s+)?" + _YEAR_RE)
_A_QY = re.compile(_QUARTER + r"(?:,?\s*|\s*[-/]\s*|\s+of\s+(?:the\s+year\s+)?)" + _YEAR_RE)
_A_YQ = re.compile(_YEAR_RE + r"[\s-]*q(?P<q>[1-4])(?!\w)")
_A_Q = re.compile(_QUARTER)
_A_SEASON_Y = re.compile(_SEASON + r"(?:,?\s*|\s+of\s+)" + _YEAR_RE)
# A season without a year is not "the fall of Rome" nor "in Spring Boot".
_A_SEASON = re.compile(_SEASON + r"(?!\s+of\b)(?<!spring(?=\s(?:boot|framework|cloud|mvc|data"
                       r"|batch|security|integration)\b))")
_A_WD = re.compile(_WEEKDAY)
_OF_MONTH = re.compile(r"\s+(?:of|in)\s+(?:the\s+month\s+of\s+)?" + _MONTH)


def _quarter(m: re.Match) -> int:
    """The first month of the quarter a ``_QUARTER`` match names."""
    return 3 * (int(m["q"]) if m["q"] else _NTH[m["qn"]]) - 2


def _season(tz: tzinfo, name: str, year: int) -> tuple[datetime, datetime] | None:
    """A season of a year; winter YYYY runs from December YYYY-1 to 1 March YYYY."""
    month = _SEASONS[name]
    return _span(tz, year - (month == 12), month, months=3)


def _weekday(now: datetime, wd: int, strictly_before: bool) -> tuple[datetime, datetime]:
    """The most recent day named ``wd`` up to today (or strictly before today)."""
    back = (now.weekday() - wd) % 7
    if strictly_before and back == 0:
        back = 7
    start = _midnight(now) - back * _DAY
    return start, start + _DAY


def _which(q: str, pos: int, now: datetime) -> _Anchor | None:
    """"last|this|past|previous" + a weekday, season, quarter or (not after "this") a month."""
    w = _A_WHICH.match(q, pos)
    if not w:
        return None
    last = w["which"] != "this"
    at = w.end()
    m = _A_WD.match(q, at)
    if m and not _OF_MONTH.match(q, m.end()):  # "the last Monday in May" is not understood
        return _Anchor(pos, m.end(), _weekday(now, _WEEKDAYS[m["wd"]], last), weekday=True)
    m = _A_SEASON.match(q, at)
    if m:
        return _Anchor(pos, m.end(), None, _SEASONS[m["season"]], months=3, ended=last)
    m = _A_Q.match(q, at)
    if m:
        return _Anchor(pos, m.end(), None, _quarter(m), months=3, ended=last)
    m = _A_M.match(q, at)
    if m and w["which"] not in ("this", "past"):  # "this may help", "the past may ..."
        return _Anchor(pos, m.end(), None, _MONTHS[m["mon"][:3]], ended=True)
    return None


def _anchor(q: str, pos: int, now: datetime, *, bare: bool) -> _Anchor | None:
    """An anchor starting exactly at ``pos``, or None.

    ``bare`` allows a month name or four-digit number on its own (the caller has seen a cue).
    """
    tz = now.tzinfo
    m = _A_ISO.match(q, pos)
    if m:
        span = _span(tz, int(m["year"]), int(m["month"]), int(m["day"]))
        return _Anchor(pos, m.end(), span, explicit=True) if span else None
    m = _A_WEEK_OF.match(q, pos)
    if m:
        nth = m["nth"]
        day = -7 if nth == "last" else 7 * _NTH[nth] - 6
        a = _Anchor(pos, m.end(), None, _MONTHS[m["mon"][:3]], day, days=7)
        if m["year"]:
            span = _anchor_span(a, tz, int(m["year"]))
            return _Anchor(pos, m.end(), span, explicit=True) if span else None
        return a
    for pattern in (_A_QY, _A_YQ):
        m = pattern.match(q, pos)
        if m:
            span = _span(tz, int(m["year"]), _quarter(m), months=3)
            return _Anchor(pos, m.end(), span, explicit=True) if span else None
    m = _A_SEASON_Y.match(q, pos)
    if m:
        span = _season(tz, m["season"], int(m["year"]))
        return _Anchor(pos, m.end(), span, explicit=True) if span else None
    m = _A_PART_Y.match(q, pos)
    if m:
        first, months = _PARTS[m["part"].split()[-2 if m["part"].endswith("of") else -1]]
        span = _span(tz, int(m["year"]), first, months=months)
        return _Anchor(pos, m.end(), span, explicit=True) if span else None
    for pattern in (_A_DMY, _A_MDY):
        m = pattern.match(q, pos)
        if not m:
            continue
        month, day = _MONTHS[m["mon"][:3]], int(m["day"])
        if m["year"]:
            span = _span(tz, int(m["year"]), month, day)
            if span:
                return _Anchor(pos, m.end(), span, explicit=True)
            continue
        if pattern is _A_DMY and month == 5 and not (m["ord"] or m["of"] or bare
                                                     or m.group().startswith("the")):
            continue  # "these 3 may be related"
        if 1 <= day <= 31:
            return _Anchor(pos, m.end(), None, month, day)
    m = _A_MY.match(q, pos)
    if m:
        span = _span(tz, int(m["year"]), _MONTHS[m["mon"][:3]])
        if span:
            return _Anchor(pos, m.end(), span, explicit=True)
    m = _A_WEEKEND.match(q, pos)
    if m:
        monday = _midnight(now) - timedelta(days=now.weekday())
        if m["which"] == "last":
            return _Anchor(pos, m.end(), (monday - 2 * _DAY, monday))
        if now.weekday() >= 5:
            return _Anchor(pos, m.end(), (monday + 5 * _DAY, now + _TICK))
        return None
    m = _A_REL.match(q, pos)
    if m:
        if m["word"] == "yesterday":
            return _Anchor(pos, m.end(), (_midnight(now) - _DAY, _midnight(now)))
        if m["word"] == "today":
            return _Anchor(pos, m.end(), (_midnight(now), now + _TICK))
        return _Anchor(pos, m.end(), (now, now + _TICK))
    m = _A_AGO.match(q, pos)
    if m:
        unit = m["unit"]
        centre = now - _units(_count(m["count"]), unit)
        half = timedelta(hours=_UNIT_H[unit] / 2)
        return _Anchor(pos, m.end(), (centre - half, centre + half))
    m = _A_LAST_N.match(q, pos)
    if m:
        return _Anchor(pos, m.end(), (now - _units(_count(m["count"]), m["unit"]), now + _TICK))
    m = _A_BEFORE_LAST.match(q, pos)
    if m:
        unit = _units(1, m["unit"])
        return _Anchor(pos, m.end(), (now - 2 * unit, now - unit))
    a = _which(q, pos, now)
    if a is not None:
        return a
    m = _A_LAST.match(q, pos)
    if m:
        unit = m["unit"]
        if m["which"] != "this":
            return _Anchor(pos, m.end(), (now - _units(1, unit), now + _TICK))
        if unit == "week":
            start = _midnight(now) - timedelta(days=now.weekday())
        elif unit == "month":
            start = _midnight(now).replace(day=1)
        elif unit == "year":
            start = _midnight(now).replace(month=1, day=1)
        elif unit == "day":
            start = _midnight(now)
        else:
            start = now.replace(minute=0, second=0, microsecond=0)
        return _Anchor(pos, m.end(), (start, now + _TICK))
    if not bare:
        return None
    m = _A_M.match(q, pos)
    if m:
        return _Anchor(pos, m.end(), None, _MONTHS[m["mon"][:3]])
    m = _A_SEASON.match(q, pos)
    if m:
        return _Anchor(pos, m.end(), None, _SEASONS[m["season"]], months=3)
    m = _A_Q.match(q, pos)
    if m:
        return _Anchor(pos, m.end(), None, _quarter(m), months=3)
    m = _A_WD.match(q, pos)
    if m:
        return _Anchor(pos, m.end(), _weekday(now, _WEEKDAYS[m["wd"]], False), weekday=True)
    m = _A_Y.match(q, pos)
    if m and _plausible_year(int(m["year"]), now):
        span = _span(tz, int(m["year"]))
        return _Anchor(pos, m.end(), span, explicit=True) if span else None
    return None


# ---------------------------------------------------------------------------------------------
# Constructs over anchors.

_RANGE = re.compile(r"\b(?P<op>between|from)\s+(?:the\s+)?")
_RANGE_JOIN = {"between": re.compile(r"\s*(?:and|-|–|to)\s+(?:the\s+)?|\s*[-–]\s*"),
               "from": re.compile(r"\s+(?:to|until|till|through|thru)\s+(?:the\s+)?|\s*[-–]\s*")}
_OFFSET = re.compile(r"\b" + r"(?:" + _COUNT + r"|the)\s+" + _UNIT
                     + r"\s+(?P<op>before|after)\s+(?:the\s+)?")
_OPERATOR = re.compile(r"\b(?P<op>since|after|before|until|till|prior\s+to)\s+(?:the\s+)?")
_RELATIVE_START = re.compile(
    r"\b(?:today|yesterday|(?:last|this)\s+weekend|(?:the\s+)?(?:last|past|this|previous)\s+"
    r"|(?:the\s+)?(?:day|week|month|year)\s+before\s+last\b"
    r"|" + _COUNT + r"\s+(?:hour|day|week|month|year)s?\s+ago)")
_CUED_MONTH = re.compile(  # a month, season or quarter without a year
    r"\b(?P<cue>in|during|throughout|over|from|of|last|early|mid|late)[\s-]+(?:the\s+)?"
    r"(?:month\s+of\s+)?(?=" + _MONTH + r"|" + _SEASON + r"|" + _QUARTER + r")")
_CUED_WEEKDAY = re.compile(r"\b(?:on\s+(?=" + _WEEKDAY + r")|(?=(?:the\s+)?(?:last|this|past"
                           r"|previous)\s+(?:past\s+)?" + _WEEKDAY.replace("?P<wd>", "") + r"))")
_CUED_YEAR = re.compile(
    r"\b(?:in|during|throughout|from|year)[\s-]+(?:the\s+)?(?:year\s+)?(?=\d{4})")
_FULL_DATES = (_A_WEEK_OF, _A_PART_Y, _A_QY, _A_YQ, _A_SEASON_Y, _A_ISO, _A_DMY, _A_MDY, _A_MY)


def _window(start: datetime, end: datetime, phrase: str, now: datetime,
            explicit: bool = False) -> TimeWindow | None:
    """The window, or None if empty or if it starts after now without a written year."""
    if start >= end or (start > now and not explicit):
        return None
    return TimeWindow(start, end, phrase.strip(" ,.?!;:"))


def _range(q: str, now: datetime, dead: list[tuple[int, int]]) -> TimeWindow | None:
    for m in _RANGE.finditer(q):
        a = _anchor(q, m.end(), now, bare=True)
        if a is None:
            continue
        join = _RANGE_JOIN[m["op"]].match(q, a.end)
        if join is None:
            continue
        b = _anchor(q, join.end(), now, bare=True)
        if b is None:
            continue
        if b.undated and a.explicit:
            sa = a.fixed
            sb = _earliest(b, sa[0])
        else:
            sb = _resolve(b, now)
            sa = _latest(a, sb[0]) if (a.undated and sb) else _resolve(a, now)
        if sa and sb:
            w = _window(min(sa[0], sb[0]), max(sa[1], sb[1]), q[m.start():b.end], now,
                        a.explicit or b.explicit)
            if w:
                return w
        dead.append((m.start(), b.end))
    return None


def _offset(q: str, now: datetime, dead: list[tuple[int, int]]) -> TimeWindow | None:
    for m in _OFFSET.finditer(q):
        a = _anchor(q, m.end(), now, bare=True)
        span = _resolve(a, now) if a else None
        if span is None:
            continue
        length = _units(_count(m["count"]) if m["count"] else 1, m["unit"])
        if m["op"] == "before":
            w = _window(span[0] - length, span[0], q[m.start():a.end], now, a.explicit)
        else:
            w = _window(span[1], span[1] + length, q[m.start():a.end], now, a.explicit)
        if w:
            return w
        dead.append((m.start(), a.end))
    return None


def _operator(q: str, now: datetime, dead: list[tuple[int, int]]) -> TimeWindow | None:
    for m in _OPERATOR.finditer(q):
        a = _anchor(q, m.end(), now, bare=True)
        span = _resolve(a, now) if a else None
        if span is None:
            continue
        op, phrase = m["op"], q[m.start():a.end]
        if op in ("since", "after"):
            w = _window(span[0] if op == "since" else span[1], now + _TICK, phrase, now)
        elif op in ("until", "till"):
            w = _window(_EPOCH, span[1], phrase, now)
        else:  # before, prior to
            w = _window(_EPOCH, span[0], phrase, now)
        if w:
            return w
        dead.append((m.start(), a.end))
    return None


def _relative(q: str, now: datetime, dead: list[tuple[int, int]]) -> TimeWindow | None:
    for m in _RELATIVE_START.finditer(q):
        a = _anchor(q, m.start(), now, bare=False)
        span = _resolve(a, now) if a and not a.weekday else None
        if span is not None:
            w = _window(*span, q[a.begin:a.end], now, a.explicit)
            if w:
                return w
    return None


def _dates(q: str, now: datetime, dead: list[tuple[int, int]]) -> TimeWindow | None:
    tz = now.tzinfo
    for pattern in _FULL_DATES:  # dates with a year or a day, anywhere
        for m in pattern.finditer(q):
            if m.start() and q[m.start() - 1].isalnum():
                continue
            a = _anchor(q, m.start(), now, bare=False)
            span = _resolve(a, now) if a else None
            if span:
                w = _window(*span, q[a.begin:a.end], now, a.explicit)
                if w:
                    return w
    for m in _CUED_MONTH.finditer(q):
        a = _anchor(q, m.end(), now, bare=True)
        if a is None or not a.undated or a.day is not None:
            continue
        if m["cue"] == "last":  # "last May": the most recent May that has ended
            a = replace(a, ended=True)
        span = _latest(a, now)
        if span:
            w = _window(*span, q[a.begin:a.end], now)
            if w:
                return w
    for m in _CUED_WEEKDAY.finditer(q):  # "on Monday", "last Monday"
        a = _anchor(q, m.end(), now, bare=m.end() > m.start())
        if a is not None and a.fixed is not None:
            w = _window(*a.fixed, q[a.begin:a.end], now)
            if w:
                return w
    for m in _CUED_YEAR.finditer(q):
        y = _A_Y.match(q, m.end())
        if y and _plausible_year(int(y["year"]), now):
            span = _span(tz, int(y["year"]))
            w = _window(*span, y.group(), now, explicit=True) if span else None
            if w:
                return w
    return None


def parse_time_window(query: str, now: datetime) -> TimeWindow | None:
    """The time window a query refers to, or None (see the module notes for the semantics).

    Parameters
    ----------
    query : str
        The query text (any case).
    now : datetime
        The clock's time; windows are computed in its timezone (naive means UTC).

    Returns
    -------
    TimeWindow or None
        ``[start, end)`` with ``start < end`` and the phrase read, lowercased; None when the
        query names no window. Never raises.

    Examples
    --------
    >>> now = datetime(2024, 6, 15, 12, tzinfo=timezone.utc)
    >>> w = parse_time_window("what did we decide yesterday?", now)
    >>> w.start.isoformat(), w.end.isoformat()
    ('2024-06-14T00:00:00+00:00', '2024-06-15T00:00:00+00:00')
    >>> w = parse_time_window("between May and June 2023", now)
    >>> w.start.date().isoformat(), w.end.date().isoformat(), w.phrase
    ('2023-05-01', '2023-07-01', 'between may and june 2023')
    >>> w = parse_time_window("notes since yesterday", now)
    >>> w.start.isoformat(), w.end == now + timedelta(microseconds=1)
    ('2024-06-14T00:00:00+00:00', True)
    >>> parse_time_window("anything after today", now) is None  # empty, not "today"
    True
    >>> w = parse_time_window("what happened last Tuesday", now)  # now is a Saturday
    >>> w.start.date().isoformat(), w.end.date().isoformat()
    ('2024-06-11', '2024-06-12')
    >>> w = parse_time_window("the summer of 2023", now)
    >>> w.start.date().isoformat(), w.end.date().isoformat()
    ('2023-06-01', '2023-09-01')
    >>> parse_time_window("what is listening on port 2049", now) is None
    True
    >>> parse_time_window("how does auth work", now) is None
    True
    """
    if now.tzinfo is None or now.tzinfo.utcoffset(now) is None:
        now = now.replace(tzinfo=timezone.utc)
    q = query.lower()
    dead: list[tuple[int, int]] = []  # constructs read whose window is empty
    for reader in (_range, _offset, _operator, _relative, _dates):
        for begin, end in dead:  # no later reader may read a date inside them
            q = q[:begin] + _MASK * (end - begin) + q[end:]
        try:
            w = reader(q, now, dead)
        except (OverflowError, ValueError):  # arithmetic beyond datetime's years 1..9999
            w = None
        if w is not None:
            return w
    return None


def with_tail(window: TimeWindow | None, days: float) -> TimeWindow | None:
    """``window`` with its end moved ``days`` later (None stays None; 0 days is ``window``).

    An event is often told after it happened ("yesterday I went bowling" in the next
    session): a question about "the week of 9 May" then has its evidence stored a few days
    after the window. ``SurfacingConfig.temporal_window_tail_days`` sets ``days`` for
    ``temporal:windowed``; the phrase records the tail.

    Examples
    --------
    >>> w = TimeWindow(datetime(2024, 1, 1, tzinfo=timezone.utc),
    ...                datetime(2024, 1, 2, tzinfo=timezone.utc), "1 january 2024")
    >>> with_tail(w, 2.5).end.isoformat(), with_tail(w, 2.5).phrase
    ('2024-01-04T12:00:00+00:00', '1 january 2024 (+2.5 days)')
    >>> with_tail(w, 0) is w, with_tail(None, 3) is None
    (True, True)
    >>> with_tail(w, -1)
    Traceback (most recent call last):
    ...
    ValueError: days must be a finite number >= 0, got -1
    """
    if isinstance(days, bool) or not isinstance(days, (int, float)) or not 0 <= days < 1e6:
        raise ValueError(f"days must be a finite number >= 0, got {days!r}")
    if window is None or days == 0:
        return window
    return replace(window, end=window.end + timedelta(days=days),
                   phrase=f"{window.phrase} (+{days:g} days)")
