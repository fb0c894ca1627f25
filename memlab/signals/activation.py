"""Activation (SPEC §2.3): the seed's decaying score and an ACT-R base-level model.

:class:`ActivationState` holds, per item of a workspace, what both models read: the seed's stored
score and its decay anchor, the time of the last reinforcement, and the full access log
(creation included). Reinforcement happens only on explicit retrievals (``get``, ``search``);
assembling a working context never reinforces.
"""

from __future__ import annotations

import math
from typing import Callable, Protocol

import numpy as np

from memlab._registry import register
from memlab._arrays import Growable

__all__ = ["ActivationState", "ActivationModel", "SeedActivation", "ACTRActivation",
           "ACTIVATION_MODELS", "register_activation_model", "ACTIVATION_FLOOR"]

ACTIVATION_FLOOR = 0.05
_LN2 = math.log(2.0)


class ActivationState:
    """Per-item activation columns of one workspace (indices are the workspace's item numbers)."""

    def __init__(self) -> None:
        self.stored = Growable(np.float64, 64)
        # when ``stored`` was last set: the reference the seed's exponential decay runs from
        # (not a session anchor; ``anchor_ts`` is its deprecated name)
        self.decay_ref_ts = Growable(np.float64, 64)
        self.last_boost_ts = Growable(np.float64, 64)  # NaN until the first reinforcement
        self.access_times: dict[int, list[float]] = {}  # only items accessed after creation

    def __len__(self) -> int:
        return self.stored.size

    @property
    def anchor_ts(self) -> Growable:
        """Deprecated name of :attr:`decay_ref_ts` (kept for one release; the journal's and the
        snapshot's key stays ``anchor_ts``)."""
        return self.decay_ref_ts

    @anchor_ts.setter
    def anchor_ts(self, value: Growable) -> None:
        self.decay_ref_ts = value

    def add(self, created_ts: np.ndarray, initial: float) -> None:
        created_ts = np.asarray(created_ts, dtype=np.float64)
        self.stored.extend(np.full(len(created_ts), initial))
        self.decay_ref_ts.extend(created_ts)
        self.last_boost_ts.extend(np.full(len(created_ts), np.nan))

    def seed_score(self, idx: np.ndarray, now_ts: float, half_life_h: float) -> np.ndarray:
        elapsed_h = np.maximum(now_ts - self.decay_ref_ts.view()[idx], 0.0) / 3600.0
        return np.clip(self.stored.view()[idx] * np.exp(-_LN2 * elapsed_h / half_life_h), 0.0, 1.0)

    def reinforce(self, idx: np.ndarray, now_ts: float, *, increment: float,
                  half_life_h: float) -> None:
        """Record an explicit retrieval of each item in ``idx`` at ``now_ts``."""
        idx = np.unique(np.asarray(idx, dtype=np.int64))
        if not len(idx):
            return
        current = self.seed_score(idx, now_ts, half_life_h)
        self.stored.view()[idx] = np.clip(current + increment, 0.0, 1.0)
        self.decay_ref_ts.view()[idx] = now_ts
        self.last_boost_ts.view()[idx] = now_ts
        for i in idx.tolist():
            self.access_times.setdefault(i, []).append(now_ts)


class ActivationModel(Protocol):
    """``model(state, idx, now_ts, created_ts) -> activation in [0, 1]`` per item of ``idx``."""

    def __call__(self, state: ActivationState, idx: np.ndarray, now_ts: float,
                 created_ts: np.ndarray) -> np.ndarray: ...


class SeedActivation:
    """The seed model: ``stored * exp(-ln2 * elapsed_h / half_life_h)`` clamped to [0, 1].

    Examples
    --------
    >>> state = ActivationState(); state.add(np.array([0.0]), 0.5)
    >>> float(SeedActivation(half_life_h=720)(state, np.array([0]), 720 * 3600.0, None)[0])
    0.25
    """

    def __init__(self, half_life_h: float = 720.0) -> None:
        self.half_life_h = half_life_h

    def __call__(self, state, idx, now_ts, created_ts):
        return state.seed_score(idx, now_ts, self.half_life_h)


class ACTRActivation:
    """ACT-R base-level learning mapped to [0, 1].

    ``B = ln(sum_j (t - t_j) ** -d)`` over the item's access times ``t_j`` (creation included),
    ages in seconds (floored at 1 s), then ``activation = 1 / (1 + exp(-(B - threshold) / scale))``.
    With the defaults ``d = 0.5``, ``threshold = -5``, ``scale = 1``, an item touched once about
    6.1 hours ago sits at 0.5; each further access raises it, and it decays as a power law.

    Examples
    --------
    >>> state = ActivationState(); state.add(np.array([0.0]), 0.5)
    >>> round(float(ACTRActivation()(state, np.array([0]), 22026.47, np.array([0.0]))[0]), 3)
    0.5
    """

    def __init__(self, decay: float = 0.5, threshold: float = -5.0, scale: float = 1.0) -> None:
        self.decay, self.threshold, self.scale = decay, threshold, scale

    def base_level(self, state: ActivationState, idx: np.ndarray, now_ts: float,
                   created_ts: np.ndarray) -> np.ndarray:
        out = np.empty(len(idx))
        for pos, (i, created) in enumerate(zip(np.asarray(idx).tolist(),
                                               np.asarray(created_ts).tolist())):
            times = np.array([created, *state.access_times.get(i, ())])
            ages = np.maximum(now_ts - times, 1.0)
            out[pos] = math.log(float(np.sum(ages ** -self.decay)))
        return out

    def __call__(self, state, idx, now_ts, created_ts):
        b = self.base_level(state, idx, now_ts, created_ts)
        return 1.0 / (1.0 + np.exp(-(b - self.threshold) / self.scale))


ACTIVATION_MODELS: dict[str, Callable[..., ActivationModel]] = {
    "seed": lambda cfg: SeedActivation(cfg.activation_half_life_h),
    "actr": lambda cfg: ACTRActivation(cfg.actr_decay, cfg.actr_threshold, cfg.actr_scale),
}


def register_activation_model(name: str, factory: Callable[..., ActivationModel], *,
                              replace: bool = False) -> None:
    """Register ``factory(config) -> ActivationModel`` under ``name`` for ``activation_model=name``;
    a name already registered is refused (ValueError) unless ``replace=True``."""
    register(ACTIVATION_MODELS, name, factory, what="activation model", replace=replace)
