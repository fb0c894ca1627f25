"""numba kernels for :class:`memlab.signals.bm25.BM25Index` (the optional ``fast`` extra).

Without numba these are plain Python functions (same results, far slower);
:mod:`memlab.signals.bm25` calls them only when numba is installed and keeps a pure-numpy path as
the reference (tested equal: same summation order, so the same bits). Why hand-written loops
rather than a library call: the work per query is a few hundred to a few thousand postings, so
the cost that matters is the per-query constant (Python and numpy dispatch, temporary arrays),
which only a compiled accumulate + top-k loop removes.

Ranking order everywhere: score descending, then document number ascending (as
``np.lexsort((docs, -scores))``).
"""

from __future__ import annotations

import numpy as np

try:
    from numba import njit
except ImportError:  # importable without numba (doctest collection); bm25.py then never calls it
    def njit(*args, **kwargs):
        return args[0] if args and callable(args[0]) else (lambda fn: fn)

__all__ = ["accumulate_top_k", "batch_top_k"]


@njit(cache=True, nogil=True, inline="always")
def _before(s1, d1, s2, d2):
    """Whether (score s1, doc d1) ranks before (s2, d2)."""
    return s1 > s2 or (s1 == s2 and d1 < d2)


@njit(cache=True, nogil=True)
def _top_k_one(indptr, docs, weights, tids, qtfs, start, stop, mask, use_mask, k,
               acc, seen, touched, heap_s, heap_d, out_d, out_s, row):
    """Accumulate one query's postings into ``acc`` and write its top ``k`` into row ``row`` of
    ``out_d`` / ``out_s``; returns how many were written. ``acc``, ``seen`` are left cleared."""
    n_touched = 0
    for j in range(start, stop):
        t = tids[j]
        q = qtfs[j]
        for p in range(indptr[t], indptr[t + 1]):
            d = docs[p]
            if seen[d]:
                acc[d] += q * weights[p]
            else:
                seen[d] = True
                touched[n_touched] = d
                n_touched += 1
                acc[d] = 0.0 + q * weights[p]  # as numpy's bincount: 0.0 + first + second ...
    # a bounded heap whose root is the worst of the kept (O(matches * log k))
    size = 0
    for i in range(n_touched):
        d = touched[i]
        s = acc[d]
        acc[d] = 0.0
        seen[d] = False
        if use_mask and not mask[d]:
            continue
        if size < k:
            c = size
            heap_s[c] = s
            heap_d[c] = d
            size += 1
            while c > 0:
                parent = (c - 1) // 2
                if _before(heap_s[parent], heap_d[parent], heap_s[c], heap_d[c]):
                    heap_s[parent], heap_s[c] = heap_s[c], heap_s[parent]
                    heap_d[parent], heap_d[c] = heap_d[c], heap_d[parent]
                    c = parent
                else:
                    break
        elif _before(s, d, heap_s[0], heap_d[0]):
            heap_s[0] = s
            heap_d[0] = d
            c = 0
            while True:
                worst = c
                left = 2 * c + 1
                right = left + 1
                if left < size and _before(heap_s[worst], heap_d[worst],
                                           heap_s[left], heap_d[left]):
                    worst = left
                if right < size and _before(heap_s[worst], heap_d[worst],
                                            heap_s[right], heap_d[right]):
                    worst = right
                if worst == c:
                    break
                heap_s[worst], heap_s[c] = heap_s[c], heap_s[worst]
                heap_d[worst], heap_d[c] = heap_d[c], heap_d[worst]
                c = worst
    # insertion sort of the kept (k is small), best first
    for i in range(1, size):
        s = heap_s[i]
        d = heap_d[i]
        j = i - 1
        while j >= 0 and _before(s, d, heap_s[j], heap_d[j]):
            heap_s[j + 1] = heap_s[j]
            heap_d[j + 1] = heap_d[j]
            j -= 1
        heap_s[j + 1] = s
        heap_d[j + 1] = d
    for i in range(size):
        out_d[row, i] = heap_d[i]
        out_s[row, i] = heap_s[i]
    return size


@njit(cache=True, nogil=True)
def accumulate_top_k(indptr, docs, weights, tids, qtfs, mask, use_mask, k, acc, seen, touched):
    """One query's top ``k``: ``(docs, scores)`` best first (at most ``k``)."""
    out_d = np.empty((1, k), np.int64)
    out_s = np.empty((1, k), np.float64)
    heap_s = np.empty(k, np.float64)
    heap_d = np.empty(k, np.int64)
    size = _top_k_one(indptr, docs, weights, tids, qtfs, 0, tids.size, mask, use_mask, k,
                      acc, seen, touched, heap_s, heap_d, out_d, out_s, 0)
    return out_d[0, :size].copy(), out_s[0, :size].copy()


@njit(cache=True, nogil=True)
def batch_top_k(indptr, docs, weights, q_ptr, tids, qtfs, mask, use_mask, k, acc, seen, touched):
    """Every query's top ``k`` (query ``i``'s terms are ``tids[q_ptr[i]:q_ptr[i + 1]]``):
    ``(docs, scores)`` of shape ``(queries, k)``, padded with -1 and NaN."""
    n_queries = q_ptr.size - 1
    out_d = np.full((n_queries, k), -1, np.int64)
    out_s = np.full((n_queries, k), np.nan, np.float64)
    heap_s = np.empty(k, np.float64)
    heap_d = np.empty(k, np.int64)
    for i in range(n_queries):
        _top_k_one(indptr, docs, weights, tids, qtfs, q_ptr[i], q_ptr[i + 1], mask, use_mask, k,
                   acc, seen, touched, heap_s, heap_d, out_d, out_s, i)
    return out_d, out_s
