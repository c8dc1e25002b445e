"""Columnar nesting and lookup primitives behind the launch tree (`badput.analysis.tree`).

Private helpers over parallel numpy arrays: the parent of each interval of a per-thread
nesting (one sorted sweep), walks up the resulting forest, and (key, time) lookups by
`searchsorted` over dense ranks. No Python step per element.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from badput.trace.model import NO_ID

I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]


def nest_parents(g: I64, start: I64, end: I64) -> I64:
    """Parent of each node (given in open order) from one sweep of opens and closes.

    Closes sort before opens at the same time (intervals are half-open), inner closes before
    outer ones, and a zero-length node closes right after it opens. The depth after each
    event is a running sum; a node's parent is the last node opened one level up before it.
    Intervals that overlap without nesting get the nearest ancestor that contains them.
    """
    n = g.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    pos = np.arange(n, dtype=np.int64)
    close_class = np.where(end > start, 0, 2)
    ev_g = np.concatenate([g, g])
    ev_t = np.concatenate([start, end])
    ev_class = np.concatenate([np.ones(n, dtype=np.int64), close_class])
    ev_sub = np.concatenate([pos, -pos])
    order = np.lexsort((ev_sub, ev_class, ev_t, ev_g))
    is_open = order < n
    depth = np.cumsum(np.where(is_open, 1, -1))
    open_ev = np.flatnonzero(is_open)  # event positions of the opens, ascending
    open_node = order[open_ev]
    d = depth[open_ev]
    # Last open at depth d - 1 before each open: search (depth, event position) keys.
    span = 2 * n + 1
    by_depth = np.lexsort((open_ev, d))
    keys = d[by_depth] * span + open_ev[by_depth]
    j = np.searchsorted(keys, (d - 1) * span + open_ev, side="left") - 1
    ok = (j >= 0) & (d > 1)
    jj = np.maximum(j, 0)
    ok &= d[by_depth][jj] == d - 1
    parent = np.full(n, NO_ID, dtype=np.int64)
    parent[open_node[ok]] = open_node[by_depth][jj[ok]]

    # Overlaps that do not nest (seen in real traces) throw the depth count off. In a proper
    # tree a node's parent is the node opened just before it or one of its ancestors: climb
    # from there to the first that contains it. Fixes may expose others: repeat (bounded).
    def contains(p: I64, c: I64) -> Bools:
        inside: Bools = (g[p] == g[c]) & (start[p] <= start[c]) & (end[c] <= end[p])
        return inside

    for _ in range(64):
        child = np.flatnonzero(parent >= 0)
        bad = child[~contains(parent[child], child)]
        if bad.size == 0:
            break
        cand = bad - 1  # the parent opened before the child: bad >= 1
        todo = np.arange(bad.size)
        while todo.size:
            c = cand[todo]
            stop = (c < 0) | contains(np.maximum(c, 0), bad[todo])
            todo = todo[~stop]
            cand[todo] = parent[cand[todo]]
        parent[bad] = cand
    return parent


def walk_up(parent: I64, start: I64, masks: list[Bools]) -> tuple[list[I64], list[I64]]:
    """Nearest and farthest node of each mask on the chain from `start` up to its root."""
    n = start.shape[0]
    first = [np.full(n, NO_ID, dtype=np.int64) for _ in masks]
    last = [np.full(n, NO_ID, dtype=np.int64) for _ in masks]
    live = np.flatnonzero(start >= 0)
    cur = start[live]
    while live.size:
        for f, la, m in zip(first, last, masks, strict=True):
            hit = m[cur]
            at, node = live[hit], cur[hit]
            la[at] = node
            fresh = f[at] < 0
            f[at[fresh]] = node[fresh]
        cur = parent[cur]
        keep = cur >= 0
        live, cur = live[keep], cur[keep]
    return first, last


def take(values: npt.NDArray[np.integer], index: I64) -> I64:
    """`values[index]` as int64, `NO_ID` where `index` is `NO_ID` (safe on empty `values`)."""
    out = np.full(index.shape[0], NO_ID, dtype=np.int64)
    ok = index >= 0
    out[ok] = values[index[ok]]
    return out


def dense_pairs(a: I64, b: I64) -> I64:
    """Dense id of each (a, b) pair, in lexicographic order of the pairs."""
    if a.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((b, a))
    sa, sb = a[order], b[order]
    step = np.empty(a.shape[0], dtype=np.int64)
    step[0] = 0
    step[1:] = (sa[1:] != sa[:-1]) | (sb[1:] != sb[:-1])
    ids = np.empty(a.shape[0], dtype=np.int64)
    ids[order] = np.cumsum(step)
    return ids


def find_by_key_time(key_a: I64, t_a: I64, key_q: I64, t_q: I64, *, exact: bool) -> I64:
    """For each query, an index into the `a` arrays with the same key, or NO_ID.

    exact: the first `a` (in input order) at exactly the query's time. Else the latest `a` at
    or before the query's time, or the earliest `a` with that key when all are later (a
    launch recorded a little after its kernel by clock skew is still its launch).
    """
    na = key_a.shape[0]
    if na == 0 or key_q.shape[0] == 0:
        return np.full(key_q.shape[0], NO_ID, dtype=np.int64)
    keys = np.unique(np.concatenate([key_a, key_q]), return_inverse=True)[1].astype(np.int64)
    times = np.unique(np.concatenate([t_a, t_q]), return_inverse=True)[1].astype(np.int64)
    width = int(times.max()) + 1
    comb = keys * width + times
    ca, cq = comb[:na], comb[na:]
    order = np.argsort(ca, kind="stable")
    cs = ca[order]
    if exact:
        i = np.searchsorted(cs, cq, side="left")
        ok = i < na
        ok[ok] = cs[i[ok]] == cq[ok]
        return np.where(ok, order[np.minimum(i, na - 1)], NO_ID)
    kq = cq // width
    i = np.searchsorted(cs, cq, side="right") - 1
    ok = (i >= 0) & (cs[np.maximum(i, 0)] // width == kq)
    j = np.searchsorted(cs, kq * width, side="left")
    later = ~ok & (j < na) & (cs[np.minimum(j, na - 1)] // width == kq)
    i = np.where(later, j, i)
    return np.where(ok | later, order[np.clip(i, 0, na - 1)], NO_ID)
