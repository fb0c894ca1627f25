"""Statistics a reviewer accepts: paired comparisons, multiple-comparison correction, effect
sizes with paired-bootstrap intervals, query subsets, and tables printed as papers print them.

Comparisons are *paired*: two configurations (or two sweep points) replayed on the same queries
are compared on their per-query differences, matched by ``qid``. Each row of a
:class:`ComparisonTable` has

* the mean paired difference ``delta`` (the effect, in the measure's own units) with its
  percentile bootstrap interval (queries resampled, the same resample for both sides, seeded);
* Cohen's ``d_z`` (mean difference over the standard deviation of the differences);
* the p-value of the test asked for (``"wilcoxon"``: scipy's signed-rank test; ``"ttest"``: the
  paired t-test), and that p-value adjusted across every row of the table by the correction
  asked for (``"holm"``: Holm–Bonferroni, the default, controls the family-wise error rate;
  ``"bh"``: Benjamini–Hochberg, controls the false discovery rate; ``"none"``);
* a ``warning`` where n is too small for the test (Wilcoxon with fewer than 6 non-zero
  differences cannot reach p < 0.05 two-sided: its smallest exact p is 2/2^5 = 0.0625; a
  t-test needs at least 3 pairs). The same warning is issued as a :class:`SmallSampleWarning`
  (shown on stderr).

The table names its test and correction in every row and in its printed forms
(:meth:`ComparisonTable.to_markdown`, :meth:`ComparisonTable.to_latex`), with significance marks
``*`` (adjusted p < 0.05), ``**`` (< 0.01), ``***`` (< 0.001), led by ``▲``/``▼`` (the compared
mean is higher/lower), and ``†`` (too few pairs for the test: see :data:`SMALL_SAMPLE_CAUSE`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from memlab.surfacing.display import _STYLE, _e, _table_html

__all__ = ["bootstrap_ci", "comparison_html", "holm", "benjamini_hochberg", "adjust_pvalues", "paired_bootstrap_ci", "paired_test",
           "compare_paired", "ComparisonTable", "SmallSampleWarning", "CORRECTIONS", "TESTS",
           "MIN_PAIRS", "query_metadata", "select_queries", "subset_labels", "significance_mark",
           "subset_order", "SMALL_SAMPLE_CAUSE",
           "LOWER_IS_BETTER", "format_table_markdown", "format_table_latex", "interval_text"]

CORRECTIONS = {"holm": "Holm–Bonferroni", "bh": "Benjamini–Hochberg", "none": "uncorrected"}
TESTS = {"wilcoxon": "Wilcoxon signed-rank", "ttest": "paired t-test"}
# the least n (non-zero differences for Wilcoxon, pairs for the t-test) a test is run honestly at
MIN_PAIRS = {"wilcoxon": 6, "ttest": 3}
# what a † mark means, per test
SMALL_SAMPLE_CAUSE = {
    "wilcoxon": "fewer than 6 non-zero paired differences: Wilcoxon cannot reach p<0.05",
    "ttest": "fewer than 3 pairs: too few for the paired t-test"}
LOWER_IS_BETTER = ("Latency", "Tokens")
METADATA_COLUMNS = ("qid", "category", "session_id", "workspace_id", "dataset")


class SmallSampleWarning(UserWarning):
    """n is too small for the test asked for (the comparison is still reported, marked ``†``)."""


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm–Bonferroni adjusted p-values (NaN entries stay NaN and are not counted).

    scipy has Benjamini–Hochberg (``false_discovery_control``) but no Holm, and statsmodels would
    be a new dependency for ten lines: the step-down rule, monotone, capped at 1.

    Examples
    --------
    >>> holm([0.01, 0.04, 0.03]).round(4).tolist()
    [0.03, 0.06, 0.06]
    """
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, math.nan)
    valid = np.flatnonzero(~np.isnan(p))
    m, running = len(valid), 0.0
    for rank, i in enumerate(valid[np.argsort(p[valid], kind="stable")]):
        running = max(running, (m - rank) * p[i])  # step-down: never below an earlier one
        out[i] = min(1.0, running)
    return out


def benjamini_hochberg(pvalues: Sequence[float]) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values (scipy's ``false_discovery_control``); NaN stays NaN.

    Examples
    --------
    >>> benjamini_hochberg([0.01, 0.04, 0.03]).round(4).tolist()
    [0.03, 0.04, 0.04]
    """
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, math.nan)
    valid = ~np.isnan(p)
    if valid.any():
        out[valid] = stats.false_discovery_control(p[valid], method="bh")
    return out


def adjust_pvalues(pvalues: Sequence[float], correction: str = "holm") -> np.ndarray:
    """``pvalues`` adjusted by ``correction`` (one of :data:`CORRECTIONS`)."""
    check_choice("correction", correction, CORRECTIONS)
    if correction == "holm":
        return holm(pvalues)
    if correction == "bh":
        return benjamini_hochberg(pvalues)
    return np.asarray(pvalues, dtype=float).copy()


def check_choice(argument: str, value: Any, choices: Iterable[str]) -> str:
    choices = list(choices)
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{argument} must be one of {choices}, got {value!r}")
    return value


def bootstrap_ci(values: np.ndarray, *, n_boot: int = 1000, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean (NaN, NaN for fewer than two values).

    Examples
    --------
    >>> low, high = bootstrap_ci(np.array([0.0, 1.0, 1.0, 0.0, 1.0]), seed=1)
    >>> 0.0 <= low < 0.6 < high <= 1.0
    True
    """
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(n_boot, len(values)))].mean(axis=1)
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(means, [tail, 100.0 - tail])
    return float(low), float(high)


def paired_bootstrap_ci(a: Sequence[float], b: Sequence[float], *, n_boot: int = 1000,
                        seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of ``mean(a - b)``, pairs resampled together.

    Examples
    --------
    >>> low, high = paired_bootstrap_ci([1, 1, 1, 0, 1, 1], [0, 0, 1, 0, 0, 1], seed=1)
    >>> 0.0 <= low < 0.5 < high <= 1.0
    True
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"a and b must be paired (same length), got {len(a)} and {len(b)}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    return bootstrap_ci(a - b, n_boot=n_boot, seed=seed, level=level)


def paired_test(a: Sequence[float], b: Sequence[float], test: str = "wilcoxon"
                ) -> tuple[float, str | None]:
    """``(p, warning)`` of the paired ``test`` of ``a`` against ``b``.

    ``warning`` is None, or says why n is too small for the test (the p-value is still computed
    where scipy can, so the table shows it, marked). Identical samples give p = 1.

    Examples
    --------
    >>> p, warning = paired_test([1, 1, 1, 1], [0, 0, 0, 0])
    >>> round(p, 3), warning
    (0.125, 'Wilcoxon signed-rank needs >= 6 non-zero differences, got 4')
    """
    check_choice("test", test, TESTS)
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    diff = a - b
    nonzero = int(np.count_nonzero(diff))
    n = nonzero if test == "wilcoxon" else len(diff)
    what = "non-zero differences" if test == "wilcoxon" else "pairs"
    warning = None if n >= MIN_PAIRS[test] else \
        f"{TESTS[test]} needs >= {MIN_PAIRS[test]} {what}, got {n}"
    if len(diff) < 2:
        return math.nan, warning or f"{TESTS[test]} needs >= 2 pairs, got {len(diff)}"
    if nonzero == 0:
        return 1.0, warning
    if test == "wilcoxon":
        return float(stats.wilcoxon(a, b).pvalue), warning
    if np.std(diff) == 0:  # every difference the same, not zero: t is infinite
        return 0.0, warning
    return float(stats.ttest_rel(a, b).pvalue), warning


def significance_mark(p_adjusted: float, warning: Any = None, delta: float | None = None
                      ) -> str:
    """``***`` / ``**`` / ``*`` for adjusted p below 0.001 / 0.01 / 0.05, led by the direction
    of the difference when ``delta`` is given (``▲``: the compared mean is higher, ``▼``:
    lower), and ``†`` for a warning.

    Examples
    --------
    >>> significance_mark(0.004, delta=-0.1), significance_mark(0.2, "few", delta=0.3)
    ('▼**', '†')
    """
    mark = ""
    if isinstance(p_adjusted, (int, float)) and not math.isnan(p_adjusted):
        mark = "***" if p_adjusted < 0.001 else "**" if p_adjusted < 0.01 else \
            "*" if p_adjusted < 0.05 else ""
    if mark and delta is not None and not math.isnan(delta) and delta != 0:
        mark = ("▲" if delta > 0 else "▼") + mark
    if isinstance(warning, str) and warning:
        mark += "†"
    return mark


def interval_text(value: float, low: float, high: float, digits: int = 3) -> str:
    """``"0.512 [0.470, 0.551]"``; the interval left out when it is NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    text = f"{value:.{digits}f}"
    if not (math.isnan(low) or math.isnan(high)):
        text += f" [{low:.{digits}f}, {high:.{digits}f}]"
    return text


@dataclass
class ComparisonTable:
    """Paired comparisons of one table, corrected together (see the module notes).

    ``table`` has one row per (compared name, measure): ``name``, ``reference``, ``measure``,
    ``n``, ``mean``, ``reference_mean``, ``delta``, ``delta_ci_low``, ``delta_ci_high``, ``d_z``,
    ``test``, ``p``, ``correction``, ``p_adjusted``, ``significant``, ``mark``, ``warning``.
    """

    table: pd.DataFrame
    test: str
    correction: str
    level: float = 0.95
    alpha: float = 0.05
    warnings: list[str] = field(default_factory=list)

    def footnote(self) -> str:
        """The sentence under the printed table naming the test, correction and marks."""
        note = (f"Paired {TESTS[self.test]} on per-query differences, p adjusted by "
                f"{CORRECTIONS[self.correction]} across the {len(self.table)} comparisons; "
                f"delta = mean paired difference with its {self.level:.0%} paired-bootstrap "
                f"interval; * p<0.05, ** p<0.01, *** p<0.001 (adjusted), ▲/▼ the compared "
                f"mean higher/lower")
        if self.table["warning"].astype(bool).any():
            note += f"; † {SMALL_SAMPLE_CAUSE[self.test]}"
        return note + "."

    def marks_note(self) -> str:
        """What the significance marks beside a results table mean (the test, the correction
        and the marks; nothing about columns that table does not have)."""
        note = (f"marks: paired {TESTS[self.test]}, p adjusted by {CORRECTIONS[self.correction]}"
                f" across the {len(self.table)} comparisons; * p<0.05, ** p<0.01, *** p<0.001 "
                f"(adjusted), ▲/▼ the mean higher/lower than the reference")
        if self.table["warning"].astype(bool).any():
            note += f"; † {SMALL_SAMPLE_CAUSE[self.test]}"
        return note + "."

    def _printable(self, digits: int) -> pd.DataFrame:
        t = self.table
        return pd.DataFrame({
            "name": t["name"], "vs": t["reference"], "measure": t["measure"], "n": t["n"],
            "delta [CI]": [interval_text(d, lo, hi, digits) for d, lo, hi in
                           zip(t["delta"], t["delta_ci_low"], t["delta_ci_high"])],
            "d_z": [f"{v:.2f}" if not math.isnan(v) else "–" for v in t["d_z"]],
            "p": [_p_text(v) for v in t["p"]],
            f"p ({self.correction})": [_p_text(v) + m for v, m in
                                       zip(t["p_adjusted"], t["mark"])]})

    def to_markdown(self, digits: int = 3) -> str:
        """A Markdown table with significance marks and a footnote naming test and correction."""
        return format_table_markdown(self._printable(digits)) + "\n" + self.footnote() + "\n"

    def to_latex(self, digits: int = 3, caption: str | None = None) -> str:
        """A LaTeX ``tabular`` (booktabs rules) with marks and the footnote as its caption."""
        return format_table_latex(self._printable(digits), caption or self.footnote())

    def _repr_html_(self) -> str:
        return comparison_html(self)

    def __repr__(self) -> str:
        return (f"ComparisonTable({len(self.table)} comparisons, test={self.test!r}, "
                f"correction={self.correction!r}, significant="
                f"{int(self.table['significant'].sum())})")


def _p_text(p: float) -> str:
    if p is None or math.isnan(p):
        return "–"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def compare_paired(per_query: pd.DataFrame, *, key: str, measures: Sequence[str],
                   reference: Any = "best", correction: str = "holm", test: str = "wilcoxon",
                   n_boot: int = 1000, seed: int = 0, level: float = 0.95,
                   alpha: float = 0.05, warn: bool = True) -> ComparisonTable:
    """Every value of ``key`` against ``reference`` on each measure, paired by ``qid``.

    Parameters
    ----------
    per_query : DataFrame
        Long: ``key``, ``qid``, ``measure``, ``value``.
    key : str
        The column naming what is compared (``"name"`` for experiments, ``"point"`` for sweeps).
    reference : "best" or a value of ``key``
        ``"best"``: per measure, the value with the best mean (highest; lowest for latency and
        tokens).
    correction, test : see :data:`CORRECTIONS`, :data:`TESTS`
        The correction applies across every row of the table (all names × measures).

    Examples
    --------
    >>> frame = pd.DataFrame({"name": ["a"] * 3 + ["b"] * 3, "qid": ["q1", "q2", "q3"] * 2,
    ...                       "measure": "MRR", "value": [1.0, 0.5, 1.0, 0.5, 0.5, 0.0]})
    >>> table = compare_paired(frame, key="name", measures=["MRR"], warn=False)
    >>> table.table[["name", "reference", "delta", "warning"]].values.tolist()
    [['b', 'a', -0.5, 'Wilcoxon signed-rank needs >= 6 non-zero differences, got 2']]
    """
    check_choice("correction", correction, CORRECTIONS)
    check_choice("test", test, TESTS)
    if not isinstance(n_boot, int) or isinstance(n_boot, bool) or n_boot < 1:
        raise ValueError(f"n_boot must be an integer >= 1, got {n_boot!r}")
    missing = {key, "qid", "measure", "value"} - set(per_query.columns)
    if missing:
        raise ValueError(f"per_query must have columns {sorted(missing)}")
    names = list(dict.fromkeys(per_query[key]))
    if reference != "best" and reference not in names:
        raise ValueError(f"reference must be 'best' or one of {names}, got {reference!r}")
    rows = []
    for measure in measures:
        wide = per_query[per_query["measure"] == measure].pivot_table(
            index="qid", columns=key, values="value", aggfunc="first")
        if wide.empty:
            raise ValueError(f"measures: no per-query values for {measure!r}")
        means = wide.mean()
        lower = str(measure).split("@")[0] in LOWER_IS_BETTER
        ref = reference if reference != "best" else (means.idxmin() if lower else means.idxmax())
        for name in names:
            if name == ref or name not in wide:
                continue
            pair = wide[[name, ref]].dropna()
            a, b = pair[name].to_numpy(), pair[ref].to_numpy()
            diff = a - b
            p, warning = paired_test(a, b, test)
            low, high = paired_bootstrap_ci(a, b, n_boot=n_boot, seed=seed, level=level)
            sd = float(np.std(diff, ddof=1)) if len(diff) > 1 else math.nan
            d_z = float(diff.mean() / sd) if sd and not math.isnan(sd) else \
                (0.0 if len(diff) > 1 else math.nan)
            rows.append({"name": name, "reference": ref, "measure": str(measure),
                         "n": len(pair), "mean": float(a.mean()) if len(a) else math.nan,
                         "reference_mean": float(b.mean()) if len(b) else math.nan,
                         "delta": float(diff.mean()) if len(diff) else math.nan,
                         "delta_ci_low": low, "delta_ci_high": high, "d_z": d_z,
                         "test": test, "p": p, "warning": warning or ""})
    columns = ["name", "reference", "measure", "n", "mean", "reference_mean", "delta",
               "delta_ci_low", "delta_ci_high", "d_z", "test", "p", "correction", "p_adjusted",
               "significant", "mark", "warning"]
    table = pd.DataFrame(rows, columns=[c for c in columns if c not in
                                        ("correction", "p_adjusted", "significant", "mark")])
    adjusted = adjust_pvalues(table["p"].to_numpy(dtype=float), correction) if len(table) else \
        np.array([])
    table["correction"] = correction
    table["p_adjusted"] = adjusted
    table["significant"] = table["p_adjusted"] < alpha
    table["mark"] = [significance_mark(p, w, d) for p, w, d in zip(
        table["p_adjusted"], table["warning"], table["delta"])]
    table = table[columns]
    notes = [f"{n} vs {r} on {m}: {w}" for n, r, m, w in
             zip(table["name"], table["reference"], table["measure"], table["warning"]) if w]
    if warn:
        for note in notes:
            warnings.warn(note, SmallSampleWarning, stacklevel=2)
    return ComparisonTable(table, test, correction, level, alpha, notes)


# ---------------------------------------------------------------------------- subsets


def query_metadata(trace) -> pd.DataFrame:
    """One row per query of ``trace``: ``qid``, ``category``, ``session_id``, ``workspace_id``
    and ``dataset`` (the trace's ``metadata["dataset"]``, else its name)."""
    dataset = str(trace.metadata.get("dataset", trace.name))
    rows = [{"qid": e.get("qid"), "category": e.get("category"),
             "session_id": e.get("session_id", "s1"),
             "workspace_id": e.get("workspace_id", trace.workspace_id), "dataset": dataset}
            for e in trace.queries]
    return pd.DataFrame(rows, columns=list(METADATA_COLUMNS))


def _as_values(value: Any) -> list:
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value)
    return [value]


def select_queries(metadata: pd.DataFrame, where: Mapping[str, Any] | None,
                   *, argument: str = "where") -> pd.DataFrame:
    """The rows of ``metadata`` matching every ``column: value`` (or list of values) of
    ``where``; ValueError naming the argument for an unknown column or an empty selection.

    Examples
    --------
    >>> meta = pd.DataFrame({"qid": ["a", "b", "c"], "category": [1, 2, 5]})
    >>> select_queries(meta, {"category": [1, 2]})["qid"].tolist()
    ['a', 'b']
    """
    if where is None:
        return metadata
    if not isinstance(where, Mapping) or not where:
        raise ValueError(f"{argument} must be a non-empty mapping of query metadata "
                         f"({list(metadata.columns)}) to values, got {where!r}")
    mask = pd.Series(True, index=metadata.index)
    for column, value in where.items():
        if column not in metadata.columns:
            raise ValueError(f"{argument} names unknown query metadata {column!r}; known: "
                             f"{list(metadata.columns)}")
        wanted = _as_values(value)
        column_values = metadata[column]
        mask &= column_values.isin(wanted) | column_values.astype(str).isin(
            [str(v) for v in wanted])
    selected = metadata[mask]
    if selected.empty:
        raise ValueError(f"{argument} {dict(where)!r} selects no query")
    return selected


def subset_labels(metadata: pd.DataFrame, by: str, *, argument: str = "by") -> pd.Series:
    """``qid`` -> subset label (``"category=1"``) for per-subset tables."""
    if not isinstance(by, str) or by not in metadata.columns or by == "qid":
        raise ValueError(f"{argument} must be one of "
                         f"{[c for c in metadata.columns if c != 'qid']}, got {by!r}")
    if len(metadata) and metadata[by].isna().all():
        raise ValueError(f"{argument} {by!r}: no query of this trace has a {by} (nothing to "
                         f"split by)")
    return pd.Series([f"{by}={v}" for v in metadata[by]], index=metadata["qid"].to_numpy())


def subset_order(labels: Iterable[str]) -> list[str]:
    """The distinct subset labels in a stable order: by value, numbers numerically
    (``category=2`` before ``category=10``), whatever order the queries came in.

    Examples
    --------
    >>> subset_order(["category=10", "category=2", "category=2", "session_id=b"])
    ['category=2', 'category=10', 'session_id=b']
    """
    def key(label: str):
        field, _, value = str(label).partition("=")
        try:
            return (field, 0, float(value), "")
        except ValueError:
            return (field, 1, 0.0, value)
    return sorted(dict.fromkeys(labels), key=key)


# ---------------------------------------------------------------------------- printed tables


def format_table_markdown(frame: pd.DataFrame) -> str:
    """A pipe table of ``frame``'s cells as text (no tabulate dependency)."""
    cells = [[str(c) for c in frame.columns]] + [[_cell(v) for v in row]
                                                  for row in frame.itertuples(index=False)]
    lines = ["| " + " | ".join(cells[0]) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(row) + " |" for row in cells[1:]]
    return "\n".join(lines) + "\n"


def format_table_latex(frame: pd.DataFrame, caption: str | None = None) -> str:
    """A booktabs ``table`` of ``frame``'s cells as text.

    Written by hand: pandas' ``to_latex`` needs jinja2, which memlab does not depend on.
    """
    spec = "l" * len(frame.columns)
    lines = [r"\begin{table}[t]", r"\centering", rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
             " & ".join(_latex_cell(str(c)) for c in frame.columns) + r" \\", r"\midrule"]
    for row in frame.itertuples(index=False):
        lines.append(" & ".join(_latex_cell(_cell(v)) for v in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    if caption:
        lines.append(rf"\caption{{{_latex_cell(caption)}}}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "–" if math.isnan(value) else f"{value:.3f}"
    return str(value)


def _latex_cell(text: str) -> str:
    out = []
    for ch in text:
        out.append({"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#",
                    "$": r"\$", "{": r"\{", "}": r"\}", "†": r"$^\dagger$", "–": "--",
                    "<": r"$<$", ">": r"$>$", "~": r"\textasciitilde{}",
                    "^": r"\textasciicircum{}"}.get(ch, ch))
    return "".join(out)


def comparison_html(table: ComparisonTable, style: bool = True) -> str:
    """A comparison table as HTML, with its footnote (test, correction, marks)."""
    frame = table._printable(3)
    return (_STYLE if style else "") + _table_html(frame) + \
        f"<div class='memlab-note'>{_e(table.footnote())}</div>"
