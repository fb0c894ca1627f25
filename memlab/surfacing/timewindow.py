"""Deterministic time-window parsing for ``temporal:windowed`` and the router's temporal rule.

Understands, relative to the clock's ``now`` (UTC): ``today``, ``yesterday``, ``this week|month|year``,
``last|past week|month|year``, ``last|past N hours|days|weeks|months``, ``N days ago``,
``in 2023``, ``in May`` / ``in May 2023``, ``on 8 May 2023`` / ``May 8, 2023`` / ``2023-05-08``,
``since <date>``, ``before <date>`` and ``between <date> and <date>``. Months are 30 days in
relative expressions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

__all__ = ["TimeWindow", "parse_time_window"]

_MONTHS = {m: i + 1 for i, m in enumerate(
    "january february march april may june july august september october november december".split())}
_MONTHS.update({m[:3]: i for m, i in list(_MONTHS.items())})
_MONTHS["sept"] = 9
_MONTH_RE = r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
_UNIT_H = {"hour": 1, "day": 24, "week": 24 * 7, "month": 24 * 30, "year": 24 * 365}
_DAY = timedelta(days=1)


@dataclass(frozen=True)
class TimeWindow:
    """``[start, end)`` in UTC and the phrase it was parsed from."""

    start: datetime
    end: datetime
    phrase: str

    def contains_ts(self, ts):
        """Vectorised membership for epoch seconds."""
        return (ts >= self.start.timestamp()) & (ts < self.end.timestamp())


def _midnight(dt: datetime) -> datetime:
    return dt.replace(hour=0, minute=0, second=0, microsecond=0)


def _month_span(year: int, month: int) -> tuple[datetime, datetime]:
    start = datetime(year, month, 1, tzinfo=timezone.utc)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=timezone.utc)
    return start, end


# A date phrase → (start, end) of that day/month/year.
_DATE_PATTERNS: list[tuple[re.Pattern, str]] = [
    (re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})"), "ymd"),
    (re.compile(r"(\d{1,2})(?:st|nd|rd|th)?\s+" + _MONTH_RE + r",?\s+(\d{4})"), "dmy"),
    (re.compile(_MONTH_RE + r"\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})"), "mdy"),
    (re.compile(_MONTH_RE + r",?\s+(\d{4})"), "my"),
    (re.compile(r"(?<!\d)((?:19|20)\d{2})(?!\d)"), "y"),
    (re.compile(r"\b" + _MONTH_RE + r"\b"), "m"),
]


def _parse_date(text: str, now: datetime) -> tuple[datetime, datetime, str] | None:
    for pattern, kind in _DATE_PATTERNS:
        m = pattern.search(text)
        if not m:
            continue
        g = m.groups()
        try:
            if kind == "ymd":
                start = datetime(int(g[0]), int(g[1]), int(g[2]), tzinfo=timezone.utc)
                return start, start + _DAY, m.group()
            if kind == "dmy":
                start = datetime(int(g[2]), _MONTHS[g[1][:3]],
                                 int(g[0]), tzinfo=timezone.utc)
                return start, start + _DAY, m.group()
            if kind == "mdy":
                start = datetime(int(g[2]), _MONTHS[g[0][:3]], int(g[1]), tzinfo=timezone.utc)
                return start, start + _DAY, m.group()
            if kind == "my":
                return (*_month_span(int(g[1]), _MONTHS[g[0][:3]]), m.group())
            if kind == "y":
                year = int(g[0])
                return (datetime(year, 1, 1, tzinfo=timezone.utc),
                        datetime(year + 1, 1, 1, tzinfo=timezone.utc), m.group())
            month = _MONTHS[g[0][:3]]
            year = now.year if month <= now.month else now.year - 1  # the latest such month
            return (*_month_span(year, month), m.group())
        except ValueError:  # e.g. 31 February: not a date, try the next reading
            continue
    return None


def parse_time_window(query: str, now: datetime) -> TimeWindow | None:
    """The time window a query refers to, or None.

    Examples
    --------
    >>> now = datetime(2024, 6, 15, 12, tzinfo=timezone.utc)
    >>> w = parse_time_window("what did we decide yesterday?", now)
    >>> w.start.isoformat(), w.end.isoformat()
    ('2024-06-14T00:00:00+00:00', '2024-06-15T00:00:00+00:00')
    >>> w = parse_time_window("notes from May 2023", now); (w.start.month, w.end.month)
    (5, 6)
    >>> parse_time_window("how does auth work", now) is None
    True
    """
    q = query.lower()
    m = re.search(r"\bbetween\s+(.+?)\s+and\s+(.+)", q)
    if m:
        a, b = _parse_date(m.group(1), now), _parse_date(m.group(2), now)
        if a and b:
            return TimeWindow(min(a[0], b[0]), max(a[1], b[1]), m.group().strip())
    m = re.search(r"\b(since|after|before)\s+(.+)", q)
    if m:
        d = _parse_date(m.group(2), now)
        if d:
            if m.group(1) == "before":
                return TimeWindow(datetime(1970, 1, 1, tzinfo=timezone.utc), d[0], m.group().strip())
            start = d[0] if m.group(1) == "since" else d[1]
            return TimeWindow(start, now, m.group().strip())
    if re.search(r"\btoday\b", q):
        return TimeWindow(_midnight(now), now + timedelta(microseconds=1), "today")
    if re.search(r"\byesterday\b", q):
        return TimeWindow(_midnight(now) - _DAY, _midnight(now), "yesterday")
    m = re.search(r"\b(\d+)\s+(hour|day|week|month|year)s?\s+ago\b", q)
    if m:
        centre = now - timedelta(hours=int(m.group(1)) * _UNIT_H[m.group(2)])
        half = timedelta(hours=_UNIT_H[m.group(2)] / 2)
        return TimeWindow(centre - half, centre + half, m.group())
    m = re.search(r"\b(?:last|past)\s+(\d+)\s+(hour|day|week|month|year)s?\b", q)
    if m:
        return TimeWindow(now - timedelta(hours=int(m.group(1)) * _UNIT_H[m.group(2)]), now,
                          m.group())
    m = re.search(r"\b(last|past|this)\s+(week|month|year)\b", q)
    if m:
        unit = m.group(2)
        if m.group(1) == "this":
            if unit == "week":
                start = _midnight(now) - timedelta(days=now.weekday())
            elif unit == "month":
                start = _midnight(now).replace(day=1)
            else:
                start = _midnight(now).replace(month=1, day=1)
        else:
            start = now - timedelta(hours=_UNIT_H[unit])
        return TimeWindow(start, now, m.group())
    m = re.search(r"\b(?:in|on|during|from|of)\s+(.+)", q)
    if m:
        d = _parse_date(m.group(1), now)
        if d:
            return TimeWindow(d[0], d[1], d[2])
    d = _parse_date(q, now)
    if d and d[2] and not re.fullmatch(r"may", d[2]):  # bare "may" is usually the verb
        return TimeWindow(d[0], d[1], d[2])
    return None
