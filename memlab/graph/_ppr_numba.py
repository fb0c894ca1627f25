"""numba kernels for :mod:`memlab.graph.ppr` (the optional ``fast`` extra).

Without numba these are plain Python functions (same results, far slower); :mod:`memlab.graph.ppr`
calls them only when numba is installed, and keeps its numpy paths as the reference (tested equal
within the stated tolerances). Why hand-written loops rather than a library call:

- exact PPR is Gauss–Seidel, which updates each node from its in-neighbours' *newest* values and
  so is a sequential loop (no vectorised or sparse-BLAS equivalent); swept in a topological order
  of the strongly connected components (computed once per graph version, :func:`sweep_order`),
  mass crosses every acyclic part of the graph in one sweep, as PRPACK's SCC solver does;
- local push is a FIFO work queue whose per-query work is a few thousand to a few hundred thousand
  edge visits: the cost that matters is the per-push constant, which only compiled code removes.
"""

from __future__ import annotations

import numpy as np

try:
    from numba import njit
except ImportError:  # importable without numba (doctest collection); ppr.py then never calls it
    def njit(*args, **kwargs):
        return args[0] if args and callable(args[0]) else (lambda fn: fn)

__all__ = ["gauss_seidel_sweep", "push_fifo", "sweep_order"]


@njit(cache=True, nogil=True)
def sweep_order(indptr, indices):
    """Nodes in a topological order of the strongly connected components of the directed graph
    ``(indptr, indices)`` (CSR of out-edges): if an edge leads from component A to component B,
    A's nodes come first; within a component, by node number (memory order: a sweep over a
    large component then reads its rows and vector entries nearly sequentially). Iterative
    Tarjan (which emits components sinks first), then a counting sort by reversed emission."""
    n = indptr.size - 1
    index = np.full(n, -1, np.int64)
    low = np.zeros(n, np.int64)
    on_stack = np.zeros(n, np.bool_)
    stack = np.empty(n, np.int64)
    call_node = np.empty(n, np.int64)
    call_edge = np.empty(n, np.int64)
    component = np.empty(n, np.int64)
    sp = 0
    n_comp = 0
    counter = 0
    for root in range(n):
        if index[root] != -1:
            continue
        index[root] = counter
        low[root] = counter
        counter += 1
        stack[sp] = root
        sp += 1
        on_stack[root] = True
        call_node[0] = root
        call_edge[0] = indptr[root]
        cp = 1
        while cp > 0:
            v = call_node[cp - 1]
            e = call_edge[cp - 1]
            if e < indptr[v + 1]:
                call_edge[cp - 1] = e + 1
                w = indices[e]
                if index[w] == -1:
                    index[w] = counter
                    low[w] = counter
                    counter += 1
                    stack[sp] = w
                    sp += 1
                    on_stack[w] = True
                    call_node[cp] = w
                    call_edge[cp] = indptr[w]
                    cp += 1
                elif on_stack[w] and index[w] < low[v]:
                    low[v] = index[w]
            else:
                cp -= 1
                if low[v] == index[v]:
                    while True:
                        sp -= 1
                        w = stack[sp]
                        on_stack[w] = False
                        component[w] = n_comp
                        if w == v:
                            break
                    n_comp += 1
                if cp > 0:
                    u = call_node[cp - 1]
                    if low[v] < low[u]:
                        low[u] = low[v]
    # components emitted last go first; nodes of one component in ascending order
    start = np.zeros(n_comp + 1, np.int64)
    for v in range(n):
        start[n_comp - component[v]] += 1
    for c in range(n_comp):
        start[c + 1] += start[c]
    order = np.empty(n, np.int64)
    for v in range(n):
        rank = n_comp - 1 - component[v]
        order[start[rank]] = v
        start[rank] += 1
    return order


@njit(cache=True, nogil=True)
def gauss_seidel_sweep(indptr, indices, data, order, alpha, p, z):
    """One Gauss–Seidel sweep, in place, of ``z = alpha * P^T z + p``.

    ``(indptr, indices, data)`` is ``P^T`` as CSR: row ``j`` lists the in-neighbours ``i`` of
    ``j`` with the transition probability ``P[i, j]``. Nodes are updated in ``order``, each from
    the newest values of its in-neighbours. Returns ``(sum |z_new - z_old|, sum z_new)``: the
    change and the total, in one pass (z is non-negative)."""
    change = 0.0
    total = 0.0
    for jj in range(order.size):
        j = order[jj]
        acc = 0.0
        for k in range(indptr[j], indptr[j + 1]):
            acc += data[k] * z[indices[k]]
        v = alpha * acc + p[j]
        change += abs(v - z[j])
        z[j] = v
        total += v
    return change, total


@njit(cache=True, nogil=True, inline="always")
def _threshold(eps, degree, base_n, u):
    if u < base_n and degree[u] > 1:
        return eps * degree[u]
    return eps


@njit(cache=True, nogil=True, inline="always")
def _push_along(targets, weights, lo, hi, coef, eps, degree, base_n, residual, seen, queued,
                touched, queue, n_touched, tail):
    """Send ``coef * weights[k]`` to ``targets[k]`` for ``k`` in ``lo..hi`` (one node's
    out-edges, of the base CSR or of the delta), noting first touches and queueing the targets
    that pass their threshold. Returns the new ``(n_touched, tail)``. Inlined into the push
    loop (numba's ``inline="always"``), so the two edge lists cost no call."""
    n = residual.size
    for k in range(lo, hi):
        t = targets[k]
        if not seen[t]:
            seen[t] = True
            touched[n_touched] = t
            n_touched += 1
        residual[t] += coef * weights[k]
        if not queued[t] and residual[t] > _threshold(eps, degree, base_n, t):
            queued[t] = True
            queue[tail % n] = t
            tail += 1
    return n_touched, tail


@njit(cache=True, nogil=True)
def push_fifo(indptr, indices, data, out_weight, degree, base_n,
              d_src, d_dst, d_w, seeds, alpha, eps, max_epochs, max_pushes,
              residual, estimate, seen, queued, touched, queue, state):
    """Andersen–Chung–Lang push with a FIFO queue, resumable.

    Graph: the base's out-edges as CSR ``(indptr, indices, data)`` over its ``base_n`` nodes, its
    out-weights and out-degrees, plus the delta's entries sorted by source ``(d_src, d_dst, d_w)``
    (signed weight changes, summed with the base's by linearity). A node ``u`` is pushed while its
    residual exceeds ``eps * max(degree[u], 1)``: it keeps ``1 - alpha`` of it as estimate and
    sends the rest along its out-edges in proportion to weight (back to the seeds if it has none).

    Scratch (``residual``, ``estimate`` zero, ``seen``, ``queued`` False, ``touched`` and
    ``queue`` of length n; every node is queued at most once at a time, so the ring of n slots
    never overflows) is left dirty on the ``touched[:state[2]]`` entries only: the caller resets
    those.
    ``state`` (int64[6]) carries ``head, tail, touched, epoch, epoch_end, pushes`` between calls:
    all zero to start. A call returns when the queue is empty (True), or (False) after
    ``max_epochs`` epochs in total (an epoch: the nodes queued by the previous one; the first is
    the seeds) or ``max_pushes`` pushes in this call. Returns whether the queue is empty.
    """
    n = residual.size
    head, tail, n_touched, epoch, epoch_end = state[0], state[1], state[2], state[3], state[4]
    share = 1.0 / seeds.size
    has_delta = d_src.size > 0
    if tail == 0 and n_touched == 0:  # a fresh start: the seeds hold all the residual
        for s in seeds:
            residual[s] += share
            if not seen[s]:
                seen[s] = True
                touched[n_touched] = s
                n_touched += 1
        for s in seeds:
            if not queued[s]:
                queued[s] = True
                queue[tail % n] = s
                tail += 1
        epoch_end = tail
        epoch = 0
    pushes = 0
    while head < tail:
        if head == epoch_end:
            epoch += 1
            epoch_end = tail
        if epoch >= max_epochs or pushes >= max_pushes:
            break
        u = queue[head % n]
        head += 1
        queued[u] = False
        ru = residual[u]
        # the seeds are pushed once whatever their share (as the numpy rounds do); later nodes only
        # above the threshold (a delta's negative entries may have lowered it since queued)
        if epoch > 0 and ru <= _threshold(eps, degree, base_n, u):
            continue
        residual[u] = 0.0
        estimate[u] += (1.0 - alpha) * ru
        pushes += 1
        weight = out_weight[u] if u < base_n else 0.0
        lo = 0
        hi = 0
        if has_delta:
            lo = np.searchsorted(d_src, u, side="left")
            hi = np.searchsorted(d_src, u, side="right")
            for k in range(lo, hi):
                weight += d_w[k]
        if weight <= 1e-12:  # dangling: its mass returns to the seeds, as in the exact method
            for s in seeds:
                residual[s] += alpha * ru * share
                limit = _threshold(eps, degree, base_n, s)
                if not queued[s] and residual[s] > limit:
                    queued[s] = True
                    queue[tail % n] = s
                    tail += 1
            continue
        coef = alpha * ru / weight
        if u < base_n:  # the base's out-edges, then the delta's
            n_touched, tail = _push_along(indices, data, indptr[u], indptr[u + 1], coef, eps,
                                          degree, base_n, residual, seen, queued, touched,
                                          queue, n_touched, tail)
        n_touched, tail = _push_along(d_dst, d_w, lo, hi, coef, eps, degree, base_n, residual,
                                      seen, queued, touched, queue, n_touched, tail)
    state[0], state[1], state[2], state[3], state[4] = head, tail, n_touched, epoch, epoch_end
    state[5] += pushes
    return head >= tail
