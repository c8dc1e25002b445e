"""Columnar nesting and lookup primitives behind the launch tree (`badput.analysis.tree`).

Private helpers over parallel numpy arrays: the open order and the parent of each interval
of a per-thread nesting (one stable sort of all opens and closes, on one int64 key per
event), walks up the resulting forest, and (key, time) lookups by `searchsorted` over
composite int64 keys. No Python step per element.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from badput.trace.model import NO_ID, EventKind, Trace

try:  # one pass in C (`_paths.c`); the numpy version gives the same result. Imported by
    # name: `from badput.analysis import` would make this leaf module depend on the package.
    _paths: Any = importlib.import_module("badput.analysis._paths")
except ImportError:  # an install without a C compiler (the extension is optional)
    _paths = None

I64 = npt.NDArray[np.int64]
Ids = npt.NDArray[np.signedinteger[Any]]  # any width (Trace id columns may be int32)
Bools = npt.NDArray[np.bool_]


def c_paths() -> Any:
    """The one-pass C helpers (`_paths.c`), None where they are not to run.

    None without the extension or with `BADPUT_NO_C_PATHS` set, which picks their numpy
    versions (as the tests do to compare the two).
    """
    return None if _paths is None or os.environ.get("BADPUT_NO_C_PATHS") else _paths


# Composite sort keys pack (group, time, class) into one int64; past this bound the times are
# first replaced by their dense ranks (same order, same ties), so the keys always fit.
_KEY_LIMIT = 1 << 62


def _key_frame(g: Ids, start: I64, end: I64) -> tuple[Ids, I64, I64, int, int, int]:
    """What `_event_keys` packs: g, start and end (made to fit), g's least, the width, t's least.

    The keys fit where (g range) x (time range) x 3 does: else g becomes dense ids, and if
    that is not enough the times their dense ranks (same order, same ties).
    """
    n = g.shape[0]
    g_lo, g_width = int(g.min()), int(g.max()) - int(g.min()) + 1
    lo = min(int(start.min()), int(end.min()))
    width = max(int(start.max()), int(end.max())) - lo + 1
    if g_width * width * 3 >= _KEY_LIMIT:
        g = dense_ids(g)
        g_lo, g_width = 0, int(g.max()) + 1
    if g_width * width * 3 >= _KEY_LIMIT or abs(lo) >= _KEY_LIMIT:
        ranks = unique_inverse(np.concatenate([start, end]))[1]
        start, end, lo, width = ranks[:n], ranks[n:], 0, int(ranks.max()) + 1
    return g, start, end, g_lo, width, lo


def _event_keys(g: I64, start: I64, end: I64) -> I64:
    """One int64 sort key (g, t, class) per open (the first n) and per close (the last n).

    Class 0: the close of a node with a length; 1: an open; 2: the close of a zero-length node.
    """
    n = g.shape[0]
    g, start, end, g_lo, width, lo = _key_frame(g, start, end)
    base = g.astype(np.int64) - g_lo  # g may be a Trace id column, held as int32
    base *= width
    base -= lo
    keys = np.empty(2 * n, dtype=np.int64)
    np.add(base, start, out=keys[:n])
    np.add(base, end, out=keys[n:])
    keys *= 3
    keys[:n] += 1
    zero_length = end <= start
    keys[n:] += zero_length
    keys[n:] += zero_length
    return keys


def nest(
    g: I64, start: I64, end: I64, rank: Callable[[I64], npt.NDArray[np.integer]]
) -> tuple[I64, I64, I64, I64, I64]:
    """Open order of the intervals and the parent of each, from one sorted sweep.

    Open order: by (g, start), longer first at equal start, then by `rank` (of the input
    positions given: only ties at equal start and end need it), then by input position.
    Returns `order` (input positions in open order), `parent` (per node in open order, the
    node index of its parent, `NO_ID` at a root), and g, start and end in open order.

    Closes sort before opens at the same time (intervals are half-open), inner closes before
    outer ones, and a zero-length node closes right after it opens. The depth after each
    event is a running sum; a node's parent is the last node opened one level up before it.
    Intervals that overlap without nesting get the nearest ancestor that contains them.
    Every interval ends at or after its start (ValueError otherwise: no order would hold).
    """
    n = g.shape[0]
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.copy(), g, start, end
    if (end < start).any():
        raise ValueError("nest: an interval ends before it starts")
    if (fast := c_paths()) is not None:
        # The opens' keys sorted (by (g, start), ties in input order): a sort of n values,
        # not one of 2n with its index. One pass in C then holds the closes of the nodes
        # still open, in order, and finds each node's depth and parent from them.
        open_keys = np.empty(n, dtype=np.int64)
        kg, ks, ke, g_lo, width, lo = _key_frame(g, start, end)
        framed = kg is g and ks is start and ke is end  # the keys of the values as they are
        fast.event_keys(*packed(kg, ks, ke), g_lo, width, lo, open_keys, None)
        order = np.argsort(open_keys, kind="stable")
        open_keys = open_keys[order]
        g, start = g[order], start[order]
        order, end = _open_ties(order, g, start, end, rank)
        parent = np.empty(n, dtype=np.int64)
        nodes = packed(g, start, end)
        frame = nodes if framed else packed(kg[order], ks[order], ke[order])
        found = fast.nest_stack(open_keys, *frame, *nodes, g_lo, width, lo, parent)
        if found < 0:  # many long overlaps: the closes' keys sorted instead
            close_keys = np.empty(n, dtype=np.int64)
            fast.event_keys(*frame, g_lo, width, lo, np.empty_like(close_keys), close_keys)
            # Timsort: the closes come nearly in order (a thread's ends rise with its
            # starts), where it is many times faster than the default sort.
            close_keys.sort(kind="stable")
            found = fast.nest_parents(open_keys, close_keys, *nodes, parent)
        if not found:
            raise ValueError("nest: a close before its own open (an end before its start)")
        return order, parent, g, start, end
    keys = _event_keys(g, start, end)
    pos = np.arange(n, dtype=np.int64)
    # One stable sort of all events by (g, t, class). Only how many closes come before each
    # open matters (its depth is the opens so far minus those closes): no close ties with an
    # open, so the order of the closes among themselves never does.
    events = np.argsort(keys, kind="stable")
    del keys
    open_ev = np.flatnonzero(events < n)  # event position of each open, in open order
    order = events[open_ev]  # by (g, start), ties in input order
    del events
    d = np.subtract(pos, open_ev, out=open_ev)
    d += pos
    d += 1  # depth at each open: opens up to it (pos + 1) minus closes before it
    g, start = g[order], start[order]
    order, end = _open_ties(order, g, start, end, rank)
    return order, _depth_parents(d, g, start, end), g, start, end


# The widest op-id range `kind_then_id` packs beside a kind rank (of at most 8 bits) in int64.
_RANK_ID_LIMIT = 1 << 54


def kind_then_id(
    rank_of_kind: npt.NDArray[np.integer], kind: npt.NDArray[np.integer], op_id: Ids
) -> Callable[[I64], I64]:
    """`nest`'s rank for host events: by kind (`rank_of_kind[kind]`), then by op id.

    Intervals with the same start and end on one thread (zero-length ones on a coarse clock)
    nest by kind first (an op holds its runtime calls); within a kind the profiler's op id
    (`External id`, numbered as ops start) puts the one that started first outermost, so
    the file's order decides only among events without an id. `kind` and `op_id` are per
    input position.
    """

    def rank(at: I64) -> I64:
        r: I64 = rank_of_kind[kind[at]].astype(np.int64)
        ids = op_id[at].astype(np.int64)
        if ids.shape[0] == 0:
            return r
        # (kind rank, op id) packed as rank * width + (id - least): the ids' own order, no
        # sort, where that fits (rank_of_kind holds small integers); else their dense ranks.
        lo = int(ids.min())
        width = int(ids.max()) - lo + 1
        if width < _RANK_ID_LIMIT:
            ids -= lo
        else:
            width = at.shape[0]
            ids = unique_inverse(ids)[1]
        r *= width
        r += ids
        return r

    return rank


def packed(*arrays: Ids) -> list[I64]:
    """The arrays as contiguous int64, for the C helpers (a copy only where needed)."""
    return [np.ascontiguousarray(a, dtype=np.int64) for a in arrays]


def flags(mask: Bools) -> npt.NDArray[np.uint8]:
    """A boolean mask as the C helpers' uint8 flags: a view (0/1 bytes), not a copy."""
    as_bytes: npt.NDArray[np.uint8] = np.ascontiguousarray(mask, dtype=np.bool_).view(np.uint8)
    return as_bytes


def _open_ties(
    order: I64, g: I64, start: I64, end: I64, rank: Callable[[I64], npt.NDArray[np.integer]]
) -> tuple[I64, I64]:
    """`nest`'s open order with its runs of equal (g, start) put in order, and the ends in it.

    `order` holds input positions by (g, start), ties in input order; `g` and `start` are in
    that order, `end` in input order. Each run is sorted by the longer first, then `rank`,
    then input position.
    """
    # Opens at equal (g, start) are adjacent events (no close between them): sort each run
    # by the other keys; the depths stay by position (d, d + 1, ... along a run).
    n = order.shape[0]
    tie = g[1:] == g[:-1]
    tie &= start[1:] == start[:-1]
    if tie.any():
        member = np.zeros(n, dtype=np.bool_)
        member[1:] = tie
        member[:-1] |= tie
        at = np.flatnonzero(member)
        sub = order[at]  # ascending within each run (stable sort)
        run = np.ones(at.shape[0], dtype=np.bool_)
        run[1:] = ~tie[at[1:] - 1]
        if (fast := c_paths()) is not None:  # each run on its own (most hold two or three)
            sub = sub.astype(np.int64)  # a copy the pass writes over, as the two keys
            keys = [np.ascontiguousarray(end[sub], dtype=np.int64), np.array(rank(sub), np.int64)]
            fast.sort_runs(flags(run), sub, *keys)
            order[at] = sub
        else:  # (a stable sort: within a run of equal keys the positions stay ascending)
            order[at] = sub[np.lexsort((rank(sub), -end[sub], np.cumsum(run)))]
    return order, end[order]


def _depth_parents(d: I64, g: I64, start: I64, end: I64) -> I64:
    """Each node's parent from its depth `d` at open (nodes in open order), repaired.

    `g`, `start` and `end` are the nodes' in open order.
    """
    n = d.shape[0]
    pos = np.arange(n, dtype=np.int64)
    # Parent: the last open at depth d - 1 before it. The depth rises by at most one from an
    # open to the next, so that is the node just before when the depth rose (a first child);
    # else the parent of the previous node at the same depth (its elder sibling: any node
    # at depth d - 1 between the two would sit at depth d - 1 after it, not before). The
    # first node at each depth >= 2 is a first child: in (depth, position) order the parent
    # is that of the last first child, a forward fill.
    first_child = np.empty(n, dtype=np.bool_)
    first_child[0] = True
    np.greater(d[1:], d[:-1], out=first_child[1:])
    small = d.astype(np.int16) if int(d.max()) <= np.iinfo(np.int16).max else d
    by_depth = np.argsort(small, kind="stable")  # radix sort for int16
    del small, d
    last_first = pos * first_child[by_depth]
    np.maximum.accumulate(last_first, out=last_first)
    parent = np.empty(n, dtype=np.int64)
    # Roots (depth 1) fill from node 0, the first in that order: by_depth[0] - 1 is NO_ID.
    parent[by_depth] = by_depth[last_first]
    parent -= 1

    # Overlaps that do not nest (seen in real traces) throw the depth count off. In a proper
    # tree a node's parent is the node opened just before it or one of its ancestors: climb
    # from there to the first that contains it.
    # A depth parent is on the same g (the depth is 0 between groups) and opened earlier:
    # only its end can fail to contain the child.
    bad = np.flatnonzero((end > end[parent]) & (parent >= 0))  # end[NO_ID]: masked
    if bad.size:

        def contains(p: I64, c: I64) -> Bools:
            inside: Bools = (g[p] == g[c]) & (start[p] <= start[c]) & (end[c] <= end[p])
            return inside

        cand = bad - 1  # the parent opened before the child: bad >= 1
        todo = np.arange(bad.size)
        while todo.size:
            c = cand[todo]
            stop = (c < 0) | contains(np.maximum(c, 0), bad[todo])
            todo = todo[~stop]
            cand[todo] = parent[cand[todo]]
        # Each new parent contains its child (or is NO_ID): no second pass finds more.
        parent[bad] = cand
    return parent


def depths(parent: I64) -> I64:
    """Depth of each node of a forest (0 at a root): every node climbs at once, level by level."""
    depth = np.zeros(parent.shape[0], dtype=np.int64)
    climbing = np.flatnonzero(parent >= 0)
    up = parent[climbing]
    while climbing.shape[0]:
        depth[climbing] += 1
        up = parent[up]
        above = up >= 0
        climbing, up = climbing[above], up[above]
    return depth


def sub_nesting(
    parent: I64, keep: Bools, g: I64, start: I64, end: I64
) -> tuple[I64, I64, I64] | None:
    """What `nest` gives for the nodes `keep` selects of a nested forest, without a sort.

    `parent` is a forest `nest` returned (nodes in open order, so its parents contain their
    children); `g`, `start` and `end` are those of the kept nodes, in that order, each of
    positive length. In open order the kept nodes are already in `nest`'s order (the same
    keys, ties by the same rank and row order), and where they nest properly (no two overlap
    without one containing the other) each one's parent among them is its nearest kept
    ancestor. Checked, not assumed: the kept forest must be laid out as a depth-first walk in
    which each node's elder sibling ends before it starts.

    Returns the kept node indices (in open order), the parent of each among them (`NO_ID` at
    a root) and its depth; None where the kept nodes overlap without nesting, whose repair
    `nest` must decide, or are not in `nest`'s order (thread, start, the longer first).
    """
    if (fast := c_paths()) is not None:  # which checks the order too
        k = g.shape[0]
        sub_parent, depth = np.empty(k, dtype=np.int64), np.empty(k, dtype=np.int64)
        if not fast.sub_forest(
            *packed(parent), flags(keep), *packed(g, start, end), sub_parent, depth
        ):
            return None
        return np.flatnonzero(keep).astype(np.int64, copy=False), sub_parent, depth
    if g.shape[0] > 1:  # in `nest`'s order: by thread, then start, the longer first
        same_g = g[1:] == g[:-1]
        later = start[1:] > start[:-1]
        later |= (start[1:] == start[:-1]) & (end[1:] <= end[:-1])
        if not ((g[1:] > g[:-1]) | (same_g & later)).all():
            return None
    kept = np.flatnonzero(keep)
    # Nearest kept ancestor of every node: jump over the nodes not kept (pointer doubling;
    # between a node and its pointer lie only nodes not kept).
    up = parent.copy()
    live = np.flatnonzero(up >= 0)
    live = live[~keep[up[live]]]
    while live.shape[0]:
        up[live] = up[up[live]]
        live = live[up[live] >= 0]
        live = live[~keep[up[live]]]
    pos = np.full(parent.shape[0], NO_ID, dtype=np.int64)
    pos[kept] = np.arange(kept.shape[0])
    anc = up[kept]
    sub_parent = np.where(anc >= 0, pos[np.maximum(anc, 0)], NO_ID)
    depth = depths(sub_parent)
    k = kept.shape[0]
    if k < 2:
        return kept.astype(np.int64), sub_parent, depth
    # Node c follows c - 1 on its thread: c - 1 is its parent, or the last of its elder
    # sibling's subtree (climb from c - 1 to c's depth) and that sibling ended by c's start.
    c = np.flatnonzero(g[1:] == g[:-1]) + 1
    c = c[sub_parent[c] != c - 1]
    if (depth[c - 1] < depth[c]).any():
        return None
    sib = c - 1
    climb = np.flatnonzero(depth[sib] > depth[c])
    need = depth[sib[climb]] - depth[c[climb]]
    while climb.shape[0]:
        sib[climb] = sub_parent[sib[climb]]
        need -= 1
        more = need > 0
        climb, need = climb[more], need[more]
    if (sub_parent[sib] != sub_parent[c]).any() or (end[sib] > start[c]).any():
        return None
    return kept.astype(np.int64), sub_parent, depth


def order_by(primary: Ids, secondary: Ids) -> I64:
    """`np.lexsort((secondary, primary))`: by `primary`, ties by `secondary`, then by position.

    One stable sort of `primary` (near-linear where it is nearly sorted already, as the
    start times of a thread's events are), then a lexsort of its ties alone: several times
    faster than the two-key lexsort where ties are few, the same order always.
    """
    order: I64 = np.argsort(primary, kind="stable").astype(np.int64, copy=False)
    if order.shape[0] < 2:
        return order
    ranked = primary[order]
    tie = ranked[1:] == ranked[:-1]
    if tie.any():  # runs of equal `primary`: each sorted by `secondary`, stable
        member = np.zeros(order.shape[0], dtype=np.bool_)
        member[1:] = tie
        member[:-1] |= tie
        at = np.flatnonzero(member)
        sub = order[at]  # ascending positions within each run (stable sort)
        run = np.ones(at.shape[0], dtype=np.bool_)
        run[1:] = ~tie[at[1:] - 1]
        if (fast := c_paths()) is not None:  # each run on its own: by `secondary`, then position
            keys = [np.zeros(sub.shape[0], dtype=np.int64), secondary[sub].astype(np.int64)]
            fast.sort_runs(flags(run), sub, *keys)
            order[at] = sub
        else:
            order[at] = sub[np.lexsort((secondary[sub], np.cumsum(run)))]
    return order


def settle_ties(trace: Trace, rows: Ids, *keys: Ids) -> I64 | None:
    """A reorder of `rows` that puts each run of tied rows in an order of their content.

    `rows` are Trace rows sorted by `keys` (each given in that order, one value per row);
    rows tie where every key is equal. Returns positions into `rows`: runs of ties ordered by
    kind, name (the text, not its interned id, which follows the file's order), correlation
    id, op id, length, start, pid and tid, so that the file's order of its events decides
    nothing where the rows differ; None where there are no ties. Untied rows keep their place.
    """
    n = rows.shape[0]
    if n < 2:
        return None
    tie = np.ones(n - 1, dtype=np.bool_)
    for key in keys:
        tie &= key[1:] == key[:-1]
    if not tie.any():
        return None
    member = np.zeros(n, dtype=np.bool_)
    member[1:] = tie
    member[:-1] |= tie
    at = np.flatnonzero(member)
    r = rows[at].astype(np.int64)
    run = np.ones(at.shape[0], dtype=np.bool_)
    run[1:] = ~tie[at[1:] - 1]
    ids, name_of = unique_inverse(trace.name_id[r])
    by_text = sorted(range(ids.shape[0]), key=lambda i: trace.names[int(ids[i])])
    name_rank = np.empty(ids.shape[0], dtype=np.int64)
    name_rank[by_text] = np.arange(ids.shape[0])
    content: list[npt.NDArray[np.integer]] = [trace.tid[r], trace.pid[r], trace.ts_ns[r]]
    content += [trace.dur_ns[r], trace.external_id[r], trace.correlation[r]]
    content += [name_rank[name_of.reshape(-1)], trace.kind[r], np.cumsum(run)]
    order = np.arange(n, dtype=np.int64)
    order[at] = at[np.lexsort(content)]
    return order


def is_kind(kind: npt.NDArray[np.integer], kinds: tuple[EventKind, ...]) -> Bools:
    """Rows whose kind is one of `kinds`: a compare per kind (an `isin` sorts all rows)."""
    out = np.zeros(kind.shape[0], dtype=np.bool_)
    hit = np.empty(kind.shape[0], dtype=np.bool_)
    for k in kinds:
        out |= np.equal(kind, int(k), out=hit)
    return out


def walk_up(
    parent: I64, start: I64, masks: list[Bools], *, nearest: bool = True, farthest: bool = True
) -> tuple[list[I64], list[I64]]:
    """Nearest and farthest node of each mask on the chain from `start` up to its root.

    `NO_ID` where none is (and for a `start` of `NO_ID`). Without `nearest` (`farthest`) the
    first (second) list is empty: not found. In C where built, for many starts: one pass over
    the forest per mask (its parents come before their children, as `nest` orders them; the
    pass refuses a forest that is not, and the walk below runs instead), not one vector step
    per level of the deepest chain.
    """
    fast = c_paths()
    # The pass covers every node: worth it for starts by the hundred thousand, not a few.
    if fast is not None and start.shape[0] * 16 >= parent.shape[0] > 0:
        try:
            return _walk_up_c(fast, parent, start, masks, nearest, farthest)
        except ValueError:  # a parent after its child (or too many nodes for the pass)
            pass
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
    return (first if nearest else []), (last if farthest else [])


def _walk_up_c(
    fast: Any, parent: I64, start: I64, masks: list[Bools], nearest: bool, farthest: bool
) -> tuple[list[I64], list[I64]]:
    """`walk_up` by the C pass (`marked_ancestors`); ValueError for a forest out of order.

    The pass writes int32 node indices (half the memory an int64 pair would take per node);
    the starts' answers are widened.
    """
    (parent64,) = packed(parent)
    has = start >= 0
    at = np.where(has, start, 0)
    firsts: list[I64] = []
    lasts: list[I64] = []
    n = parent.shape[0]
    near = np.empty(n, dtype=np.int32) if nearest else None
    far = np.empty(n, dtype=np.int32) if farthest else None
    none = np.int64(NO_ID)
    for m in masks:
        if not m.any():  # no node marked: no pass over the forest
            nothing = np.full(start.shape[0], NO_ID, dtype=np.int64)
            if near is not None:
                firsts.append(nothing)
            if far is not None:
                lasts.append(nothing.copy())
            continue
        fast.marked_ancestors(parent64, flags(m), near, far)
        if near is not None:
            firsts.append(np.where(has, near[at], none))
        if far is not None:
            lasts.append(np.where(has, far[at], none))
    return firsts, lasts


def distinct(values: I64, bound: int) -> tuple[I64, I64]:
    """`np.unique(values, return_inverse=True)` for values in `[NO_ID, bound)`.

    A lookup table instead of a sort when the bound is small enough beside the values
    (node indices, Trace rows, interned ids); `unique_inverse` otherwise.
    """
    if values.shape[0] == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if bound > 8 * values.shape[0] + (1 << 16):
        return unique_inverse(values)
    seen = np.zeros(bound + 1, dtype=np.bool_)
    seen[values + 1] = True  # NO_ID at 0
    uniq = np.flatnonzero(seen) - 1
    slot = np.zeros(bound + 1, dtype=np.int64)
    slot[uniq + 1] = np.arange(uniq.shape[0])
    return uniq.astype(np.int64), slot[values + 1]


def unique_inverse(values: Ids) -> tuple[I64, I64]:
    """`np.unique(values, return_inverse=True)`, both as int64, from a stable sort.

    Timsort: ids and times come in long ascending runs, where it is several times faster than
    the default sort np.unique uses (which does not notice order); some 10 % slower on random.
    """
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    head = np.empty(ordered.shape[0], dtype=np.bool_)
    head[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=head[1:])
    inverse = np.empty(ordered.shape[0], dtype=np.int64)
    inverse[order] = np.cumsum(head) - 1
    return ordered[head].astype(np.int64, copy=False), inverse


def take(values: npt.NDArray[np.integer], index: I64) -> I64:
    """`values[index]` as int64, `NO_ID` where `index` is `NO_ID` (safe on empty `values`)."""
    if values.shape[0] == 0 or index.shape[0] == 0 or int(index.min()) < NO_ID:
        out = np.full(index.shape[0], NO_ID, dtype=np.int64)
        ok = index >= 0
        out[ok] = values[index[ok]]
        return out
    found: I64 = values[index].astype(np.int64, copy=False)  # a new array: NO_ID reads the last
    found[index < 0] = NO_ID
    return found


def dense_ids(x: Ids) -> I64:
    """Dense id of each value, in the values' order.

    Rows come in runs of one value (one thread's events): only the run heads are sorted.
    """
    n = x.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    heads = np.empty(n, dtype=np.bool_)
    heads[0] = True
    np.not_equal(x[1:], x[:-1], out=heads[1:])
    at = np.flatnonzero(heads)
    hx = x[at]
    sx = np.sort(hx)
    distinct = sx[np.append(True, sx[1:] != sx[:-1])]
    ids = np.searchsorted(distinct, hx).astype(np.int64)
    return np.repeat(ids, np.diff(np.append(at, n)))


def _packed_pairs(a: Ids, b: Ids) -> I64 | None:
    """Each (a, b) pair packed into one int64 in lexicographic order; None where they do not fit."""
    a_lo, b_lo = int(a.min()), int(b.min())
    b_width = int(b.max()) - b_lo + 1
    if (int(a.max()) - a_lo + 1) * b_width >= _KEY_LIMIT:
        return None
    packed: I64 = (a.astype(np.int64) - a_lo) * b_width + (b - b_lo)
    return packed


def pair_keys(a: Ids, b: Ids) -> I64:
    """One int64 key per (a, b) pair, in the pairs' lexicographic order, equal for equal pairs.

    The pair packed into one number where the ranges fit (no sort), else its dense id.
    """
    if a.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    packed = _packed_pairs(a, b)
    return packed if packed is not None else dense_pairs(a, b)


def dense_pairs(a: Ids, b: Ids) -> I64:
    """Dense id of each (a, b) pair, in lexicographic order of the pairs (ids of any width)."""
    if a.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    packed = _packed_pairs(a, b)
    if packed is not None:
        return dense_ids(packed)
    order = np.lexsort((b, a))
    sa, sb = a[order], b[order]
    step = np.empty(a.shape[0], dtype=np.int64)
    step[0] = 0
    step[1:] = (sa[1:] != sa[:-1]) | (sb[1:] != sb[:-1])
    ids = np.empty(a.shape[0], dtype=np.int64)
    ids[order] = np.cumsum(step)
    return ids


def find_by_key_time(key_a: Ids, t_a: I64, key_q: Ids, t_q: I64, *, exact: bool) -> I64:
    """For each query, an index into the `a` arrays with the same key, or NO_ID.

    exact: the first `a` (in input order) at exactly the query's time. Else the latest `a` at
    or before the query's time, or the earliest `a` with that key when all are later (a
    launch recorded a little after its kernel by clock skew is still its launch).
    """
    na = key_a.shape[0]
    if na == 0 or key_q.shape[0] == 0:
        return np.full(key_q.shape[0], NO_ID, dtype=np.int64)
    by_key = np.argsort(key_a, kind="stable")
    sorted_keys = key_a[by_key]
    if not (sorted_keys[1:] == sorted_keys[:-1]).any():
        # Each key once (correlation ids, flow ids): its one `a` is the answer, at any time
        # unless exact.
        i = np.minimum(np.searchsorted(sorted_keys, key_q, side="left"), na - 1)
        hit = by_key[i]
        ok = sorted_keys[i] == key_q
        if exact:
            ok &= t_a[hit] == t_q
        return np.where(ok, hit, NO_ID)
    keys = dense_ids(np.concatenate([key_a, key_q]))
    times = np.concatenate([t_a, t_q])
    t_lo = int(times.min())
    width = int(times.max()) - t_lo + 1
    if (int(keys.max()) + 1) * width < _KEY_LIMIT:
        times -= t_lo  # same order and ties as dense ranks
    else:
        times = unique_inverse(times)[1]
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
