"""Time-window parsing: the golden table, issue 13's defects, and the parser's invariants."""

import csv
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlab.surfacing.router import route
from memlab.surfacing.timewindow import YEARS_AHEAD, parse_time_window
from memlab.text import CapitalisedSpanDetector

TABLE = Path(__file__).parent / "data" / "time_windows.csv"
NOW = datetime(2024, 6, 15, 12, tzinfo=timezone.utc)  # a Saturday
TICK = timedelta(microseconds=1)


def _rows():
    with TABLE.open(newline="") as f:
        rows = list(csv.DictReader(f))
    return [pytest.param(r, id=r["query"] if r["now"] == NOW.isoformat()
                         else f"{r['query']} @ {r['now']}") for r in rows]


ROWS = _rows()


def _window(query, now=NOW):
    w = parse_time_window(query, now)
    return None if w is None else (w.start, w.end)


def _utc(*args):
    return datetime(*args, tzinfo=timezone.utc)


def test_golden_table_is_large_and_varied():
    rows = [p.values[0] for p in ROWS]
    assert len(rows) >= 60
    assert len({(r["query"], r["now"]) for r in rows}) == len(rows)
    assert sum(r["start"] == "none" for r in rows) >= 15  # numbers that are not years, verbs…
    assert len({r["now"] for r in rows}) >= 5  # other clocks, another timezone


@pytest.mark.parametrize("row", ROWS)
def test_golden_table(row):
    now = datetime.fromisoformat(row["now"])
    w = parse_time_window(row["query"], now)
    if row["start"] == "none":
        assert w is None, f"{row['query']!r} should have no window, got {w}"
        return
    assert w is not None, f"{row['query']!r} should have a window"
    got = (w.start.isoformat(), w.end.isoformat(), w.phrase)
    assert got == (row["start"], row["end"], row["phrase"])
    assert w.start.utcoffset() == now.utcoffset()  # the clock's timezone


# --- issue 13, item 5: one regression test per reproduced defect -------------------------------

def test_issue13_between_months_of_one_year():
    assert _window("between May and June 2023") == (_utc(2023, 5, 1), _utc(2023, 7, 1))


def test_issue13_between_months_of_an_earlier_year():
    assert _window("between March and April 2022") == (_utc(2022, 3, 1), _utc(2022, 5, 1))


def test_issue13_month_inside_a_word_is_not_a_month():
    assert parse_time_window("notes on the trojan 2023 incident", NOW) is None
    assert parse_time_window("the trojan incident", NOW) is None


def test_issue13_port_number_is_not_a_year():
    assert parse_time_window("what is listening on port 2049", NOW) is None
    assert parse_time_window("we now have 2049 users", NOW) is None


def test_issue13_since_yesterday_runs_to_now():
    assert _window("since yesterday") == (_utc(2024, 6, 14), NOW + TICK)


# --- how the router and the strategy see it ----------------------------------------------------

@pytest.mark.parametrize("query, reason", [
    ("anything since yesterday", "time_window:since yesterday"),
    ("what happened between May and June 2023?", "time_window:between may and june 2023"),
    ("what did we decide on 8 May 2023", "time_window:8 may 2023"),
])
def test_router_reason_names_the_phrase(query, reason):
    d = route(query, ("temporal",), now=NOW, detector=CapitalisedSpanDetector())
    assert (d.strategy.value, d.reasons) == ("temporal:windowed", (reason,))


@pytest.mark.parametrize("query", ["what is listening on port 2049",
                                   "notes on the trojan 2023 incident"])
def test_router_does_not_route_non_dates_to_temporal(query):
    d = route(query, ("temporal",), now=NOW, detector=CapitalisedSpanDetector())
    assert d.strategy.value != "temporal:windowed"


def test_naive_clock_is_utc():
    assert _window("yesterday", NOW.replace(tzinfo=None)) == (_utc(2024, 6, 14), _utc(2024, 6, 15))


def test_window_membership_is_half_open():
    import numpy as np
    w = parse_time_window("on 3 May 2024", NOW)
    ts = np.array([w.start.timestamp() - 1, w.start.timestamp(), w.end.timestamp() - 1e-3,
                   w.end.timestamp()])
    assert w.contains_ts(ts).tolist() == [False, True, True, False]


# --- the invariant, by property -----------------------------------------------------------------

_WORDS = ["between", "and", "from", "to", "since", "after", "before", "until", "prior to", "in",
          "on", "of", "the", "last", "past", "this", "ago", "yesterday", "today", "now",
          "weekend", "week", "weeks", "day", "days", "month", "months", "year", "years", "hours",
          "a", "two", "couple of", "may", "june", "sept", "dec.", "february", "jan", "march",
          "3rd", "29", "31", "1", "12", "2023", "2024", "1999", "2049", "9999", "0001",
          "999999", "2023-02-29", "2024-05-08", "2024/13/01", ",", "-", "?", "summer", "early",
          "port", "users", "version", "2.2023", "trojan", "monday", "tuesday", "sunday", "q1",
          "q4", "quarter", "first", "second", "week of", "mid-", "late", "winter", "fall",
          "spring", "boot", "previous", "this past", "before last", "end of"]
_queries = st.one_of(
    st.lists(st.sampled_from(_WORDS), max_size=8).map(" ".join),
    st.text(max_size=40),
    st.tuples(st.text(max_size=10), st.lists(st.sampled_from(_WORDS), max_size=6).map(" ".join))
    .map(" ".join),
)
_clocks = st.builds(
    lambda dt, minutes: dt.replace(tzinfo=timezone(timedelta(minutes=minutes))),
    st.datetimes(min_value=datetime(1901, 1, 1), max_value=datetime(2199, 12, 31)),
    st.integers(-12 * 60, 14 * 60).map(lambda m: m - m % 15))


@settings(max_examples=200, deadline=None)
@given(_queries, _clocks)
def test_parser_never_raises_and_windows_are_sound(query, now):
    """Never raises; None or ``start < end``; never starts after ``now`` without an explicit year.

    The only way to a window that starts in the future is a four-digit year the query writes
    out, at least the clock's year and (for a bare year) at most ``YEARS_AHEAD`` after it:
    year-less dates are their most recent occurrence, relative expressions look back.
    """
    w = parse_time_window(query, now)
    if w is None:
        return
    assert w.start < w.end
    assert w.start.tzinfo is not None and w.end.tzinfo is not None
    assert w.phrase and w.phrase in query.lower()
    if w.start > now:
        years = [int(y) for y in re.findall(r"(?<!\d)\d{4}(?!\d)", query)]
        assert any(y >= now.year for y in years), (query, w)
        assert w.start.year <= max(years) + 1
    if w.phrase.startswith(("since ", "after ")):  # open windows run to now, inclusive
        assert w.end == now + TICK


@settings(max_examples=200, deadline=None)
@given(st.integers(1000, 9999), _clocks, st.sampled_from(["port", "users", "v", "top", "",
                                                           "trojan", "error code"]))
def test_numbers_without_a_cue_are_not_years(number, now, noun):
    for query in (f"{noun} {number}", f"{number} {noun}"):
        assert parse_time_window(query, now) is None, query


@settings(max_examples=200, deadline=None)
@given(st.integers(1000, 9999), _clocks)
def test_cued_years_only_in_the_plausible_range(year, now):
    w = parse_time_window(f"in {year}", now)
    if now.year - 100 <= year <= now.year + YEARS_AHEAD:
        assert w is not None and w.start.year == year and w.end.year == year + 1
    else:
        assert w is None


# --- review of fix 13: one regression test per finding ------------------------------------------

@pytest.mark.parametrize("query", ["after today", "after June 2024", "since 2024-06-16",
                                   "since December 2024", "after 2024", "after this week",
                                   "the day after today", "two days after today", "before 1960",
                                   "since the summer of 2030", "after Q3 2024"])
def test_review_after_future_boundary_is_no_window(query):
    """An operator whose window is empty gives no window, never its bare operand's window."""
    assert parse_time_window(query, NOW) is None


def test_review_empty_operator_does_not_hide_another_window():
    assert _window("since 2030, or else yesterday") == (_utc(2024, 6, 14), _utc(2024, 6, 15))


@pytest.mark.parametrize("query, day", [
    ("what happened last Tuesday", 11), ("last Saturday", 8), ("the past Friday", 14),
    ("meetings on Monday", 10), ("on Saturday", 15), ("this Wednesday", 12),
    ("this past Monday", 10),
])
def test_review_weekday_names(query, day):
    assert _window(query) == (_utc(2024, 6, day), _utc(2024, 6, day + 1))


@pytest.mark.parametrize("query, start, end", [
    ("in Q1 2024", _utc(2024, 1, 1), _utc(2024, 4, 1)),
    ("Q4 2023 numbers", _utc(2023, 10, 1), _utc(2024, 1, 1)),
    ("in Q3", _utc(2023, 7, 1), _utc(2023, 10, 1)),
    ("in the second quarter", _utc(2024, 4, 1), _utc(2024, 7, 1)),
    ("the third quarter of 2022", _utc(2022, 7, 1), _utc(2022, 10, 1)),
])
def test_review_quarters(query, start, end):
    assert _window(query) == (start, end)


def test_review_week_before_last():
    assert _window("the week before last") == (NOW - timedelta(days=14), NOW - timedelta(days=7))


@pytest.mark.parametrize("query, start, end", [
    ("the summer of 2023", _utc(2023, 6, 1), _utc(2023, 9, 1)),
    ("summer 2023", _utc(2023, 6, 1), _utc(2023, 9, 1)),
    ("winter 2024", _utc(2023, 12, 1), _utc(2024, 3, 1)),
    ("in the fall", _utc(2023, 9, 1), _utc(2023, 12, 1)),
    ("last summer", _utc(2023, 6, 1), _utc(2023, 9, 1)),
    ("this summer", _utc(2024, 6, 1), _utc(2024, 9, 1)),
])
def test_review_seasons_are_their_months(query, start, end):
    assert _window(query) == (start, end)


@pytest.mark.parametrize("query, start, end", [
    ("the first week of May", _utc(2024, 5, 1), _utc(2024, 5, 8)),
    ("the second week of May 2023", _utc(2023, 5, 8), _utc(2023, 5, 15)),
    ("the last week of February 2024", _utc(2024, 2, 23), _utc(2024, 3, 1)),
    ("the last week of June", _utc(2023, 6, 24), _utc(2023, 7, 1)),
])
def test_review_week_of_a_month(query, start, end):
    assert _window(query) == (start, end)


@pytest.mark.parametrize("query, start, end", [
    ("in mid-2023", _utc(2023, 5, 1), _utc(2023, 9, 1)),
    ("early 2023", _utc(2023, 1, 1), _utc(2023, 5, 1)),
    ("late 2022", _utc(2022, 9, 1), _utc(2023, 1, 1)),
    ("since early 2023", _utc(2023, 1, 1), NOW + TICK),
])
def test_review_parts_of_a_year(query, start, end):
    assert _window(query) == (start, end)


def test_review_written_date_wins_over_a_weekday():
    """LoCoMo: "last Friday on 23 January, 2022" is about that date, not the clock's last Friday."""
    q = "What did Joanna just finish last Friday on 23 January, 2022?"
    assert _window(q, _utc(2022, 11, 11)) == (_utc(2022, 1, 23), _utc(2022, 1, 24))
