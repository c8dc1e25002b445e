/*
 * Longest paths through a dependency graph (badput.analysis.critical_path), in one pass; and
 * a subset's nesting read off a nested forest (sub_forest, for badput.analysis._nesting),
 * each node's nearest and farthest marked ancestor in such a forest (marked_ancestors), the
 * sort keys and the parents of nesting's sweep (event_keys, nest_parents), the intersection of
 * two canonical interval sets and the union of spans (overlaps, span_union, for
 * badput.analysis.intervals), a what-if's host edge weights (shrink), a dependency graph's
 * order keys, node arrays and chain edges (node_keys, graph_nodes, chain_types, for
 * badput.analysis._graph), the time spans cover before each of its host nodes
 * (span_cover), a path's edges with their parts, ops and modules (path_edges), the step
 * each event belongs to (step_owner), and the graph the longest-path pass runs on, its nodes
 * that only add a chain weight folded into the next node of their chain (solver_keep,
 * solver_chains, solver_weights, solver_path, zero_run).
 *
 * The graph's nodes are numbered in a topological order. Each node has at most one chain edge
 * (from the previous node of its host thread or GPU stream, `pred`, with weight `wchain`) and
 * any number of cross edges (launch, sync, event wait), given sorted by destination. So the
 * longest path to every node is one pass over the nodes in order: the chain edge's value, or
 * the first cross edge with the largest value where it is larger (an event wait also wins a
 * tie with the chain edge). The numpy version in critical_path.py computes the same arrays
 * with vector operations; this file only makes it fast. Both are optional paths to one
 * result, and the tests compare them.
 *
 * Every argument is a buffer of packed native integers (int64, or uint8 for the masks); the
 * caller allocates the outputs. Any violated precondition raises ValueError: never a wrong
 * answer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    Py_buffer b;
    int held;
} buf;

static void release(buf *bs, int n) {
    for (int i = 0; i < n; i++)
        if (bs[i].held) PyBuffer_Release(&bs[i].b);
}

static int get(PyObject *o, buf *out, int writable, Py_ssize_t itemsize) {
    int flags = writable ? (PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) : PyBUF_C_CONTIGUOUS;
    if (PyObject_GetBuffer(o, &out->b, flags) < 0) return -1;
    out->held = 1;
    if (out->b.len % itemsize != 0) {
        PyErr_SetString(PyExc_ValueError, "buffer length is not a whole number of items");
        return -1;
    }
    return 0;
}

/* A helper's end: its buffers released, then ValueError(bad) where bad is set, else None. */
static PyObject *finish(buf *bs, int n, const char *bad) {
    release(bs, n);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, bad);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* A refused call (arrays of the wrong lengths): its buffers released, ValueError(why). */
static PyObject *refuse(buf *bs, int n, const char *why) {
    release(bs, n);
    PyErr_SetString(PyExc_ValueError, why);
    return NULL;
}

/* Buffers of o[0], ..., o[n - 1] with items of size[i] bytes, writable from o[first_out] on;
 * on a failure every buffer taken is released. */
static int get_all(PyObject **o, buf *bs, int n, const Py_ssize_t *size, int first_out) {
    for (int i = 0; i < n; i++) {
        if (get(o[i], &bs[i], i >= first_out, size[i]) < 0) {
            release(bs, n);
            return -1;
        }
    }
    return 0;
}

/* Whether each of the n_bufs buffers holds n items of 8 bytes. */
static int all_of_length(const buf *bs, int n_bufs, Py_ssize_t n) {
    for (int i = 0; i < n_bufs; i++)
        if (bs[i].b.len / 8 != n) return 0;
    return 1;
}

/* Buffers of o[0], ..., o[n_bufs - 1] (n_bufs <= 8), int64 columns of one length, the last
 * (the output) writable: that length, or -1 with every buffer released and an error set
 * (ValueError(mismatched) where the lengths differ). */
static Py_ssize_t int64_columns(PyObject **o, buf *bs, int n_bufs, const char *mismatched) {
    static const Py_ssize_t eight[8] = {8, 8, 8, 8, 8, 8, 8, 8};
    if (get_all(o, bs, n_bufs, eight, n_bufs - 1) < 0) return -1;
    Py_ssize_t n = bs[0].b.len / 8;
    if (!all_of_length(bs, n_bufs, n)) {
        refuse(bs, n_bufs, mismatched);
        return -1;
    }
    return n;
}

/* The graph one longest-path pass reads. Edges count where their mask says so, or, with
 * `owner` (per event, int32, of the node's event `event`), where both ends' events have one
 * owner, not -1 (and a chain edge has a type, not NO_EDGE_TYPE): then `owner_max[o]` takes
 * the largest distance of o's nodes. */
typedef struct {
    Py_ssize_t n, n_lead, m;
    const int32_t *pred;
    const int64_t *wchain, *lead_nodes, *lead, *src, *dst, *w;
    const uint8_t *chain_ok, *edge_ok, *wait;
    const int32_t *owner, *event;
    const int8_t *chain_type;
    Py_ssize_t n_events, n_owners;
    int64_t *dist, *best, *owner_max;
} pass_args;

#define NO_EDGE_TYPE (-1)

static inline int32_t owner_of(const pass_args *a, Py_ssize_t v) {
    return a->owner[a->event[v]];
}

/* The pass; NULL, or what was wrong with the graph. Inlined into one function per value of
 * `by_owner` (a constant there): the plain pass tests neither owners nor their events. */
#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif
static ALWAYS_INLINE const char *longest_pass_of(const pass_args *a, const int by_owner) {
    const Py_ssize_t n = a->n, n_lead = a->n_lead, m = a->m;
    const int32_t *pred = a->pred;
    const int64_t *wchain = a->wchain, *lead_nodes = a->lead_nodes, *lead = a->lead,
                  *src = a->src, *dst = a->dst, *w = a->w;
    const uint8_t *wait = a->wait;
    int64_t *dist = a->dist, *best = a->best;
    Py_ssize_t k = 0; /* next lead node */
    Py_ssize_t e = 0;
    for (Py_ssize_t v = 0; v < n; v++) {
        int64_t val = -1, b = -1;
        if (k < n_lead && lead_nodes[k] < v) return "longest: lead nodes are not ascending";
        if (k < n_lead && lead_nodes[k] == v) {
            if (lead[k] > 0) val = lead[k];
            k++;
        }
        int32_t own = -1;
        if (by_owner) {
            if (a->event[v] < 0 || a->event[v] >= a->n_events) return "longest: a bad event";
            own = owner_of(a, v);
            if (own >= a->n_owners) return "longest: an owner beyond the owners";
        }
        int64_t p = pred[v];
        int chain = by_owner ? p >= 0 && own >= 0 && a->chain_type[v] != NO_EDGE_TYPE
                             : a->chain_ok[v] && p >= 0;
        if (chain) {
            if (p >= v) return "longest: a chain edge runs against the node order";
            if (!by_owner || owner_of(a, p) == own) {
                val = dist[p] + wchain[v];
                b = -2;
            }
        }
        int64_t cm = -1, ce = -1;
        for (; e < m && dst[e] <= v; e++) {
            if (dst[e] < v) return "longest: cross edges are not sorted by destination";
            if (by_owner ? own < 0 : !a->edge_ok[e]) continue;
            int64_t s = src[e];
            if (s < 0 || s >= v) return "longest: a cross edge runs against the node order";
            if (by_owner && owner_of(a, s) != own) continue;
            int64_t cand = dist[s] + w[e];
            if (ce < 0 || cand > cm) {
                cm = cand;
                ce = e;
            }
        }
        if (ce >= 0 && (cm > val || (wait[ce] && cm == val))) {
            val = cm;
            b = ce;
        }
        dist[v] = val < 0 ? 0 : val;
        if (best) best[v] = b;
        if (by_owner && own >= 0 && dist[v] > a->owner_max[own]) a->owner_max[own] = dist[v];
    }
    if (e < m) return "longest: a cross edge ends past the last node";
    return NULL;
}

static const char *longest_pass(const pass_args *a) { return longest_pass_of(a, 0); }

static const char *owner_pass(const pass_args *a) { return longest_pass_of(a, 1); }

/* longest(pred, wchain, chain_ok, lead_nodes, lead_ns, src, dst, w, edge_ok, wait,
 *         dist_out, best_out) -> None
 *
 * pred is int32 (node indices), the masks uint8, everything else int64. lead_nodes (ascending)
 * and lead_ns: nodes a path may begin at with that much time before them. dist_out[v]: length
 * of the longest path ending at v; best_out[v]: -1 (the path starts at v, after its lead),
 * -2 (it arrives by v's chain edge) or the index of the cross edge it arrives by; best_out
 * None: the distances alone. dist_out may be wchain itself (a what-if's scratch weights):
 * wchain[v] is read once, at v, before dist_out[v] is written. */
#define N_ARGS 12
static PyObject *longest(PyObject *self, PyObject *args) {
    PyObject *o[N_ARGS];
    buf bs[N_ARGS] = {{0}};
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                          &o[6], &o[7], &o[8], &o[9], &o[10], &o[11]))
        return NULL;
    static const Py_ssize_t size[N_ARGS] = {4, 8, 1, 8, 8, 8, 8, 8, 1, 1, 8, 8};
    /* best_out may be None: the distances alone (no array of n in-edges to allocate). */
    const int want_best = o[11] != Py_None;
    if (get_all(o, bs, want_best ? N_ARGS : N_ARGS - 1, size, 10) < 0) return NULL;
    Py_ssize_t n = bs[0].b.len / 4, n_lead = bs[3].b.len / 8, m = bs[5].b.len / 8;
    if (bs[1].b.len / 8 != n || bs[2].b.len != n || bs[4].b.len / 8 != n_lead ||
        bs[10].b.len / 8 != n || (want_best && bs[11].b.len / 8 != n) || bs[6].b.len / 8 != m ||
        bs[7].b.len / 8 != m || bs[8].b.len != m || bs[9].b.len != m) {
        return refuse(bs, N_ARGS, "longest: arrays of mismatched lengths");
    }
    pass_args a = {n, n_lead, m, bs[0].b.buf, bs[1].b.buf, bs[3].b.buf, bs[4].b.buf,
                   bs[5].b.buf, bs[6].b.buf, bs[7].b.buf, bs[2].b.buf, bs[8].b.buf, bs[9].b.buf,
                   NULL, NULL, NULL, 0, 0, bs[10].b.buf, want_best ? bs[11].b.buf : NULL, NULL};
    const char *bad;
    Py_BEGIN_ALLOW_THREADS
    bad = longest_pass(&a);
    Py_END_ALLOW_THREADS
    return finish(bs, N_ARGS, bad);
}
#undef N_ARGS

/* owner_lengths(pred, wchain, chain_type, lead_nodes, lead_ns, src, dst, w, wait, event,
 *               owner, dist_out, max_out) -> None
 *
 * `longest` over the edges whose two ends' events (`event`, int32 per node) have one owner
 * (`owner`, int32 per event; -1: none), chain edges of a type (chain_type int8, not -1):
 * each owner's own graph, in one pass. max_out[o] (int64, zeroed by the caller): the longest
 * of o's paths. */
#define N_ARGS 13
static PyObject *owner_lengths(PyObject *self, PyObject *args) {
    PyObject *o[N_ARGS];
    buf bs[N_ARGS] = {{0}};
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                          &o[6], &o[7], &o[8], &o[9], &o[10], &o[11], &o[12]))
        return NULL;
    static const Py_ssize_t size[N_ARGS] = {4, 8, 1, 8, 8, 8, 8, 8, 1, 4, 4, 8, 8};
    if (get_all(o, bs, N_ARGS, size, 11) < 0) return NULL;
    Py_ssize_t n = bs[0].b.len / 4, n_lead = bs[3].b.len / 8, m = bs[5].b.len / 8;
    if (bs[1].b.len / 8 != n || bs[2].b.len != n || bs[4].b.len / 8 != n_lead ||
        bs[6].b.len / 8 != m || bs[7].b.len / 8 != m || bs[8].b.len != m ||
        bs[9].b.len / 4 != n || bs[11].b.len / 8 != n) {
        return refuse(bs, N_ARGS, "owner_lengths: arrays of mismatched lengths");
    }
    pass_args a = {n, n_lead, m, bs[0].b.buf, bs[1].b.buf, bs[3].b.buf, bs[4].b.buf,
                   bs[5].b.buf, bs[6].b.buf, bs[7].b.buf, NULL, NULL, bs[8].b.buf,
                   bs[10].b.buf, bs[9].b.buf, bs[2].b.buf, bs[10].b.len / 4,
                   bs[12].b.len / 8, bs[11].b.buf, NULL, bs[12].b.buf};
    const char *bad;
    Py_BEGIN_ALLOW_THREADS
    bad = owner_pass(&a);
    Py_END_ALLOW_THREADS
    return finish(bs, N_ARGS, bad);
}
#undef N_ARGS

/* backtrack(best, pred, src, end, nodes_out) -> count (pred int32, the rest int64)
 *
 * The nodes of the path that ends at `end`, last first, into nodes_out[:count]. */
static PyObject *backtrack(PyObject *self, PyObject *args) {
    PyObject *o[4];
    Py_ssize_t end;
    buf bs[4] = {{0}};
    if (!PyArg_ParseTuple(args, "OOOnO", &o[0], &o[1], &o[2], &end, &o[3])) return NULL;
    static const Py_ssize_t bsize[4] = {8, 4, 8, 8};
    if (get_all(o, bs, 4, bsize, 3) < 0) return NULL;
    Py_ssize_t n = bs[0].b.len / 8, m = bs[2].b.len / 8;
    if (bs[1].b.len / 4 != n || bs[3].b.len / 8 != n || end < 0 || end >= n) {
        return refuse(bs, 4, "backtrack: bad arguments");
    }
    const int64_t *best = bs[0].b.buf, *src = bs[2].b.buf;
    const int32_t *pred = bs[1].b.buf;
    int64_t *out = bs[3].b.buf;
    Py_ssize_t count = 0;
    int64_t v = end;
    const char *bad = NULL;
    for (;;) {
        if (count >= n) {
            bad = "backtrack: the path does not end";
            break;
        }
        out[count++] = v;
        int64_t b = best[v], u;
        if (b == -1) break;
        if (b == -2) u = pred[v];
        else if (b >= 0 && b < m) u = src[b];
        else u = -1;
        if (u < 0 || u >= v) {
            bad = "backtrack: a step runs against the node order";
            break;
        }
        v = u;
    }
    release(bs, 4);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, bad);
        return NULL;
    }
    return PyLong_FromSsize_t(count);
}

/* sub_forest(parent, keep, g, start, end, parent_out, depth_out) -> bool
 *
 * badput.analysis._nesting.sub_nesting in one pass: parent (int64, n nodes of a forest in an
 * order where each parent comes before its children) and keep (uint8, n) select k nodes;
 * g, start, end (int64, k) are the kept nodes' thread keys and times. parent_out[j]: the kept
 * index of the nearest kept ancestor of kept node j (-1 at a root); depth_out[j]: its number
 * of kept ancestors. Returns False where the kept nodes are not in nesting's order (by g,
 * then start, the longer first), or not laid out as a depth-first walk in which each node's
 * elder sibling ends by its start (they overlap without nesting). */
static PyObject *sub_forest(PyObject *self, PyObject *args) {
    PyObject *o[7];
    buf bs[7] = {{0}};
    if (!PyArg_ParseTuple(args, "OOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6]))
        return NULL;
    static const Py_ssize_t bsize[7] = {8, 1, 8, 8, 8, 8, 8};
    if (get_all(o, bs, 7, bsize, 5) < 0) return NULL;
    Py_ssize_t n = bs[0].b.len / 8, k = bs[2].b.len / 8;
    if (bs[1].b.len != n || bs[3].b.len / 8 != k || bs[4].b.len / 8 != k ||
        bs[5].b.len / 8 != k || bs[6].b.len / 8 != k) {
        return refuse(bs, 7, "sub_forest: arrays of mismatched lengths");
    }
    const int64_t *parent = bs[0].b.buf, *g = bs[2].b.buf, *start = bs[3].b.buf,
                  *end = bs[4].b.buf;
    const uint8_t *keep = bs[1].b.buf;
    int64_t *sub = bs[5].b.buf, *depth = bs[6].b.buf;
    /* near[i]: kept index of node i's nearest kept ancestor-or-self, -1 where none. */
    int64_t *near = PyMem_RawMalloc((n ? n : 1) * sizeof(int64_t));
    if (!near) {
        release(bs, 7);
        return PyErr_NoMemory();
    }
    const char *bad = NULL;
    int nested = 1;
    Py_ssize_t j = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t p = parent[i];
        if (p >= i || p < -1) {
            bad = "sub_forest: a parent does not come before its child";
            break;
        }
        int64_t a = p >= 0 ? near[p] : -1;
        if (keep[i]) {
            if (j >= k) {
                bad = "sub_forest: more kept nodes than times";
                break;
            }
            sub[j] = a;
            depth[j] = a >= 0 ? depth[a] + 1 : 0;
            near[i] = j++;
        } else {
            near[i] = a;
        }
    }
    if (!bad && j != k) bad = "sub_forest: fewer kept nodes than times";
    /* The kept nodes in nesting's order (by thread, then start, the longer first), and node c
     * after c - 1 on its thread: c - 1 is its parent, or lies in the subtree of its elder
     * sibling (c - 1's ancestor at c's depth), which must end by c's start. */
    for (Py_ssize_t c = 1; !bad && nested && c < k; c++) {
        if (g[c] != g[c - 1]) {
            if (g[c] < g[c - 1]) nested = 0;
            continue;
        }
        if (start[c] < start[c - 1] || (start[c] == start[c - 1] && end[c] > end[c - 1])) {
            nested = 0;
            break;
        }
        if (sub[c] == c - 1) continue;
        int64_t s = c - 1;
        if (depth[s] < depth[c]) {
            nested = 0;
            break;
        }
        while (depth[s] > depth[c]) s = sub[s];
        if (sub[s] != sub[c] || end[s] > start[c]) nested = 0;
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(near);
    release(bs, 7);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, bad);
        return NULL;
    }
    return PyBool_FromLong(nested);
}

/* chain_pred(chain, pred_out) -> None (both int32)
 *
 * pred_out[v]: the last node before v with v's chain, -1 at a chain's first node (chains are
 * small non-negative ids). One pass, in place of a stable sort by chain. */
static PyObject *chain_pred(PyObject *self, PyObject *args) {
    PyObject *o[2];
    buf bs[2] = {{0}};
    if (!PyArg_ParseTuple(args, "OO", &o[0], &o[1])) return NULL;
    static const Py_ssize_t bsize[2] = {4, 4};
    if (get_all(o, bs, 2, bsize, 1) < 0) return NULL;
    Py_ssize_t n = bs[0].b.len / 4;
    if (bs[1].b.len / 4 != n) {
        return refuse(bs, 2, "chain_pred: arrays of mismatched lengths");
    }
    const int32_t *chain = bs[0].b.buf;
    int32_t *pred = bs[1].b.buf;
    int32_t top = -1;
    for (Py_ssize_t v = 0; v < n; v++) {
        if (chain[v] < 0) {
            return refuse(bs, 2, "chain_pred: a negative chain id");
        }
        if (chain[v] > top) top = chain[v];
    }
    int32_t *last = PyMem_RawMalloc(((size_t)top + 1) * sizeof(int32_t));
    if (!last) {
        release(bs, 2);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    for (int32_t c = 0; c <= top; c++) last[c] = -1;
    for (Py_ssize_t v = 0; v < n; v++) {
        pred[v] = last[chain[v]];
        last[chain[v]] = (int32_t)v;
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(last);
    release(bs, 2);
    Py_RETURN_NONE;
}

/* sort_runs(first, pos, end, rank) -> None (first uint8; pos, end, rank int64, written over)
 *
 * `nest`'s order within each run of opens at one (thread, start): pos holds the runs' input
 * positions, ascending within each run (first[i] set at each run's first); each run is put
 * in order of the longer first (end descending), then rank, then position, end and rank
 * moved with their positions. A run of a few by insertion, a longer one by qsort (the three
 * keys order any two positions: the same order either way). */
typedef struct {
    int64_t end, rank, pos;
} tie_key;

static int tie_before(const tie_key *a, const tie_key *b) {
    if (a->end != b->end) return a->end > b->end;
    if (a->rank != b->rank) return a->rank < b->rank;
    return a->pos < b->pos;
}

static int tie_cmp(const void *x, const void *y) {
    const tie_key *a = x, *b = y;
    return tie_before(a, b) ? -1 : tie_before(b, a) ? 1 : 0;
}

#define SHORT_RUN 16

static PyObject *sort_runs(PyObject *self, PyObject *args) {
    PyObject *o[4];
    buf bs[4] = {{0}};
    if (!PyArg_ParseTuple(args, "OOOO", &o[0], &o[1], &o[2], &o[3])) return NULL;
    static const Py_ssize_t bsize[4] = {1, 8, 8, 8};
    if (get_all(o, bs, 4, bsize, 1) < 0) return NULL;
    Py_ssize_t n = bs[0].b.len;
    if (!all_of_length(bs + 1, 3, n))
        return refuse(bs, 4, "sort_runs: arrays of mismatched lengths");
    if (n && !((const uint8_t *)bs[0].b.buf)[0]) {
        return refuse(bs, 4, "sort_runs: the first position begins no run");
    }
    const uint8_t *first = bs[0].b.buf;
    int64_t *pos = bs[1].b.buf, *end = bs[2].b.buf, *rank = bs[3].b.buf;
    Py_ssize_t longest = 0;
    for (Py_ssize_t lo = 0, hi; lo < n; lo = hi) {
        for (hi = lo + 1; hi < n && !first[hi]; hi++) {
        }
        if (hi - lo > longest) longest = hi - lo;
    }
    tie_key *k = PyMem_RawMalloc(((size_t)longest + 1) * sizeof(tie_key));
    if (!k) {
        release(bs, 4);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t lo = 0, hi; lo < n; lo = hi) {
        for (hi = lo + 1; hi < n && !first[hi]; hi++) {
        }
        Py_ssize_t m = hi - lo;
        for (Py_ssize_t i = 0; i < m; i++) {
            tie_key t = {end[lo + i], rank[lo + i], pos[lo + i]};
            if (m <= SHORT_RUN) { /* insertion: shift the later ones up */
                Py_ssize_t j = i;
                while (j > 0 && tie_before(&t, &k[j - 1])) {
                    k[j] = k[j - 1];
                    j--;
                }
                k[j] = t;
            } else {
                k[i] = t;
            }
        }
        if (m > SHORT_RUN) qsort(k, (size_t)m, sizeof(tie_key), tie_cmp);
        for (Py_ssize_t i = 0; i < m; i++) {
            pos[lo + i] = k[i].pos;
            end[lo + i] = k[i].end;
            rank[lo + i] = k[i].rank;
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(k);
    release(bs, 4);
    Py_RETURN_NONE;
}
#undef SHORT_RUN

/* marked_ancestors(parent, mark, near_out, far_out) -> None
 *
 * parent is int64 (-1 at a root), mark uint8, the outputs int32, either of them None (not
 * wanted). A forest whose every parent comes before its child (nesting's open order), of
 * fewer than 2**31 nodes. near_out[v]: the nearest node on the chain from v (itself included)
 * up to its root whose mark is set, far_out[v]: the farthest; -1 where none is. One pass in
 * node order: each node's answers extend its parent's. */
static PyObject *marked_ancestors(PyObject *self, PyObject *args) {
    PyObject *o[4];
    buf bs[4] = {{0}};
    if (!PyArg_ParseTuple(args, "OOOO", &o[0], &o[1], &o[2], &o[3])) return NULL;
    const int want_near = o[2] != Py_None, want_far = o[3] != Py_None;
    if (!want_near && !want_far) {
        PyErr_SetString(PyExc_ValueError, "marked_ancestors: no output wanted");
        return NULL;
    }
    static const Py_ssize_t bsize[4] = {8, 1, 4, 4};
    /* the wanted outputs first among the buffers taken: none is read for a None */
    PyObject *taken[4] = {o[0], o[1], want_near ? o[2] : o[3], o[3]};
    const int n_bufs = 2 + want_near + want_far;
    if (get_all(taken, bs, n_bufs, bsize, 2) < 0) return NULL;
    Py_ssize_t n = bs[0].b.len / 8;
    if (bs[1].b.len != n || bs[2].b.len / 4 != n || (n_bufs == 4 && bs[3].b.len / 4 != n)) {
        return refuse(bs, n_bufs, "marked_ancestors: arrays of mismatched lengths");
    }
    if (n > INT32_MAX) return refuse(bs, n_bufs, "marked_ancestors: too many nodes for int32");
    const int64_t *parent = bs[0].b.buf;
    const uint8_t *mark = bs[1].b.buf;
    int32_t *near = want_near ? bs[2].b.buf : NULL;
    int32_t *far = want_far ? bs[n_bufs - 1].b.buf : NULL;
    const char *bad = NULL;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t v = 0; v < n; v++) {
        int64_t p = parent[v];
        if (p >= v || p < -1) {
            bad = "marked_ancestors: a parent that does not come before its child";
            break;
        }
        int32_t self_mark = mark[v] ? (int32_t)v : -1;
        if (near) near[v] = self_mark >= 0 || p < 0 ? self_mark : near[p];
        if (far) {
            int32_t up = p >= 0 ? far[p] : -1;
            far[v] = up >= 0 ? up : self_mark;
        }
    }
    Py_END_ALLOW_THREADS
    return finish(bs, n_bufs, bad);
}

/* `nest`'s repair of the parents found by depth (the nodes in open order): a node its depth
 * parent does not contain gets the first node up from the one opened just before it that
 * does (-1: none). From the last node to the first, so that the climb reads the parents of
 * the nodes before the one repaired as the depths left them. */
static void repair_parents(Py_ssize_t n, const int64_t *g, const int64_t *start,
                           const int64_t *end, int64_t *parent) {
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        int64_t p = parent[i];
        if (p < 0 || end[i] <= end[p]) continue;
        int64_t c = i - 1;
        while (c >= 0 && !(g[c] == g[i] && start[c] <= start[i] && end[i] <= end[c]))
            c = parent[c];
        parent[i] = c;
    }
}

/* nest_parents(open_keys, close_keys, g, start, end, parent_out) -> bool
 *
 * The parents `nest` (badput.analysis._nesting) finds, after its sort: every argument int64.
 * open_keys: each node's event key (group, start, class), ascending, the nodes in open order;
 * close_keys: the keys of the closes, ascending; g, start, end: the nodes' own, in open
 * order. A node's depth is the opens up to it less the closes whose keys sort before its own
 * (no close ties an open: their classes differ); its parent the last node before it one level
 * up, climbed from the node just before it to the first that contains it where that one
 * does not. The climb reads the parents found by depth alone: nodes are repaired from the
 * last to the first, so those before the one repaired are as yet unchanged. False (nothing
 * to trust in parent_out) where a depth is below 1: closes sort before their own opens only
 * when an end precedes its start, whose parents the numpy version decides. */
static PyObject *nest_parents(PyObject *self, PyObject *args) {
    PyObject *o[6];
    buf bs[6] = {{0}};
    if (!PyArg_ParseTuple(args, "OOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5]))
        return NULL;
    Py_ssize_t n = int64_columns(o, bs, 6, "nest_parents: arrays of mismatched lengths");
    if (n < 0) return NULL;
    const int64_t *okey = bs[0].b.buf, *ckey = bs[1].b.buf, *g = bs[2].b.buf,
                  *start = bs[3].b.buf, *end = bs[4].b.buf;
    int64_t *parent = bs[5].b.buf;
    /* last[d]: the last node so far at depth d (1 <= d <= n). */
    int64_t *last = PyMem_RawMalloc(((size_t)n + 2) * sizeof(int64_t));
    if (!last) {
        release(bs, 6);
        return PyErr_NoMemory();
    }
    int nested = 1;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t closed = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        while (closed < n && ckey[closed] < okey[i]) closed++;
        int64_t d = (int64_t)i + 1 - (int64_t)closed;
        if (d < 1) {
            nested = 0;
            break;
        }
        parent[i] = d >= 2 ? last[d - 1] : -1;
        last[d] = i;
    }
    if (nested) repair_parents(n, g, start, end, parent);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(last);
    release(bs, 6);
    return PyBool_FromLong(nested);
}

/* nest_stack(open_keys, kg, ks, ke, g, start, end, g_lo, width, lo, parent_out) -> int
 *
 * `nest_parents` without the closes' keys sorted: every array int64, the nodes in open order
 * (open_keys ascending, as `event_keys` makes them from kg, ks and ke: the keys' frame of g,
 * start and end), each close's key made here as `event_keys` makes it. The closes of the
 * nodes still open (those whose keys do not sort before the next open's) are held in order,
 * the earliest on top: before each open those that sort before it go, and the depth is the
 * rest plus one, the same count `nest_parents` makes of all the closes sorted. A close joins
 * on top where its node ends within the one opened around it (nested); below, where it ends
 * later, the later ones moved up. Returns 1 (parent_out set, repaired as `nest_parents`
 * does), 0 where a close sorts before its own open (an end before its start), -1 where the
 * moves pass a budget of a few per node (many long overlapping intervals: the caller sorts
 * the closes instead); parent_out is not to be trusted then. */
static PyObject *nest_stack(PyObject *self, PyObject *args) {
    PyObject *o[8];
    buf bs[8] = {{0}};
    long long g_lo, width, lo;
    if (!PyArg_ParseTuple(args, "OOOOOOOLLLO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                          &o[6], &g_lo, &width, &lo, &o[7]))
        return NULL;
    Py_ssize_t n = int64_columns(o, bs, 8, "nest_stack: arrays of mismatched lengths");
    if (n < 0) return NULL;
    const int64_t *okey = bs[0].b.buf, *kg = bs[1].b.buf, *ks = bs[2].b.buf,
                  *ke = bs[3].b.buf, *g = bs[4].b.buf, *start = bs[5].b.buf,
                  *end = bs[6].b.buf;
    int64_t *parent = bs[7].b.buf;
    /* last[d]: the last node so far at depth d (1 <= d <= n); open: the closes held. */
    int64_t *last = PyMem_RawMalloc(((size_t)n + 2) * sizeof(int64_t));
    int64_t *open = PyMem_RawMalloc(((size_t)n + 1) * sizeof(int64_t));
    if (!last || !open) {
        PyMem_RawFree(last);
        PyMem_RawFree(open);
        release(bs, 8);
        return PyErr_NoMemory();
    }
    int status = 1;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t held = 0;
    int64_t budget = 4 * (int64_t)n + 4096; /* moves of held closes allowed in all */
    for (Py_ssize_t i = 0; i < n && status == 1; i++) {
        while (held > 0 && open[held - 1] < okey[i]) held--;
        int64_t d = (int64_t)held + 1;
        parent[i] = d >= 2 ? last[d - 1] : -1;
        last[d] = i;
        int64_t base = (kg[i] - (int64_t)g_lo) * (int64_t)width - (int64_t)lo;
        int64_t close = (base + ke[i]) * 3 + (ke[i] <= ks[i] ? 2 : 0);
        if (close < okey[i]) {
            status = 0;
            break;
        }
        Py_ssize_t j = held;
        while (j > 0 && open[j - 1] < close) {
            open[j] = open[j - 1];
            j--;
            if (--budget < 0) {
                status = -1;
                break;
            }
        }
        open[j] = close;
        held++;
    }
    if (status == 1) repair_parents(n, g, start, end, parent);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(last);
    PyMem_RawFree(open);
    release(bs, 8);
    return PyLong_FromLong(status);
}

/* The first index in [lo, hi) (hi > lo) whose value in the ascending v is past t (after it
 * with `upper`, else at or after it), hi where none is: searched out from `hint`, by steps
 * that double, then halved. Near the hint (the last answer on that chain, for queries that
 * come in time order) it reads a few values, not log2 of the chain. */
static Py_ssize_t bound_from(const int64_t *v, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t hint,
                             int64_t t, int upper) {
#define BEFORE(x) (upper ? v[x] <= t : v[x] < t)
    Py_ssize_t a, b; /* the bound lies in [a, b] */
    if (hint < lo) hint = lo;
    if (hint >= hi) hint = hi - 1;
    Py_ssize_t step = 1;
    if (BEFORE(hint)) {
        a = hint + 1;
        while (a + step - 1 < hi && BEFORE(a + step - 1)) {
            a += step;
            step *= 2;
        }
        b = a + step - 1 < hi ? a + step - 1 : hi;
    } else {
        b = hint;
        while (b - step >= lo && !BEFORE(b - step)) {
            b -= step;
            step *= 2;
        }
        a = b - step >= lo ? b - step + 1 : lo;
    }
    while (a < b) {
        Py_ssize_t m = a + (b - a) / 2;
        if (BEFORE(m))
            a = m + 1;
        else
            b = m;
    }
    return a;
#undef BEFORE
}

/* last_at_or_before(key_a, t_a, key_q, t_q, after, out) -> bool
 *
 * Per query i, the index of the `a` with key key_q[i] and the latest time at or before
 * t_q[i] (the last of those tied), or with `after` the earliest time at or after it (the
 * first of those tied): -1 where none is. Every array int64; the `a` sorted by (key, time),
 * else False and nothing written (the caller sorts). Each key's run of `a` keeps a cursor at
 * its last answer, from which the next query on that key searches. */
static PyObject *last_at_or_before(PyObject *self, PyObject *args) {
    PyObject *o[5];
    int after;
    buf bs[5] = {{0}};
    if (!PyArg_ParseTuple(args, "OOOOpO", &o[0], &o[1], &o[2], &o[3], &after, &o[4])) return NULL;
    static const Py_ssize_t bsize[5] = {8, 8, 8, 8, 8};
    if (get_all(o, bs, 5, bsize, 4) < 0) return NULL;
    Py_ssize_t n = bs[0].b.len / 8, q = bs[2].b.len / 8;
    if (bs[1].b.len / 8 != n || bs[3].b.len / 8 != q || bs[4].b.len / 8 != q) {
        return refuse(bs, 5, "last_at_or_before: arrays of mismatched lengths");
    }
    const int64_t *key_a = bs[0].b.buf, *t_a = bs[1].b.buf, *key_q = bs[2].b.buf,
                  *t_q = bs[3].b.buf;
    int64_t *out = bs[4].b.buf;
    int sorted = 1;
    Py_ssize_t runs = n ? 1 : 0;
    for (Py_ssize_t i = 1; i < n && sorted; i++) {
        if (key_a[i] != key_a[i - 1]) {
            sorted = key_a[i] > key_a[i - 1];
            runs++;
        } else {
            sorted = t_a[i] >= t_a[i - 1];
        }
    }
    if (!sorted) {
        release(bs, 5);
        Py_RETURN_FALSE;
    }
    /* each run of one key: its first index (run_lo[r], run_lo[runs] = n) and a cursor */
    Py_ssize_t *run_lo = PyMem_RawMalloc((size_t)(2 * runs + 1) * sizeof(Py_ssize_t));
    if (!run_lo) {
        release(bs, 5);
        return PyErr_NoMemory();
    }
    Py_ssize_t *cursor = run_lo + runs + 1;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t r = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i == 0 || key_a[i] != key_a[i - 1]) {
            run_lo[r] = i;
            cursor[r] = i;
            r++;
        }
    }
    run_lo[runs] = n;
    Py_ssize_t last_run = -1; /* the run of last_key, -1 where it has none */
    int64_t last_key = 0;
    for (Py_ssize_t i = 0; i < q; i++) {
        int64_t k = key_q[i];
        if (i == 0 || k != last_key) { /* the run of key k, by halves */
            Py_ssize_t a = 0, b = runs;
            while (a < b) {
                Py_ssize_t m = a + (b - a) / 2;
                if (key_a[run_lo[m]] < k)
                    a = m + 1;
                else
                    b = m;
            }
            last_run = a < runs && key_a[run_lo[a]] == k ? a : -1;
            last_key = k;
        }
        if (last_run < 0) {
            out[i] = -1;
            continue;
        }
        Py_ssize_t lo = run_lo[last_run], hi = run_lo[last_run + 1];
        Py_ssize_t at = bound_from(t_a, lo, hi, cursor[last_run], t_q[i], !after);
        if (after) {
            out[i] = at < hi ? at : -1;
        } else {
            out[i] = at > lo ? at - 1 : -1;
            if (at > lo) at--;
        }
        cursor[last_run] = at;
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(run_lo);
    release(bs, 5);
    Py_RETURN_TRUE;
}

/* span_union(starts, ends, order, out_starts, out_ends) -> k
 *
 * The union of spans [starts[i], ends[i]) (int64, every one non-empty) taken in `order`
 * (int64, the positions by start, ties in input order: badput.analysis.intervals'
 * from_spans): a span that starts past the reach of those before it (their largest end)
 * begins a new interval, whose end is that reach where the next begins. The k intervals are
 * written to out_starts and out_ends (room for all). One pass, in place of a running maximum,
 * a mask and four gathers. */
static PyObject *span_union(PyObject *self, PyObject *args) {
    PyObject *o[5];
    buf bs[5] = {{0}};
    if (!PyArg_ParseTuple(args, "OOOOO", &o[0], &o[1], &o[2], &o[3], &o[4])) return NULL;
    static const Py_ssize_t bsize[5] = {8, 8, 8, 8, 8};
    if (get_all(o, bs, 5, bsize, 3) < 0) return NULL;
    Py_ssize_t n = bs[0].b.len / 8;
    if (bs[1].b.len / 8 != n || bs[2].b.len / 8 != n || bs[3].b.len / 8 < n ||
        bs[4].b.len / 8 < n) {
        return refuse(bs, 5, "span_union: arrays of mismatched lengths");
    }
    const int64_t *start = bs[0].b.buf, *end = bs[1].b.buf, *order = bs[2].b.buf;
    int64_t *out_start = bs[3].b.buf, *out_end = bs[4].b.buf;
    Py_ssize_t k = 0;
    const char *bad = NULL;
    Py_BEGIN_ALLOW_THREADS
    int64_t last_start = 0, reach = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t at = order[i];
        if (at < 0 || at >= n) {
            bad = "span_union: a position out of range";
            break;
        }
        int64_t s = start[at], e = end[at];
        if (e <= s || (i > 0 && s < last_start)) {
            bad = "span_union: an empty span, or spans out of order";
            break;
        }
        last_start = s;
        if (k == 0 || s > reach) {
            if (k) out_end[k - 1] = reach;
            out_start[k++] = s;
            reach = e;
        } else if (e > reach) {
            reach = e;
        }
    }
    if (k) out_end[k - 1] = reach;
    Py_END_ALLOW_THREADS
    if (bad) return finish(bs, 5, bad);
    release(bs, 5);
    return PyLong_FromSsize_t(k);
}

/* overlaps(a_starts, a_ends, b_starts, b_ends, out_starts, out_ends) -> int
 *
 * The intersection of two canonical interval sets (badput.analysis.intervals: starts
 * ascending, each interval of positive length and ending strictly before the next starts),
 * every argument int64, the outputs of at least len(a) + len(b) items (more than the pieces
 * two such sets can share). One merge of the two: each pair that overlaps gives one piece,
 * in order; returns the number of pieces written. */
static PyObject *overlaps(PyObject *self, PyObject *args) {
    PyObject *o[6];
    buf bs[6] = {{0}};
    if (!PyArg_ParseTuple(args, "OOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5]))
        return NULL;
    static const Py_ssize_t bsize[6] = {8, 8, 8, 8, 8, 8};
    if (get_all(o, bs, 6, bsize, 4) < 0) return NULL;
    Py_ssize_t n = bs[0].b.len / 8, m = bs[2].b.len / 8;
    if (bs[1].b.len / 8 != n || bs[3].b.len / 8 != m || bs[4].b.len / 8 < n + m ||
        bs[5].b.len / 8 < n + m) {
        return refuse(bs, 6, "overlaps: arrays of mismatched lengths");
    }
    const int64_t *a_start = bs[0].b.buf, *a_end = bs[1].b.buf, *b_start = bs[2].b.buf,
                  *b_end = bs[3].b.buf;
    int64_t *out_start = bs[4].b.buf, *out_end = bs[5].b.buf;
    Py_ssize_t i = 0, j = 0, k = 0;
    Py_BEGIN_ALLOW_THREADS
    while (i < n && j < m && k < n + m) {
        int64_t ea = a_end[i], eb = b_end[j];
        int64_t lo = a_start[i] > b_start[j] ? a_start[i] : b_start[j];
        int64_t hi = ea < eb ? ea : eb;
        if (lo < hi) {
            out_start[k] = lo;
            out_end[k] = hi;
            k++;
        }
        /* The interval that ends first meets none of the other set's after the one it is
         * paired with; at equal ends neither meets the other's next (it starts later). */
        if (ea <= eb) i++;
        if (eb <= ea) j++;
    }
    Py_END_ALLOW_THREADS
    release(bs, 6);
    return PyLong_FromSsize_t(k);
}

/* shrink(edges, inside, w, scale, all_host) -> None
 *
 * A what-if's new weights of host edges (badput.analysis.critical_path._shrunk), in place:
 * edges int32 (node indices), inside and w int64, scale a float. For each edge e (the k-th):
 * the part of w[e] inside the change's spans is min(inside[k], w[e]), at least 0; the part
 * that moves (that one, or with all_host the rest) scales by `scale`, rounded half to even
 * as numpy rounds, and is added back to the part kept. */
static PyObject *shrink(PyObject *self, PyObject *args) {
    PyObject *o[3];
    buf bs[3] = {{0}};
    double scale;
    int all_host;
    if (!PyArg_ParseTuple(args, "OOOdp", &o[0], &o[1], &o[2], &scale, &all_host)) return NULL;
    static const Py_ssize_t bsize[3] = {4, 8, 8};
    if (get_all(o, bs, 3, bsize, 2) < 0) return NULL;
    Py_ssize_t n = bs[0].b.len / 4, m = bs[2].b.len / 8;
    if (bs[1].b.len / 8 != n) {
        return refuse(bs, 3, "shrink: arrays of mismatched lengths");
    }
    const int32_t *edges = bs[0].b.buf;
    const int64_t *inside = bs[1].b.buf;
    int64_t *w = bs[2].b.buf;
    const char *bad = NULL;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++) {
        int32_t e = edges[k];
        if (e < 0 || e >= m) {
            bad = "shrink: an edge outside the weights";
            break;
        }
        int64_t wk = w[e], in = inside[k] < wk ? inside[k] : wk;
        if (in < 0) in = 0;
        int64_t moved = all_host ? wk - in : in, kept = all_host ? in : wk - in;
        if (scale != 0.0) kept += (int64_t)nearbyint((double)moved * scale);
        w[e] = kept;
    }
    Py_END_ALLOW_THREADS
    return finish(bs, 3, bad);
}

/* edge_time(mask, pred, at) -> None
 *
 * What the host edges hold of a quantity given at each node (at, int64, in place): at[v]
 * becomes at[v] - at[pred[v]] for each node v of `mask` (uint8, its chain edge is a host
 * edge; pred int32); other nodes keep theirs. Nodes go last first, so every source is read
 * before its own value changes (a source precedes its node). */
static PyObject *edge_time(PyObject *self, PyObject *args) {
    PyObject *o[3];
    buf bs[3] = {{0}};
    if (!PyArg_ParseTuple(args, "OOO", &o[0], &o[1], &o[2])) return NULL;
    static const Py_ssize_t bsize[3] = {1, 4, 8};
    if (get_all(o, bs, 3, bsize, 2) < 0) return NULL;
    Py_ssize_t n = bs[0].b.len;
    if (bs[1].b.len / 4 != n || bs[2].b.len / 8 != n) {
        return refuse(bs, 3, "edge_time: arrays of mismatched lengths");
    }
    const uint8_t *mask = bs[0].b.buf;
    const int32_t *pred = bs[1].b.buf;
    int64_t *at = bs[2].b.buf;
    const char *bad = NULL;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t v = n - 1; v >= 0; v--) {
        if (!mask[v]) continue;
        int32_t p = pred[v];
        if (p < 0 || p >= v) {
            bad = "edge_time: a host edge without a source before its node";
            break;
        }
        at[v] -= at[p];
    }
    Py_END_ALLOW_THREADS
    return finish(bs, 3, bad);
}

/* scale_masked(mask, w, scale) -> None
 *
 * w[v] (int64, in place) times `scale` for each node v of `mask` (uint8), rounded half to
 * even as numpy rounds. */
static PyObject *scale_masked(PyObject *self, PyObject *args) {
    PyObject *o[2];
    buf bs[2] = {{0}};
    double scale;
    if (!PyArg_ParseTuple(args, "OOd", &o[0], &o[1], &scale)) return NULL;
    static const Py_ssize_t bsize[2] = {1, 8};
    if (get_all(o, bs, 2, bsize, 1) < 0) return NULL;
    Py_ssize_t n = bs[0].b.len;
    if (bs[1].b.len / 8 != n) return refuse(bs, 2, "scale_masked: arrays of mismatched lengths");
    const uint8_t *mask = bs[0].b.buf;
    int64_t *w = bs[1].b.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t v = 0; v < n; v++) {
        if (mask[v]) w[v] = (int64_t)nearbyint((double)w[v] * scale);
    }
    Py_END_ALLOW_THREADS
    return finish(bs, 2, NULL);
}

/* node_keys(t, chain, depth, t_lo, s_bits, c_bits, key_out) -> None
 *
 * The order key of a dependency graph's 2E nodes (badput.analysis._graph._order_key packs the
 * same from its class and depth-key columns): (t - t_lo, class, depth key, chain) in one
 * int64, `s_bits` bits for the depth key and `c_bits` for the chain. Node ids as graph_nodes
 * takes them: host starts [0, H), GPU starts [H, E), host ends [E, E + H), GPU ends after, H
 * the length of depth (int32, per host event, non-negative). Classes: GPU end 0, host end 1,
 * host start 2, GPU start 3; the depth key is a host start's depth, a host end's minus it, a
 * GPU node's 0, each plus the largest depth. t (int64) and chain (int32) per node id; a value
 * that would not fit its bits is refused. One pass, in place of two columns and six. */
static PyObject *node_keys(PyObject *self, PyObject *args) {
    PyObject *o[4];
    buf bs[4] = {{0}};
    long long t_lo;
    int s_bits, c_bits;
    if (!PyArg_ParseTuple(args, "OOOLiiO", &o[0], &o[1], &o[2], &t_lo, &s_bits, &c_bits, &o[3]))
        return NULL;
    static const Py_ssize_t bsize[4] = {8, 4, 4, 8};
    if (get_all(o, bs, 4, bsize, 3) < 0) return NULL;
    Py_ssize_t n = bs[0].b.len / 8, n_host = bs[2].b.len / 4;
    if (n % 2 || bs[1].b.len / 4 != n || bs[3].b.len / 8 != n || 2 * n_host > n) {
        return refuse(bs, 4, "node_keys: arrays of mismatched lengths");
    }
    if (s_bits < 0 || c_bits < 0 || s_bits + c_bits > 60) {
        return refuse(bs, 4, "node_keys: key parts too wide");
    }
    const int64_t *t = bs[0].b.buf;
    const int32_t *chain = bs[1].b.buf, *depth = bs[2].b.buf;
    int64_t *key = bs[3].b.buf;
    Py_ssize_t n_ev = n / 2;
    int64_t s_top = ((int64_t)1 << s_bits) - 1, c_top = ((int64_t)1 << c_bits) - 1;
    int64_t t_top = (INT64_MAX >> (2 + s_bits + c_bits)), d_max = 0;
    const char *bad = NULL;
    for (Py_ssize_t i = 0; i < n_host; i++) {
        if (depth[i] > d_max) d_max = depth[i];
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t v = 0; v < n; v++) {
        Py_ssize_t e = v < n_ev ? v : v - n_ev;
        int host = e < n_host;
        int64_t cls = host ? (v < n_ev ? 2 : 1) : (v < n_ev ? 3 : 0);
        int64_t sub = d_max + (host ? (v < n_ev ? depth[e] : -(int64_t)depth[e]) : 0);
        int64_t dt = (int64_t)((uint64_t)t[v] - (uint64_t)t_lo);
        if (t[v] < t_lo || dt > t_top || sub < 0 || sub > s_top || chain[v] < 0 ||
            chain[v] > c_top) {
            bad = "node_keys: a time, depth or chain out of its range";
            break;
        }
        key[v] = ((((dt << 2) | cls) << s_bits | sub) << c_bits) | chain[v];
    }
    Py_END_ALLOW_THREADS
    return finish(bs, 4, bad);
}

/* graph_nodes(topo, t, chain, pos_out, event_out, start_out, ns_out, pred_out) -> None
 *
 * A dependency graph's node arrays from its topological order (badput.analysis._graph):
 * topo (int64) lists the 2E node ids in order, id e < E the start node of event e and E + e
 * its end node; t (int64) and chain (int32, small non-negative ids) are per node id. Per
 * node in order: its event (int32), whether it is a start (uint8), its time (int64) and the
 * node before it on its chain (int32, -1 at a chain's first: `_chain_pred`); pos_out (int32)
 * is each node id's place in the order. One pass, in place of five gathers and a sort. */
static PyObject *graph_nodes(PyObject *self, PyObject *args) {
    PyObject *o[8];
    buf bs[8] = {{0}};
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7]))
        return NULL;
    static const Py_ssize_t bsize[8] = {8, 8, 4, 4, 4, 1, 8, 4};
    if (get_all(o, bs, 8, bsize, 3) < 0) return NULL;
    Py_ssize_t n = bs[0].b.len / 8;
    if (n % 2 || bs[1].b.len / 8 != n || bs[2].b.len / 4 != n || bs[3].b.len / 4 != n ||
        bs[4].b.len / 4 != n || bs[5].b.len != n || bs[6].b.len / 8 != n ||
        bs[7].b.len / 4 != n) {
        return refuse(bs, 8, "graph_nodes: arrays of mismatched lengths");
    }
    const int64_t *topo = bs[0].b.buf, *t = bs[1].b.buf;
    const int32_t *chain = bs[2].b.buf;
    int32_t *pos = bs[3].b.buf, *event = bs[4].b.buf, *pred = bs[7].b.buf;
    uint8_t *start = bs[5].b.buf;
    int64_t *ns = bs[6].b.buf;
    int64_t n_ev = n / 2;
    int32_t top = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (chain[i] < 0 || topo[i] < 0 || topo[i] >= n) {
            return refuse(bs, 8, "graph_nodes: a node id or chain out of range");
        }
        if (chain[i] > top) top = chain[i];
    }
    int32_t *last = PyMem_RawMalloc(((size_t)top + 1) * sizeof(int32_t));
    if (!last) {
        release(bs, 8);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    for (int32_t c = 0; c <= top; c++) last[c] = -1;
    for (Py_ssize_t v = 0; v < n; v++) {
        int64_t id = topo[v];
        int32_t c = chain[id];
        pos[id] = (int32_t)v;
        event[v] = (int32_t)(id < n_ev ? id : id - n_ev);
        start[v] = id < n_ev;
        ns[v] = t[id];
        pred[v] = last[c];
        last[c] = (int32_t)v;
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(last);
    release(bs, 8);
    Py_RETURN_NONE;
}

/* chain_types(pred, event, start, ns, root, blocking, empty_queue, n_host, types,
 *             type_out, weight_out) -> None
 *
 * Each node's chain edge (badput.analysis._graph.build_graph): pred, event (int32) and start
 * (uint8) per node as graph_nodes gives them, ns (int64) per node; root and blocking (uint8)
 * per event, empty_queue (uint8) per GPU event (event - n_host); types the edge type codes
 * (NO_EDGE, HOST, DEPENDENCY, BLOCKING, GPU, KERNEL_GAP). A host node's edge is a dependency
 * (a root event's start after a root event's end), blocking (the end of a blocking call) or
 * host work; a GPU node's is the activity (its end) or the gap before it (its start), none
 * where the launch found the stream's queue empty. The weight is the time from the previous
 * node, 0 where no edge is or the edge is blocking. */
static PyObject *chain_types(PyObject *self, PyObject *args) {
    PyObject *o[9];
    buf bs[9] = {{0}};
    Py_ssize_t n_host;
    int t_none, t_host, t_dep, t_block, t_gpu, t_gap;
    if (!PyArg_ParseTuple(args, "OOOOOOOn(iiiiii)OO", &o[0], &o[1], &o[2], &o[3], &o[4],
                          &o[5], &o[6], &n_host, &t_none, &t_host, &t_dep, &t_block, &t_gpu,
                          &t_gap, &o[7], &o[8]))
        return NULL;
    static const Py_ssize_t bsize[9] = {4, 4, 1, 8, 1, 1, 1, 1, 8};
    if (get_all(o, bs, 9, bsize, 7) < 0) return NULL;
    Py_ssize_t n = bs[0].b.len / 4, n_ev = bs[4].b.len, n_gpu = bs[6].b.len;
    if (bs[1].b.len / 4 != n || bs[2].b.len != n || bs[3].b.len / 8 != n ||
        bs[5].b.len != n_ev || n_host < 0 || n_host + n_gpu != n_ev || bs[7].b.len != n ||
        bs[8].b.len / 8 != n) {
        return refuse(bs, 9, "chain_types: arrays of mismatched lengths");
    }
    const int32_t *pred = bs[0].b.buf, *event = bs[1].b.buf;
    const uint8_t *start = bs[2].b.buf, *root = bs[4].b.buf, *blocking = bs[5].b.buf,
                  *empty = bs[6].b.buf;
    const int64_t *ns = bs[3].b.buf;
    int8_t *type = bs[7].b.buf;
    int64_t *weight = bs[8].b.buf;
    const char *bad = NULL;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t v = 0; v < n; v++) {
        int32_t p = pred[v], e = event[v];
        /* p < v: its event was checked at its own turn. */
        if (p >= v || p < -1 || e < 0 || e >= n_ev) {
            bad = "chain_types: a node or event out of range";
            break;
        }
        int t = t_none;
        if (p >= 0) {
            if (e < n_host) {
                if (start[v] && !start[p] && root[event[p]] && root[e])
                    t = t_dep;
                else if (!start[v] && blocking[e])
                    t = t_block;
                else
                    t = t_host;
            } else if (!start[v]) {
                t = t_gpu;
            } else if (!empty[e - n_host]) {
                t = t_gap;
            }
        }
        type[v] = (int8_t)t;
        weight[v] = (t == t_none || t == t_block) ? 0 : ns[v] - ns[p];
    }
    Py_END_ALLOW_THREADS
    return finish(bs, 9, bad);
}

/* span_cover(node_event, node_ns, event_chain, n_host, s_key, s_start, s_end, out) -> None
 *
 * For each host node (event < n_host), the time its chain's spans cover before the node's
 * time (badput.analysis.critical_path._span_time): node_event, event_chain int32, the rest
 * int64; the spans merged per chain (disjoint, sorted by chain then start: `_merged`).
 * Nodes come in time order, so one pointer per chain walks its spans once; a node earlier
 * than the last of its chain starts that chain's walk over. Nodes of other chains and GPU
 * nodes are left as they are. */
static PyObject *span_cover(PyObject *self, PyObject *args) {
    PyObject *o[7];
    buf bs[7] = {{0}};
    Py_ssize_t n_host;
    if (!PyArg_ParseTuple(args, "OOOnOOOO", &o[0], &o[1], &o[2], &n_host, &o[3], &o[4], &o[5],
                          &o[6]))
        return NULL;
    static const Py_ssize_t bsize[7] = {4, 8, 4, 8, 8, 8, 8};
    if (get_all(o, bs, 7, bsize, 6) < 0) return NULL;
    Py_ssize_t n = bs[0].b.len / 4, n_ev = bs[2].b.len / 4, k = bs[3].b.len / 8;
    if (bs[1].b.len / 8 != n || bs[4].b.len / 8 != k || bs[5].b.len / 8 != k ||
        bs[6].b.len / 8 != n || n_host < 0 || n_host > n_ev) {
        return refuse(bs, 7, "span_cover: arrays of mismatched lengths");
    }
    const int32_t *event = bs[0].b.buf, *chain_of = bs[2].b.buf;
    const int64_t *t = bs[1].b.buf, *key = bs[3].b.buf, *s0 = bs[4].b.buf, *s1 = bs[5].b.buf;
    int64_t *out = bs[6].b.buf;
    int64_t n_chains = 0;
    for (Py_ssize_t e = 0; e < n_host; e++)
        if (chain_of[e] + (int64_t)1 > n_chains) n_chains = chain_of[e] + (int64_t)1;
    const char *bad = NULL;
    for (Py_ssize_t i = 0; i < k && !bad; i++)
        if (key[i] < 0 || (i && key[i] < key[i - 1])) bad = "span_cover: spans not by chain";
    /* Per chain: its spans [lo, hi), the walk's last span (at or before the last time) and
     * the covered time of the spans before that one, and the last time asked. */
    if (bad) return refuse(bs, 7, bad);
    int64_t *st = PyMem_RawMalloc(((size_t)n_chains * 5 + 1) * sizeof(int64_t));
    if (!st) {
        release(bs, 7);
        return PyErr_NoMemory();
    }
    int64_t *lo = st, *hi = st + n_chains, *at = st + 2 * n_chains, *acc = st + 3 * n_chains,
            *last_t = st + 4 * n_chains;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t c = 0; c < n_chains; c++) {
        lo[c] = hi[c] = 0;
        at[c] = -1;
        acc[c] = 0;
        last_t[c] = INT64_MIN;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        if (key[i] >= n_chains) break; /* spans of chains without host events: none asks */
        if (i == 0 || key[i] != key[i - 1]) lo[key[i]] = i;
        hi[key[i]] = i + 1;
    }
    for (Py_ssize_t v = 0; v < n; v++) {
        int32_t e = event[v];
        if (e < 0 || e >= n_host) continue;
        int32_t c = chain_of[e];
        if (c < 0 || lo[c] == hi[c]) continue;
        int64_t now = t[v];
        if (now < last_t[c]) { /* out of time order: walk this chain's spans again */
            at[c] = -1;
            acc[c] = 0;
        }
        last_t[c] = now;
        int64_t p = at[c] < 0 ? lo[c] - 1 : at[c];
        while (p + 1 < hi[c] && s0[p + 1] <= now) {
            if (p >= lo[c]) acc[c] += s1[p] - s0[p];
            p++;
        }
        at[c] = p >= lo[c] ? p : -1;
        if (p >= lo[c]) {
            int64_t inside = now - s0[p], len = s1[p] - s0[p];
            out[v] = acc[c] + (inside < 0 ? 0 : inside > len ? len : inside);
        } else {
            out[v] = 0;
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(st);
    release(bs, 7);
    Py_RETURN_NONE;
}

/* event_keys(g, start, end, g_lo, width, lo, open_out, close_out) -> None
 *
 * badput.analysis._nesting._event_keys in one pass, the opens' keys and the closes' apart:
 * ((g - g_lo) * width + t - lo) * 3 + class, class 1 for an open (t its start), 0 for the
 * close of an interval with a length and 2 for that of one without (t its end). Every
 * argument int64 (close_out None: the opens' alone); the caller has checked that the keys
 * fit. */
static PyObject *event_keys(PyObject *self, PyObject *args) {
    PyObject *o[5];
    buf bs[5] = {{0}};
    long long g_lo, width, lo;
    if (!PyArg_ParseTuple(args, "OOOLLLOO", &o[0], &o[1], &o[2], &g_lo, &width, &lo, &o[3],
                          &o[4]))
        return NULL;
    static const Py_ssize_t bsize[5] = {8, 8, 8, 8, 8};
    /* close_out None: the opens' keys alone */
    const int n_bufs = o[4] == Py_None ? 4 : 5;
    if (get_all(o, bs, n_bufs, bsize, 3) < 0) return NULL;
    Py_ssize_t n = bs[0].b.len / 8;
    for (int i = 1; i < n_bufs; i++) {
        if (bs[i].b.len / 8 != n) {
            return refuse(bs, n_bufs, "event_keys: arrays of mismatched lengths");
        }
    }
    const int64_t *g = bs[0].b.buf, *start = bs[1].b.buf, *end = bs[2].b.buf;
    int64_t *open_key = bs[3].b.buf, *close_key = n_bufs == 5 ? bs[4].b.buf : NULL;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t base = (g[i] - (int64_t)g_lo) * (int64_t)width - (int64_t)lo;
        open_key[i] = (base + start[i]) * 3 + 1;
        if (close_key) close_key[i] = (base + end[i]) * 3 + (end[i] <= start[i] ? 2 : 0);
    }
    Py_END_ALLOW_THREADS
    release(bs, n_bufs);
    Py_RETURN_NONE;
}

/* The first index i in sorted a[0..n) with a[i] >= x, as numpy's searchsorted (side left),
 * clipped to n - 1 (n > 0); for int64 and int32 arrays. */
#define LOWER_BOUND(name, type)                                              \
    static inline Py_ssize_t name(const type *a, Py_ssize_t n, int64_t x) { \
        Py_ssize_t lo = 0, hi = n;                                           \
        while (lo < hi) {                                                    \
            Py_ssize_t mid = lo + (hi - lo) / 2;                             \
            if (a[mid] < x) lo = mid + 1;                                    \
            else hi = mid;                                                   \
        }                                                                    \
        return lo < n ? lo : n - 1;                                          \
    }
LOWER_BOUND(lower_bound64, int64_t)
LOWER_BOUND(lower_bound32, int32_t)
#undef LOWER_BOUND

/* path_edges(ins, outs, consts, totals) -> bool
 *
 * badput.analysis.critical_path._path_edges in one pass over a path's nodes (see its numpy
 * version, which this computes alike). ins: nodes, how (int64, n: the path's nodes after its
 * first where it has no lead, and how each is entered: -1 the path starts there, >= 0 a cross
 * edge, else its chain edge); the graph's chain_pred (int32), chain_type (int8),
 * chain_weight (int64), edge_src (int64), edge_type (int8), edge_weight (int64), node_start
 * (uint8), node_event (int32), node_ns (int64), event_row (int32), event_parent (int32); the
 * trace's kind (int8 per row); part_of_type (int8 per edge type); the kernel classes' rows
 * (int64, ascending) and whether each is communication (uint8); the span nodes (int32,
 * ascending) and rows (int32); the launch tree's rows (int64, ascending), innermost ops (int64)
 * and modules (int32); the trace's name_id (int32 per row). outs (n each): src_row, dst_row (int32), src_start, dst_start (uint8),
 * edge_type (int8), weight (int64), part (int8), src_ns (int64), op_row (int64), module
 * (int32); or every out of length 0, where the edges are not kept (their totals alone).
 * consts: (lead, lead_weight, lead_span, n_host, kinds CPU_OP KERNEL MEMCPY MEMSET, edge types
 * HOST DEPENDENCY BLOCKING GPU KERNEL_GAP LAUNCH_DELAY, parts COMPUTE MEMORY COMM). totals,
 * added to (int64, zeroed by the caller): the weight of the edges of each part, that of the edges with an op and a weight by the op's name
 * id, and that of the edges with a module and a weight by module (critical_path's breakdown,
 * _top_ops and _top_modules, as exact sums). False where an index falls outside its array
 * (the numpy version then decides). */
enum { PE_NODES, PE_HOW, PE_PRED, PE_CTYPE, PE_CW, PE_ESRC, PE_ETYPE, PE_EW, PE_START,
       PE_EVENT, PE_NS, PE_EROW, PE_EPARENT, PE_KIND, PE_PARTOF, PE_CROW, PE_CCOMM, PE_SNODES,
       PE_SROWS, PE_TROW, PE_TINNER, PE_TMOD, PE_NAME, PE_N_IN };
enum { PO_SROW, PO_DROW, PO_SSTART, PO_DSTART, PO_TYPE, PO_W, PO_PART, PO_SNS, PO_OP, PO_MOD,
       PO_N };
enum { PT_PART, PT_OP, PT_MOD, PT_N };
static PyObject *path_edges(PyObject *self, PyObject *args) {
    PyObject *ins, *outs, *totals;
    long long lead, lead_weight, lead_span, n_host, k_op, k_kernel, k_memcpy, k_memset, t_host,
        t_dep, t_block, t_gpu, t_gap, t_delay, p_compute, p_memory, p_comm;
    if (!PyArg_ParseTuple(args, "O!O!(LLLLLLLLLLLLLLLLL)O!", &PyTuple_Type, &ins, &PyTuple_Type,
                          &outs, &lead, &lead_weight, &lead_span, &n_host, &k_op, &k_kernel,
                          &k_memcpy, &k_memset, &t_host, &t_dep, &t_block, &t_gpu, &t_gap,
                          &t_delay, &p_compute, &p_memory, &p_comm, &PyTuple_Type, &totals))
        return NULL;
    if (PyTuple_GET_SIZE(ins) != PE_N_IN || PyTuple_GET_SIZE(outs) != PO_N ||
        PyTuple_GET_SIZE(totals) != PT_N) {
        PyErr_SetString(PyExc_ValueError, "path_edges: wrong number of arrays");
        return NULL;
    }
    enum { N = PE_N_IN + PO_N + PT_N, PT0 = PE_N_IN + PO_N };
    PyObject *o[N];
    for (int i = 0; i < PE_N_IN; i++) o[i] = PyTuple_GET_ITEM(ins, i);
    for (int i = 0; i < PO_N; i++) o[PE_N_IN + i] = PyTuple_GET_ITEM(outs, i);
    for (int i = 0; i < PT_N; i++) o[PT0 + i] = PyTuple_GET_ITEM(totals, i);
    static const Py_ssize_t size[N] = {8, 8, 4, 1, 8, 8, 1, 8, 1, 4, 8, 4, 4, 1, 1, 8, 1, 4, 4,
                                       8, 8, 4, 4, 4, 4, 1, 1, 1, 8, 1, 8, 8, 4, 8, 8, 8};
    buf bs[N];
    memset(bs, 0, sizeof bs);
    if (get_all(o, bs, N, size, PE_N_IN) < 0) return NULL;
#define LEN(i) (bs[i].b.len / size[i])
    const Py_ssize_t n = LEN(PE_NODES), nn = LEN(PE_PRED), m = LEN(PE_ESRC), ne = LEN(PE_EROW),
                     nr = LEN(PE_KIND), nt = LEN(PE_PARTOF), nc = LEN(PE_CROW),
                     ns = LEN(PE_SNODES), ntr = LEN(PE_TROW);
    int ok = LEN(PE_HOW) == n && LEN(PE_CTYPE) == nn && LEN(PE_CW) == nn &&
             LEN(PE_START) == nn && LEN(PE_EVENT) == nn && LEN(PE_NS) == nn &&
             LEN(PE_ETYPE) == m && LEN(PE_EW) == m && LEN(PE_EPARENT) == ne &&
             LEN(PE_CCOMM) == nc && LEN(PE_SROWS) == ns && LEN(PE_TINNER) == ntr &&
             LEN(PE_TMOD) == ntr && n_host >= 0 && n_host <= ne && LEN(PE_NAME) == nr;
    /* The edges themselves, or (every out empty) their totals alone. */
    const int keep = LEN(PE_N_IN) == n;
    for (int i = 0; i < PO_N; i++) ok = ok && LEN(PE_N_IN + i) == (keep ? n : 0);
    const Py_ssize_t n_parts = LEN(PT0 + PT_PART), n_names = LEN(PT0 + PT_OP),
                     n_mods = LEN(PT0 + PT_MOD);
#undef LEN
    if (!ok) return refuse(bs, N, "path_edges: arrays of mismatched lengths");
    const int64_t *nodes = bs[PE_NODES].b.buf, *how = bs[PE_HOW].b.buf, *cw = bs[PE_CW].b.buf,
                  *esrc = bs[PE_ESRC].b.buf, *ew = bs[PE_EW].b.buf, *nsv = bs[PE_NS].b.buf,
                  *crow = bs[PE_CROW].b.buf, *trow = bs[PE_TROW].b.buf,
                  *tinner = bs[PE_TINNER].b.buf;
    const int32_t *pred = bs[PE_PRED].b.buf, *event = bs[PE_EVENT].b.buf,
                  *erow = bs[PE_EROW].b.buf, *eparent = bs[PE_EPARENT].b.buf,
                  *snodes = bs[PE_SNODES].b.buf, *srows = bs[PE_SROWS].b.buf,
                  *tmod = bs[PE_TMOD].b.buf;
    const int8_t *ctype = bs[PE_CTYPE].b.buf, *etype = bs[PE_ETYPE].b.buf,
                 *kind = bs[PE_KIND].b.buf, *part_of = bs[PE_PARTOF].b.buf;
    const uint8_t *nstart = bs[PE_START].b.buf, *ccomm = bs[PE_CCOMM].b.buf;
    int32_t *o_srow = bs[PE_N_IN + PO_SROW].b.buf, *o_drow = bs[PE_N_IN + PO_DROW].b.buf,
            *o_mod = bs[PE_N_IN + PO_MOD].b.buf;
    uint8_t *o_ss = bs[PE_N_IN + PO_SSTART].b.buf, *o_ds = bs[PE_N_IN + PO_DSTART].b.buf;
    int8_t *o_type = bs[PE_N_IN + PO_TYPE].b.buf, *o_part = bs[PE_N_IN + PO_PART].b.buf;
    int64_t *o_w = bs[PE_N_IN + PO_W].b.buf, *o_sns = bs[PE_N_IN + PO_SNS].b.buf,
            *o_op = bs[PE_N_IN + PO_OP].b.buf;
    const int32_t *name_id = bs[PE_NAME].b.buf;
    int64_t *part_ns = bs[PT0 + PT_PART].b.buf, *op_ns = bs[PT0 + PT_OP].b.buf,
            *mod_ns = bs[PT0 + PT_MOD].b.buf;
    int first_dep = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && ok; i++) {
        const int64_t v = nodes[i], h = how[i];
        if (v < 0 || v >= nn) { ok = 0; break; }
        int64_t u, w;
        int t;
        if (h >= 0) {
            if (h >= m) { ok = 0; break; }
            u = esrc[h];
            t = etype[h];
            w = ew[h];
        } else if (h == -1) {
            u = v;
            t = (int)t_dep;
            w = cw[v];
        } else {
            u = pred[v];
            t = ctype[v];
            w = cw[v];
        }
        if (i == 0 && lead) w = lead_weight;
        if (u < 0 || u >= nn || t < 0 || t >= nt) { ok = 0; break; }
        const int32_t ev_u = event[u], ev_v = event[v];
        if (ev_u < 0 || ev_u >= ne || ev_v < 0 || ev_v >= ne) { ok = 0; break; }
        const int32_t row_u = erow[ev_u], row_v = erow[ev_v];
        if (keep) {
            o_srow[i] = row_u;
            o_drow[i] = row_v;
            o_ss[i] = nstart[u];
            o_ds[i] = nstart[v];
            o_type[i] = (int8_t)t;
            o_w[i] = w;
            o_sns[i] = nsv[u];
        }
        int8_t part = part_of[t];
        int64_t op = -1;
        int32_t mod = -1;
        if (t == t_gpu) {
            if (row_v < 0 || row_v >= nr) { ok = 0; break; }
            const int k = kind[row_v];
            part = (int8_t)p_compute;
            if (k == k_memcpy || k == k_memset) part = (int8_t)p_memory;
            if (nc > 0 && k == k_kernel) {
                Py_ssize_t at = lower_bound64(crow, nc, row_v);
                if (crow[at] == row_v && ccomm[at]) part = (int8_t)p_comm;
            }
        }
        if (t == t_host || t == t_dep || t == t_block) {
            const int32_t parent_u = eparent[ev_u];
            int64_t e = nstart[u] ? ev_u : !nstart[v] ? ev_v : parent_u >= 0 ? parent_u : ev_u;
            if (e < 0 || e >= n_host) { ok = 0; break; }
            int64_t cur = e;  /* the nearest op at or above it, else itself */
            for (;;) {
                const int32_t r = erow[cur];
                if (r < 0 || r >= nr) { ok = 0; break; }
                if (kind[r] == k_op) { e = cur; break; }
                const int32_t up = eparent[cur];
                if (up < 0) break;
                if (up >= n_host) { ok = 0; break; }
                cur = up;
            }
            if (!ok) break;
            op = erow[e];
            if (t == t_dep) {
                int64_t span = -1;
                if (lead && first_dep) span = lead_span;
                else if (ns > 0) {
                    Py_ssize_t at = lower_bound32(snodes, ns, v);
                    if (snodes[at] == v) span = srows[at];
                }
                first_dep = 0;
                if (span >= 0) op = span;
            }
        } else if (t == t_gpu || t == t_gap || t == t_delay) {
            op = row_v;
            if (ntr > 0) {
                Py_ssize_t at = lower_bound64(trow, ntr, row_v);
                if (trow[at] == row_v) {
                    if (tinner[at] >= 0) op = tinner[at];
                    mod = tmod[at];
                }
            }
        }
        if (part < 0 || part >= n_parts || op >= nr || mod >= n_mods) { ok = 0; break; }
        part_ns[part] += w;
        if (w > 0 && op >= 0) {
            const int32_t name = name_id[op];
            if (name < 0 || name >= n_names) { ok = 0; break; }
            op_ns[name] += w;
        }
        if (w > 0 && mod >= 0) mod_ns[mod] += w;
        if (keep) {
            o_part[i] = part;
            o_op[i] = op;
            o_mod[i] = mod;
        }
    }
    Py_END_ALLOW_THREADS
    release(bs, N);
    return PyBool_FromLong(ok);
}


/* step_owner(event_row, ts, n_host, tree_row, tree_launch, start, end, owner_out) -> bool
 *
 * The step each event of a graph belongs to (critical_path._step_lengths): a host event
 * (the first n_host) the step its start falls in, a GPU activity its launch call's
 * (tree_launch[i] of the launch tree's row tree_row[i] == its row, int64, rows ascending; else
 * its own start). Steps: start, end (int64, by start); a time's step is the last starting at
 * or before it, where it ends after that time, else -1. event_row int32 (E), ts int64 (rows),
 * owner_out int32 (E). False where a row falls outside ts (the numpy version decides). */
static PyObject *step_owner(PyObject *self, PyObject *args) {
    PyObject *o[7];
    Py_ssize_t n_host;
    if (!PyArg_ParseTuple(args, "OOnOOOOO", &o[0], &o[1], &n_host, &o[2], &o[3], &o[4], &o[5],
                          &o[6]))
        return NULL;
    static const Py_ssize_t size[7] = {4, 8, 8, 8, 8, 8, 4};
    buf bs[7];
    memset(bs, 0, sizeof bs);
    if (get_all(o, bs, 7, size, 6) < 0) return NULL;
    const Py_ssize_t ne = bs[0].b.len / 4, nr = bs[1].b.len / 8, nt = bs[2].b.len / 8,
                     ns = bs[4].b.len / 8;
    if (bs[3].b.len / 8 != nt || bs[5].b.len / 8 != ns || bs[6].b.len / 4 != ne ||
        n_host < 0 || n_host > ne)
        return refuse(bs, 7, "step_owner: arrays of mismatched lengths");
    const int32_t *erow = bs[0].b.buf;
    const int64_t *ts = bs[1].b.buf, *trow = bs[2].b.buf, *tlaunch = bs[3].b.buf,
                  *start = bs[4].b.buf, *end = bs[5].b.buf;
    int32_t *owner = bs[6].b.buf;
    int ok = 1;
    Py_ssize_t last = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t e = 0; e < ne; e++) {
        const int64_t row = erow[e];
        if (row < 0 || row >= nr) { ok = 0; break; }
        int64_t t = ts[row];
        if (e >= n_host && nt > 0) {
            Py_ssize_t at = lower_bound64(trow, nt, row);
            if (trow[at] == row && tlaunch[at] >= 0) {
                if (tlaunch[at] >= nr) { ok = 0; break; }
                t = ts[tlaunch[at]];
            }
        }
        /* lo: the first start after t. Events come mostly in time order (a thread's host
         * events, a stream's activities): the last answer or the next one first. */
        Py_ssize_t lo;
        if (last <= ns && (last == 0 || start[last - 1] <= t) && (last == ns || t < start[last]))
            lo = last;
        else if (last < ns && start[last] <= t && (last + 1 == ns || t < start[last + 1]))
            lo = last + 1;
        else {
            Py_ssize_t hi = ns;
            lo = 0;
            while (lo < hi) {
                Py_ssize_t mid = lo + (hi - lo) / 2;
                if (start[mid] <= t) lo = mid + 1;
                else hi = mid;
            }
        }
        last = lo;
        owner[e] = lo > 0 && t < end[lo - 1] ? (int32_t)(lo - 1) : -1;
    }
    Py_END_ALLOW_THREADS
    release(bs, 7);
    return PyBool_FromLong(ok);
}

/* The solver graph (critical_path._Solver): the longest-path problem on the nodes it needs.
 *
 * A node is contracted where its distance is its chain predecessor's plus its own chain
 * weight, and no other node reads it: it has a chain predecessor and a chain edge (type not
 * NO_EDGE), is no lead node, no cross edge leaves or enters it, and its chain goes on past it
 * to a node with a chain edge. Every other node is kept. Along a chain, the contracted nodes
 * between two kept ones add their weights into the later one's (weights are not negative
 * there: distances grow along them, and the longest path's length is a kept node's). */

/* solver_keep(pred, chain_type, no_edge, lead_nodes, src, dst, keep_out) -> kept count
 *
 * pred int32 (n), chain_type int8 (n), lead_nodes, src, dst int64; keep_out uint8 (n): 1 for a
 * kept node, else 0. */
static PyObject *solver_keep(PyObject *self, PyObject *args) {
    PyObject *o[6];
    int no_edge;
    if (!PyArg_ParseTuple(args, "OOiOOOO", &o[0], &o[1], &no_edge, &o[2], &o[3], &o[4], &o[5]))
        return NULL;
    static const Py_ssize_t size[6] = {4, 1, 8, 8, 8, 1};
    buf bs[6];
    memset(bs, 0, sizeof bs);
    if (get_all(o, bs, 6, size, 5) < 0) return NULL;
    const Py_ssize_t n = bs[0].b.len / 4, n_lead = bs[2].b.len / 8, m = bs[3].b.len / 8;
    if (bs[1].b.len != n || bs[4].b.len / 8 != m || bs[5].b.len != n)
        return refuse(bs, 6, "solver_keep: arrays of mismatched lengths");
    const int32_t *pred = bs[0].b.buf;
    const int8_t *ctype = bs[1].b.buf;
    const int64_t *lead = bs[2].b.buf, *src = bs[3].b.buf, *dst = bs[4].b.buf;
    uint8_t *keep = bs[5].b.buf;
    const char *bad = NULL;
    Py_ssize_t kept = 0;
    Py_BEGIN_ALLOW_THREADS
    /* Bit 0: kept; bit 1: a node's chain goes on past it. */
    memset(keep, 0, (size_t)n);
    for (Py_ssize_t v = 0; v < n && !bad; v++) {
        const int32_t p = pred[v];
        if (p < 0) {
            keep[v] |= 1;
            continue;
        }
        if (p >= v) {
            bad = "solver_keep: a chain edge runs against the node order";
            break;
        }
        keep[p] |= 2;
        if (ctype[v] == no_edge) { /* the path may begin anew here: keep it and what it ends */
            keep[v] |= 1;
            keep[p] |= 1;
        }
    }
    for (Py_ssize_t i = 0; i < n_lead && !bad; i++) {
        if (lead[i] < 0 || lead[i] >= n) bad = "solver_keep: a lead node beyond the nodes";
        else keep[lead[i]] |= 1;
    }
    for (Py_ssize_t e = 0; e < m && !bad; e++) {
        if (src[e] < 0 || src[e] >= n || dst[e] < 0 || dst[e] >= n)
            bad = "solver_keep: a cross edge beyond the nodes";
        else {
            keep[src[e]] |= 1;
            keep[dst[e]] |= 1;
        }
    }
    if (!bad) {
        for (Py_ssize_t v = 0; v < n; v++) {
            const uint8_t k = (keep[v] & 1) || !(keep[v] & 2);
            keep[v] = k;
            kept += k;
        }
    }
    Py_END_ALLOW_THREADS
    if (bad) return refuse(bs, 6, bad);
    release(bs, 6);
    return PyLong_FromSsize_t(kept);
}

/* solver_chains(pred, keep, w, seg_out, cpred_out, kept_out, weight_out, run_out) -> None
 *
 * pred int32 (n), keep uint8 (n, `solver_keep`'s), w int64 (n, the chain weights, not
 * negative at contracted nodes); seg_out int32 (n): each kept node's index among the kept,
 * each contracted node's the next kept node's on its chain (whose weight its own adds to);
 * per kept node: cpred_out int32, the kept node before it on its chain (-1 at a chain's
 * first), kept_out int64, the node (ascending), weight_out int64, its weight and those of the
 * contracted nodes before it, run_out int32, how many those are. */
static PyObject *solver_chains(PyObject *self, PyObject *args) {
    PyObject *o[8];
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7]))
        return NULL;
    static const Py_ssize_t size[8] = {4, 1, 8, 4, 4, 8, 8, 4};
    buf bs[8];
    memset(bs, 0, sizeof bs);
    if (get_all(o, bs, 8, size, 3) < 0) return NULL;
    const Py_ssize_t n = bs[0].b.len / 4, nc = bs[4].b.len / 4;
    if (bs[1].b.len != n || bs[2].b.len / 8 != n || bs[3].b.len / 4 != n ||
        bs[5].b.len / 8 != nc || bs[6].b.len / 8 != nc || bs[7].b.len / 4 != nc)
        return refuse(bs, 8, "solver_chains: arrays of mismatched lengths");
    const int32_t *pred = bs[0].b.buf;
    const uint8_t *keep = bs[1].b.buf;
    const int64_t *w = bs[2].b.buf;
    int32_t *seg = bs[3].b.buf, *cpred = bs[4].b.buf, *run = bs[7].b.buf;
    int64_t *kept = bs[5].b.buf, *weight = bs[6].b.buf;
    const char *bad = NULL;
    Py_BEGIN_ALLOW_THREADS
    /* Forward: a kept node's index; a contracted node's, for now, its last kept ancestor's. */
    Py_ssize_t c = 0;
    for (Py_ssize_t v = 0; v < n; v++) {
        const int32_t p = pred[v];
        if (p >= v) {
            bad = "solver_chains: a chain edge runs against the node order";
            break;
        }
        if (keep[v]) {
            if (c >= nc) {
                bad = "solver_chains: more kept nodes than counted";
                break;
            }
            seg[v] = (int32_t)c;
            kept[c] = v;
            cpred[c] = p < 0 ? -1 : seg[p];
            c++;
        } else if (p < 0) {
            bad = "solver_chains: a contracted node begins its chain";
            break;
        } else if (w[v] < 0) {
            bad = "solver_chains: a negative chain weight";
            break;
        } else {
            seg[v] = seg[p];
        }
    }
    if (!bad && c != nc) bad = "solver_chains: fewer kept nodes than counted";
    /* Backward: a contracted node takes its chain successor's (a later node, done first),
     * and every node's weight goes to its kept node's. */
    if (!bad) {
        memset(weight, 0, (size_t)nc * sizeof(int64_t));
        memset(run, 0, (size_t)nc * sizeof(int32_t));
        for (Py_ssize_t v = n - 1; v >= 0; v--) {
            const int32_t p = pred[v], s = seg[v];
            weight[s] += w[v];
            if (!keep[v]) run[s]++;
            if (p >= 0 && !keep[p]) seg[p] = s;
        }
    }
    Py_END_ALLOW_THREADS
    return finish(bs, 8, bad);
}

/* solver_weights(seg, keep, w, out) -> bool
 *
 * The solver graph's chain weights: out[c] (int64, zeroed here) is the sum of w (int64, per
 * node) over the nodes whose seg (int32) is c. False where a contracted node's weight is
 * negative (the contraction would not hold: the caller solves the whole graph). */
static PyObject *solver_weights(PyObject *self, PyObject *args) {
    PyObject *o[4];
    if (!PyArg_ParseTuple(args, "OOOO", &o[0], &o[1], &o[2], &o[3])) return NULL;
    static const Py_ssize_t size[4] = {4, 1, 8, 8};
    buf bs[4];
    memset(bs, 0, sizeof bs);
    if (get_all(o, bs, 4, size, 3) < 0) return NULL;
    const Py_ssize_t n = bs[0].b.len / 4, nc = bs[3].b.len / 8;
    if (bs[1].b.len != n || bs[2].b.len / 8 != n)
        return refuse(bs, 4, "solver_weights: arrays of mismatched lengths");
    const int32_t *seg = bs[0].b.buf;
    const uint8_t *keep = bs[1].b.buf;
    const int64_t *w = bs[2].b.buf;
    int64_t *out = bs[3].b.buf;
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    memset(out, 0, (size_t)nc * sizeof(int64_t));
    for (Py_ssize_t v = 0; v < n; v++) {
        const int32_t c = seg[v];
        if (c < 0 || c >= nc || (!keep[v] && w[v] < 0)) {
            ok = 0;
            break;
        }
        out[c] += w[v];
    }
    Py_END_ALLOW_THREADS
    release(bs, 4);
    if (!ok) Py_RETURN_FALSE;
    Py_RETURN_TRUE;
}

/* solver_path(seg, keep, flag, cbest, cut, cut_node, nodes_out, how_out) -> count
 *
 * The whole graph's path from the solver graph's: a kept node is on it where flag[seg] (int8,
 * per kept node) is 1 or 2, a contracted one where it is 2 (its kept node was entered by its
 * chain edge) or where its kept node is `cut` and it is at or before `cut_node` (the path ends
 * inside that node's chain run). nodes_out (int64, room for them): those nodes, ascending;
 * how_out (int64, as long): cbest (int64, per kept node) of a kept one, -2 (its chain edge)
 * of the others. */
static PyObject *solver_path(PyObject *self, PyObject *args) {
    PyObject *o[6];
    Py_ssize_t cut, cut_node;
    if (!PyArg_ParseTuple(args, "OOOOnnOO", &o[0], &o[1], &o[2], &o[3], &cut, &cut_node, &o[4],
                          &o[5]))
        return NULL;
    static const Py_ssize_t size[6] = {4, 1, 1, 8, 8, 8};
    buf bs[6];
    memset(bs, 0, sizeof bs);
    if (get_all(o, bs, 6, size, 4) < 0) return NULL;
    const Py_ssize_t n = bs[0].b.len / 4, nc = bs[2].b.len, room = bs[4].b.len / 8;
    if (bs[1].b.len != n || bs[3].b.len / 8 != nc || bs[5].b.len / 8 != room)
        return refuse(bs, 6, "solver_path: arrays of mismatched lengths");
    const int32_t *seg = bs[0].b.buf;
    const uint8_t *keep = bs[1].b.buf;
    const int8_t *flag = bs[2].b.buf;
    const int64_t *cbest = bs[3].b.buf;
    int64_t *nodes = bs[4].b.buf, *how = bs[5].b.buf;
    Py_ssize_t count = 0;
    const char *bad = NULL;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t v = 0; v < n; v++) {
        const int32_t c = seg[v];
        if (c < 0 || c >= nc) {
            bad = "solver_path: a node's kept node beyond the kept";
            break;
        }
        const int8_t f = flag[c];
        const int on = keep[v] ? f >= 1 : f == 2 || (c == cut && v <= cut_node);
        if (!on) continue;
        if (count >= room) {
            bad = "solver_path: more nodes on the path than room for them";
            break;
        }
        nodes[count] = v;
        how[count++] = keep[v] ? cbest[c] : -2;
    }
    Py_END_ALLOW_THREADS
    if (bad) return refuse(bs, 6, bad);
    release(bs, 6);
    return PyLong_FromSsize_t(count);
}

/* zero_run(pred, keep, w, node) -> node
 *
 * The first node of the chain run into `node` (entered by its chain edge) over which the
 * distance stays the same: back through contracted predecessors while the chain weight is 0
 * (pred int32, keep uint8, w int64, per node). */
static PyObject *zero_run(PyObject *self, PyObject *args) {
    PyObject *o[3];
    Py_ssize_t v;
    if (!PyArg_ParseTuple(args, "OOOn", &o[0], &o[1], &o[2], &v)) return NULL;
    static const Py_ssize_t size[3] = {4, 1, 8};
    buf bs[3];
    memset(bs, 0, sizeof bs);
    if (get_all(o, bs, 3, size, 3) < 0) return NULL;
    const Py_ssize_t n = bs[0].b.len / 4;
    if (bs[1].b.len != n || bs[2].b.len / 8 != n || v < 0 || v >= n)
        return refuse(bs, 3, "zero_run: bad arguments");
    const int32_t *pred = bs[0].b.buf;
    const uint8_t *keep = bs[1].b.buf;
    const int64_t *w = bs[2].b.buf;
    while (w[v] == 0 && pred[v] >= 0 && pred[v] < v && !keep[pred[v]]) v = pred[v];
    release(bs, 3);
    return PyLong_FromSsize_t(v);
}

static PyMethodDef methods[] = {
    {"longest", longest, METH_VARARGS, "Longest path to every node, and how it arrives."},
    {"owner_lengths", owner_lengths, METH_VARARGS, "Longest path of each owner's own graph."},
    {"backtrack", backtrack, METH_VARARGS, "The nodes of a longest path, last first."},
    {"path_edges", path_edges, METH_VARARGS, "A path's edges, parts, ops and modules."},
    {"step_owner", step_owner, METH_VARARGS, "The step of each event of a graph."},
    {"chain_pred", chain_pred, METH_VARARGS, "Previous node of each node's chain."},
    {"sort_runs", sort_runs, METH_VARARGS, "nest's order within runs of equal starts."},
    {"sub_forest", sub_forest, METH_VARARGS, "A subset of a forest, nested, and whether it nests."},
    {"marked_ancestors", marked_ancestors, METH_VARARGS, "Nearest and farthest marked ancestor."},
    {"event_keys", event_keys, METH_VARARGS, "nest's sort keys of the opens and the closes."},
    {"nest_parents", nest_parents, METH_VARARGS, "Each node's parent in nest's open order."},
    {"nest_stack", nest_stack, METH_VARARGS, "nest_parents, the closes held, not sorted."},
    {"span_union", span_union, METH_VARARGS, "The union of spans, in one pass."},
    {"last_at_or_before", last_at_or_before, METH_VARARGS, "Latest entry of a key at a time."},
    {"overlaps", overlaps, METH_VARARGS, "The intersection of two canonical interval sets."},
    {"shrink", shrink, METH_VARARGS, "A what-if's new host edge weights, in place."},
    {"edge_time", edge_time, METH_VARARGS, "What host edges hold of a per-node quantity."},
    {"scale_masked", scale_masked, METH_VARARGS, "Masked weights scaled, in place."},
    {"node_keys", node_keys, METH_VARARGS, "A graph's node order keys, packed."},
    {"graph_nodes", graph_nodes, METH_VARARGS, "A graph's node arrays from its order."},
    {"chain_types", chain_types, METH_VARARGS, "Each graph node's chain edge type and weight."},
    {"span_cover", span_cover, METH_VARARGS, "Time a chain's spans cover before each host node."},
    {"solver_keep", solver_keep, METH_VARARGS, "The nodes the solver graph keeps."},
    {"solver_chains", solver_chains, METH_VARARGS, "The solver graph's nodes and chains."},
    {"solver_weights", solver_weights, METH_VARARGS, "The solver graph's chain weights."},
    {"solver_path", solver_path, METH_VARARGS, "The whole graph's path from the solver's."},
    {"zero_run", zero_run, METH_VARARGS, "The first node of a zero-weight chain run."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_paths", NULL, -1, methods};

PyMODINIT_FUNC PyInit__paths(void) { return PyModule_Create(&module); }
