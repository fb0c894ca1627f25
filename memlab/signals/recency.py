"""Recency and freshness (SPEC §2.2), vectorised over item timestamps (epoch seconds)."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["recency", "freshness_boost", "tau_from_half_life", "NO_TIMESTAMP_RECENCY"]

NO_TIMESTAMP_RECENCY = 0.5


def tau_from_half_life(half_life_h: float) -> float:
    """The e-folding time equal to a half-life: ``tau = half_life / ln 2``.

    The seed called its 24 h e-folding time a "half-life"; memlab names it ``tau_h`` and accepts a
    true half-life through this conversion.

    Examples
    --------
    >>> round(tau_from_half_life(24.0), 3)
    34.625
    """
    if not (isinstance(half_life_h, (int, float)) and math.isfinite(half_life_h) and half_life_h > 0):
        raise ValueError(f"half_life_h must be a finite number > 0, got {half_life_h!r}")
    return float(half_life_h) / math.log(2.0)


def recency(reference_ts: np.ndarray, now_ts: float, tau_h: float = 24.0) -> np.ndarray:
    """``exp(-age_h / tau_h)``; a NaN reference (no timestamp) gives 0.5; future ages count as 0.

    Examples
    --------
    >>> recency(np.array([0.0, -86400.0, np.nan]), 0.0).round(4).tolist()
    [1.0, 0.3679, 0.5]
    """
    age_h = np.maximum(now_ts - np.asarray(reference_ts, dtype=np.float64), 0.0) / 3600.0
    out = np.exp(-age_h / tau_h)
    return np.where(np.isnan(out), NO_TIMESTAMP_RECENCY, out)


def freshness_boost(created_ts: np.ndarray, now_ts: float, *, weight: float = 0.2,
                    window_h: float = 24.0) -> np.ndarray:
    """``(1 - age_h / window_h) * weight`` for items younger than ``window_h``, else 0.

    Examples
    --------
    >>> freshness_boost(np.array([0.0, -6 * 3600.0, -30 * 3600.0]), 0.0).round(3).tolist()
    [0.2, 0.15, 0.0]
    """
    age_h = np.maximum(now_ts - np.asarray(created_ts, dtype=np.float64), 0.0) / 3600.0
    return np.where(age_h < window_h, (1.0 - age_h / window_h) * weight, 0.0)
