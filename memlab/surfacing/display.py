"""Rich display of the surfacing layer's own objects: ``SurfacingConfig`` (its difference from a
reference recipe) and ``ContextRecord`` (the candidates with score bars and drop reasons).

The classes delegate here with one line; :mod:`memlab.harness.display` re-exports these and adds
the harness's results. Plain HTML (pandas' ``DataFrame.to_html`` and inline-styled ``<div>``
bars): no jinja2, no widgets. This module imports nothing of memlab's, so the classes it renders
may import it.

Examples
--------
>>> from memlab import DEFAULT
>>> config_diff(DEFAULT.replace(centrality_weight=0.25), DEFAULT)
{'centrality_weight': (0.5, 0.25)}
>>> 'width:60px' in score_bar(0.5, 1.0)
True
"""

from __future__ import annotations

import html
import math
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["config_diff", "config_html", "config_repr", "context_record_html",
           "context_record_repr", "score_bar"]

_STYLE = ("<style>.memlab-t td,.memlab-t th{padding:2px 6px;text-align:left}"
          ".memlab-note{color:#555;font-size:90%}</style>")
# the memlab palette (Okabe–Ito, colour-blind safe); kept in step with plots.PALETTE
_BAR_SURFACED, _BAR_DROPPED = "#0072B2", "#BBBBBB"


def _e(value: Any) -> str:
    return html.escape(str(value))


def score_bar(value: float, top: float, surfaced: bool = True, width_px: int = 120) -> str:
    """An inline HTML bar of ``value`` on a scale whose full width is ``top``.

    Examples
    --------
    >>> 'width:60px' in score_bar(0.5, 1.0)
    True
    """
    fraction = 0.0 if not top or not np.isfinite(value) else max(0.0, min(1.0, value / top))
    colour = _BAR_SURFACED if surfaced else _BAR_DROPPED
    return (f'<div style="display:inline-block;width:{round(fraction * width_px)}px;height:10px;'
            f'background:{colour};vertical-align:middle"></div> '
            f'<span style="font-family:monospace">{value:.3f}</span>')


def _table_html(frame: pd.DataFrame, escape: bool = True) -> str:
    return frame.to_html(index=False, escape=escape, classes="memlab-t", border=0,
                         na_rep="–", float_format=lambda v: f"{v:.3f}")


# ---------------------------------------------------------------------------- SurfacingConfig


def config_diff(config, reference) -> dict[str, tuple[Any, Any]]:
    """``field -> (value in reference, value in config)`` for every field that differs (nested
    stages as ``"ppr.alpha"``)."""
    mine, theirs = _flat(config.to_dict()), _flat(reference.to_dict())
    diff = {key: (theirs.get(key), mine.get(key)) for key in sorted(set(mine) | set(theirs))
            if mine.get(key) != theirs.get(key)}
    for stage in ("dense", "ppr", "spreading"):  # a stage on one side only: one entry
        a, b = getattr(reference, stage), getattr(config, stage)
        if (a is None) != (b is None):
            diff = {k: v for k, v in diff.items() if not k.startswith(stage + ".")}
            diff[stage] = (None if a is None else "configured", None if b is None
                           else "configured")
    return dict(sorted(diff.items()))


def _flat(data: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("spreading", "ppr", "dense") and isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _stage_fields(config, diff: dict) -> dict:
    """A stage configured here but not in the reference (``"dense": (None, "configured")``)
    shown by its fields (``dense.weight`` …), so a repr says what the stage is."""
    out, stages = {}, {}
    for key, value in diff.items():
        stage = getattr(config, key, None) if key in ("dense", "ppr", "spreading") else None
        if value[1] == "configured" and stage is not None:
            for name, v in stage.to_dict().items() if hasattr(stage, "to_dict") else \
                    vars(stage).items():
                if v is not None:
                    stages[f"{key}.{name}"] = (None, v)
        else:
            out[key] = value
    return {**out, **stages}  # the plain fields first, then the stage's


def config_repr(config, reference) -> str:
    """One line: the recipe's name and its fields that differ from ``reference`` (DEFAULT)."""
    diff = config_diff(config, reference)
    if not diff:
        return f"SurfacingConfig({config.name!r}, = DEFAULT)"
    diff = _stage_fields(config, diff)
    shown = ", ".join(f"{k}={v[1]!r}" for k, v in list(diff.items())[:6])
    more = f", … {len(diff) - 6} more" if len(diff) > 6 else ""
    return f"SurfacingConfig({config.name!r}, vs DEFAULT: {shown}{more})"


def config_html(config, reference) -> str:
    """The fields that differ from ``reference`` (DEFAULT) as an HTML table."""
    diff = config_diff(config, reference)
    head = f"<b>SurfacingConfig</b> <code>{_e(config.name)}</code>"
    if not diff:
        return f"{_STYLE}<div>{head}: identical to <code>DEFAULT</code></div>"
    frame = pd.DataFrame([{"field": k, "DEFAULT": _short(a), "this": _short(b)}
                          for k, (a, b) in diff.items()])
    return (f"{_STYLE}<div>{head}: {len(diff)} field(s) differ from <code>DEFAULT</code>"
            f"{_table_html(frame)}</div>")


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


# ---------------------------------------------------------------------------- ContextRecord


def context_record_repr(record) -> str:
    return (f"ContextRecord({record.query!r:.50}, strategy={record.strategy_used!r}, "
            f"surfaced={len(record.surfaced_ids)}/{len(record.candidates.get('item_id', []))} "
            f"candidates, tokens={record.tokens_used}, "
            f"{record.timings_ms.get('total', math.nan):.1f} ms)")


def _candidate_rows(frame: pd.DataFrame, top: int, labels: dict | None = None) -> pd.DataFrame:
    frame = frame.sort_values("rank").head(top)
    best = float(frame["score"].max()) if len(frame) else 1.0
    out = pd.DataFrame({
        "rank": frame["rank"].to_numpy(),
        "item": [_e((labels or {}).get(i, i)) for i in frame["item_id"]],
        "surfaced": ["✓" if s else "" for s in frame["surfaced"]],
        "score": [score_bar(float(v), best, bool(s)) for v, s in
                  zip(frame["score"], frame["surfaced"])],
        "drop reason": [_e(r) if isinstance(r, str) and r else "" for r in
                        frame["drop_reason"]]})
    if "gold" in frame:
        out.insert(2, "gold", ["★" if g > 0 else "" for g in frame["gold"]])
    return out


def context_record_html(record, top: int = 15) -> str:
    frame = pd.DataFrame(record.candidates)
    head = (f"<b>ContextRecord</b> “{_e(record.query)}” → <code>{_e(record.strategy_used)}"
            f"</code> ({_e(record.recipe)}, {_e(record.mode)}), {len(record.surfaced_ids)} "
            f"surfaced of {len(frame)} candidates, {record.tokens_used} tokens, "
            f"{record.timings_ms.get('total', math.nan):.1f} ms")
    if frame.empty:
        return f"{_STYLE}<div>{head}</div>"
    rows = _candidate_rows(frame, top, getattr(record, "labels", None))
    more = f"<div class='memlab-note'>top {top} of {len(frame)} shown</div>" \
        if len(frame) > top else ""
    return f"{_STYLE}<div>{head}{_table_html(rows, escape=False)}{more}</div>"


