"""A seeded synthetic item generator for scale tests and benchmarks.

Items are short texts over a Zipf-distributed vocabulary, spread over a time span, with a share of
``procedural`` items. The same seed always gives the same items.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np

__all__ = ["synthetic_items", "synthetic_vocabulary", "power_law_edges"]


_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def synthetic_vocabulary(size: int) -> list[str]:
    """``size`` distinct pronounceable words of two or more syllables (deterministic).

    Examples
    --------
    >>> synthetic_vocabulary(3)
    ['baba', 'babe', 'babi']
    """
    words = []
    for n in range(size):
        syllables = []
        while True:
            syllables.append(_SYLLABLES[n % len(_SYLLABLES)])
            n //= len(_SYLLABLES)
            if n == 0:
                break
        syllables += ["ba"] * (2 - len(syllables))
        words.append("".join(reversed(syllables)))
    return words


def synthetic_items(n: int, *, seed: int = 0, vocabulary: int = 20_000, words: tuple[int, int] = (8, 24),
                    start: datetime = datetime(2024, 1, 1, tzinfo=timezone.utc),
                    span_days: float = 90.0, procedural_share: float = 0.1,
                    zipf_a: float = 1.1) -> list[dict]:
    """``n`` item dicts (``content``, ``memory_type``, ``created_at``) ready for ``Memory.add_many``.

    Examples
    --------
    >>> items = synthetic_items(3, seed=1)
    >>> len(items), items == synthetic_items(3, seed=1)
    (3, True)
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be an int >= 0, got {n!r}")
    rng = np.random.default_rng(seed)
    vocab = np.array(synthetic_vocabulary(vocabulary))
    lengths = rng.integers(words[0], words[1] + 1, size=n)
    ranks = rng.zipf(zipf_a, size=int(lengths.sum())) - 1
    ranks = np.minimum(ranks, vocabulary - 1)  # the Zipf tail beyond the vocabulary: rarest word
    perm = rng.permutation(vocabulary)  # which word gets which frequency rank
    tokens = vocab[perm[ranks]]
    offsets = np.r_[0, np.cumsum(lengths)]
    seconds = np.sort(rng.uniform(0, span_days * 86400.0, size=n))
    procedural = rng.random(n) < procedural_share
    return [{"content": " ".join(tokens[offsets[i]:offsets[i + 1]].tolist()),
             "memory_type": "procedural" if procedural[i] else "semantic",
             "created_at": start + timedelta(seconds=float(seconds[i]))}
            for i in range(n)]


def power_law_edges(n: int, edges_per_node: int = 5, seed: int = 0,
                    skew: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
    """A seeded directed graph with a power-law in-degree, as ``(src, dst)`` item numbers.

    Node ``i > 0`` links to ``edges_per_node`` earlier nodes ``floor(i * u ** skew)`` with
    ``u`` uniform: old nodes collect links like in preferential attachment (with ``skew=2`` the
    expected in-degree of node ``j`` grows like ``sqrt(n / j)``, a degree tail of exponent 3 as
    in Barabási–Albert), but vectorised, so a million nodes take a fraction of a second. Node 0
    has no outgoing edge; repeated pairs are possible (an upsert keeps one).

    Examples
    --------
    >>> src, dst = power_law_edges(1000, seed=1)
    >>> len(src), bool((dst < src).all())
    (4995, True)
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"n must be an integer >= 2, got {n!r}")
    if isinstance(edges_per_node, bool) or not isinstance(edges_per_node, int) \
            or edges_per_node < 1:
        raise ValueError(f"edges_per_node must be an integer >= 1, got {edges_per_node!r}")
    if not isinstance(skew, (int, float)) or not skew >= 1:
        raise ValueError(f"skew must be a number >= 1, got {skew!r}")
    rng = np.random.default_rng(seed)
    src = np.repeat(np.arange(1, n, dtype=np.int64), edges_per_node)
    dst = np.floor(src * rng.random(len(src)) ** skew).astype(np.int64)
    return src, dst

