"""Injectable clocks.

Every time-dependent rule in memlab (recency, activation decay, freshness, pin TTL, history
timestamps) reads a :class:`Clock` instead of calling ``datetime.now()``, so a replay driven by a
:class:`ManualClock` is deterministic and independent of wall time.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "SystemClock", "ManualClock", "as_utc"]


def as_utc(value: datetime, *, name: str = "datetime") -> datetime:
    """Return ``value`` as a timezone-aware UTC datetime (naive input is taken as UTC).

    Raises
    ------
    ValueError
        If ``value`` is not a :class:`datetime.datetime`.

    Examples
    --------
    >>> as_utc(datetime(2024, 1, 1)).isoformat()
    '2024-01-01T00:00:00+00:00'
    """
    if not isinstance(value, datetime):
        raise ValueError(f"{name} must be a datetime, got {value!r}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


@runtime_checkable
class Clock(Protocol):
    """Anything with ``now() -> datetime`` (timezone-aware UTC)."""

    def now(self) -> datetime: ...


class SystemClock:
    """The wall clock, in UTC.

    Examples
    --------
    >>> SystemClock().now().tzinfo is timezone.utc
    True
    """

    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def __repr__(self) -> str:
        return "SystemClock()"


class ManualClock:
    """A clock that moves only when told to; what tests and replays use.

    Parameters
    ----------
    start : datetime
        The initial time (naive is taken as UTC).

    Examples
    --------
    >>> clock = ManualClock(datetime(2024, 1, 1, tzinfo=timezone.utc))
    >>> clock.advance(hours=25).isoformat()
    '2024-01-02T01:00:00+00:00'
    >>> clock.set(datetime(2024, 3, 1)).month
    3
    """

    def __init__(self, start: datetime) -> None:
        self._now = as_utc(start, name="start")

    def now(self) -> datetime:
        return self._now

    def advance(self, *, days: float = 0.0, hours: float = 0.0, minutes: float = 0.0,
                seconds: float = 0.0) -> datetime:
        """Move the clock forward and return the new time. Moving backwards raises ValueError."""
        delta = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
        if delta < timedelta(0):
            raise ValueError(f"advance must not move the clock backwards, got {delta!r}")
        self._now = self._now + delta
        return self._now

    def set(self, value: datetime) -> datetime:
        """Set the clock to ``value`` (any direction) and return it."""
        self._now = as_utc(value, name="value")
        return self._now

    def __repr__(self) -> str:
        return f"ManualClock({self._now.isoformat()})"
