"""Kernel classes from evidence: what each kernel is, and what in the trace says so.

Every kernel row of a trace gets a category (`patterns.CATEGORIES`), a communication kind
(`patterns.COMM_KINDS`) when it moves data between GPUs, and the evidence that decided it.
The evidence is tried in this order; the first that speaks decides:

1. a user override (`--classify FILE`: regex over the kernel name -> category or kind);
2. the kernel's own NCCL metadata (a `"Collective name"` in its args);
3. the launching op: the nearest communication op (`c10d::*`, `record_param_comms`,
   `nccl:*`, `_c10d_functional::*`, symmetric-memory ops, custom all-reduce ops, a DeepEP
   Python frame, ...) above the launch call, with no other op between them (a copy kernel
   that an all-gather launches through `aten::copy_` is a copy, not communication);
4. the kernel name's family (`patterns.classify_name`: NCCL, DeepEP, cuBLAS, Tensile ...);
   for a name no family knows, the launching op's family (an unknown kernel launched by
   `aten::mm` is a GEMM);
5. the stream: an unknown kernel on a stream that carries only communication (and launched
   by no other op) is communication.

The kind of a communication kernel comes from NCCL metadata (own or the launching op's)
when there is some, else from the launching op, else from the name. The rules are stated
in `docs/analysis.md` ("Kernel classes").
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from badput.analysis._nesting import distinct, walk_up
from badput.analysis.opmodel.attention import ATTENTION_OPS
from badput.analysis.opmodel.conv import CONV_OPS
from badput.analysis.opmodel.gemm import GEMM_OPS
from badput.analysis.patterns import (
    CATEGORIES,
    COMM_KINDS,
    classify_name,
    comm_kind_from_letters,
    comm_op,
)
from badput.analysis.tree import LaunchTree, node_kinds_names
from badput.errors import UsageError
from badput.trace.model import NO_ID, EventKind, Trace, name_head

__all__ = [
    "SOURCES",
    "ClassRules",
    "KernelClasses",
    "classify_kernels",
    "load_class_rules",
]

I64 = npt.NDArray[np.int64]
I8 = npt.NDArray[np.int8]
Bools = npt.NDArray[np.bool_]

#: `KernelClasses.source` values, in the order they are tried.
OVERRIDE, METADATA, LAUNCH_OP, NAME, OP_FAMILY, STREAM, NOTHING = range(7)
SOURCES = (
    "override",
    "NCCL metadata",
    "launching op",
    "name",
    "launching op family",
    "stream",
    "nothing",
)

_CATEGORY = {c: i for i, c in enumerate(CATEGORIES)}
_KIND = {k: i for i, k in enumerate(COMM_KINDS)}
_COMM = _CATEGORY["communication"]
_OTHER = _CATEGORY["other"]
_OTHER_KIND = _KIND["other"]

# Launching ops whose unknown kernels take the op's family (step 4 of the module docstring).
_OP_FAMILY = (
    (GEMM_OPS | CONV_OPS, "gemm"),
    (ATTENTION_OPS, "attention"),
)


@dataclass(frozen=True)
class ClassRules:
    """User overrides: (regex, category, kind) in file order; the first match decides.

    Plain strings, so that the rules travel to worker processes; compiled on first use.
    """

    rules: tuple[tuple[str, str, str | None], ...] = ()
    source: str = ""

    def compiled(self) -> list[tuple[re.Pattern[str], str, str | None]]:
        """The rules with their patterns compiled."""
        return [(re.compile(p), c, k) for p, c, k in self.rules]


def load_class_rules(path: str | Path) -> ClassRules:
    """Read a `--classify` TOML file: `"regex" = "category"` or `"regex" = "kind"` lines.

    The lines may sit at the top level or in a `[kernels]` table. A value is a category of
    `patterns.CATEGORIES` or a communication kind of `patterns.COMM_KINDS` (a kind means
    communication of that kind); `"communication:KIND"` is accepted too.

    Raises:
        UsageError: the file cannot be read, is not TOML, or holds a bad regex or value.
    """
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise UsageError(f"--classify {p}: cannot read the file ({e.strerror or e})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"--classify {p}: not a TOML file ({e})") from None
    table = data.get("kernels", data) if isinstance(data.get("kernels"), dict) else data
    rules: list[tuple[str, str, str | None]] = []
    for pattern, value in table.items():
        if isinstance(value, dict):
            raise UsageError(
                f'--classify {p}: [{pattern}] is a table; write `"regex" = "category"` '
                "lines (at the top level or under [kernels])"
            )
        if not isinstance(value, str):
            raise UsageError(f"--classify {p}: {pattern!r}: the value must be a string")
        try:
            re.compile(pattern)
        except re.error as e:
            raise UsageError(
                f"--classify {p}: {pattern!r} is not a regular expression ({e})"
            ) from None
        rules.append((pattern, *_category_and_kind(p, pattern, value)))
    if not rules:
        raise UsageError(f"--classify {p}: no rule in the file")
    return ClassRules(tuple(rules), str(p))


def _category_and_kind(path: Path, pattern: str, value: str) -> tuple[str, str | None]:
    v = value.strip()
    if v.startswith("communication:"):
        v = v.split(":", 1)[1].strip()
        if v not in _KIND:
            raise UsageError(
                f"--classify {path}: {pattern!r}: unknown communication kind {v!r} "
                f"(one of {', '.join(COMM_KINDS)})"
            )
    if v in _KIND:
        return "communication", v
    if v in _CATEGORY:
        return v, ("other" if v == "communication" else None)
    raise UsageError(
        f"--classify {path}: {pattern!r}: unknown class {value!r}; a category "
        f"({', '.join(CATEGORIES)}) or a communication kind ({', '.join(COMM_KINDS)})"
    )


@dataclass(frozen=True, eq=False)
class KernelClasses:
    """One entry per kernel row of a trace, in row order.

    Attributes:
        row: the kernel's Trace row, ascending.
        category: index into `patterns.CATEGORIES`.
        kind: index into `patterns.COMM_KINDS` for communication, -1 otherwise.
        source: index into `SOURCES`: what decided the category.
        detail: index into `details`: the evidence itself (the op, the family, the stream).
        meta: index into `Trace.comm_meta` of the kernel's NCCL metadata: its own, else its
            launching op's (by External id, else the nearest op above its launch call that
            carries some); `NO_ID` without.
        details: interned evidence texts.
    """

    row: I64
    category: I8
    kind: I8
    source: I8
    detail: I64
    meta: I64
    details: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        """Number of kernels."""
        return int(self.row.shape[0])

    def index_of(self, rows: npt.NDArray[np.integer]) -> I64:
        """Entry of each kernel row (rows must be kernel rows of the trace)."""
        return np.searchsorted(self.row, rows).astype(np.int64)

    def comm_mask(self, n_rows: int) -> Bools:
        """A mask over all `n_rows` Trace rows: the communication kernels."""
        out = np.zeros(n_rows, dtype=np.bool_)
        out[self.row[self.category == _COMM]] = True
        return out

    def category_name(self, i: int) -> str:
        """Category of entry i."""
        return CATEGORIES[int(self.category[i])]

    def kind_name(self, i: int) -> str | None:
        """Communication kind of entry i, None for a compute kernel."""
        k = int(self.kind[i])
        return COMM_KINDS[k] if k >= 0 else None

    def evidence(self, i: int) -> str:
        """What decided entry i, in words: `launching op: c10d::allreduce_`."""
        return f"{SOURCES[int(self.source[i])]}: {self.details[int(self.detail[i])]}"


class _Details:
    def __init__(self) -> None:
        self.texts: list[str] = []
        self._ids: dict[str, int] = {}

    def id(self, text: str) -> int:
        i = self._ids.get(text)
        if i is None:
            i = self._ids[text] = len(self.texts)
            self.texts.append(text)
        return i


def classify_kernels(
    trace: Trace, tree: LaunchTree | None = None, rules: ClassRules | None = None
) -> KernelClasses:
    """Classify every kernel of `trace` from the evidence it carries (module docstring).

    Args:
        trace: the trace.
        tree: its launch tree (`analysis.tree.launch_tree`); without one, the launching-op
            evidence is skipped.
        rules: user overrides.
    """
    rows = np.flatnonzero(trace.kind == EventKind.KERNEL).astype(np.int64, copy=False)
    n = rows.shape[0]
    details = _Details()
    category = np.full(n, _OTHER, dtype=np.int8)
    kind = np.full(n, -1, dtype=np.int8)
    source = np.full(n, NOTHING, dtype=np.int8)
    detail = np.full(n, details.id("no family, op or stream says"), dtype=np.int64)
    meta_of = np.full(n, NO_ID, dtype=np.int64)
    if n == 0:
        return KernelClasses(rows, category, kind, source, detail, meta_of, details.texts)
    name_id = trace.name_id[rows].astype(np.int64)
    uniq, inv = distinct(name_id, len(trace.names))

    # 4. Names (the fallback, filled first, overwritten by stronger evidence below).
    by_name = [classify_name(trace.names[int(u)]) for u in uniq.tolist()]
    n_cat = np.array([_CATEGORY[c.category] for c in by_name], dtype=np.int8)
    n_kind = np.array([_KIND[c.kind] if c.kind else -1 for c in by_name], dtype=np.int8)
    n_det = np.array([details.id(c.family) if c.family else -1 for c in by_name], np.int64)
    named = n_det[inv] >= 0
    category[named] = n_cat[inv][named]
    kind[named] = n_kind[inv][named]
    source[named] = NAME
    detail[named] = n_det[inv][named]

    decided = np.zeros(n, dtype=np.bool_)
    # 1. Overrides.
    if rules is not None and rules.rules:
        compiled = rules.compiled()
        for j, u in enumerate(uniq.tolist()):
            head = name_head(trace.names[int(u)])
            for k, (pattern, cat, knd) in enumerate(compiled):
                if pattern.search(head):
                    mine = inv == j
                    category[mine] = _CATEGORY[cat]
                    kind[mine] = _KIND[knd] if knd else -1
                    source[mine] = OVERRIDE
                    detail[mine] = details.id(f"rule {k + 1} of {rules.source}: {pattern.pattern}")
                    decided |= mine
                    break

    # 2. The kernel's own NCCL metadata.
    meta = trace.comm_meta
    if meta is not None and len(meta):
        at = np.searchsorted(rows, meta.row)
        safe = np.minimum(at, n - 1)
        own = (rows[safe] == meta.row) & ~decided[safe]
        for m, i in zip(np.flatnonzero(own).tolist(), safe[own].tolist(), strict=True):
            name = meta.string(int(meta.collective[m])) or ""
            category[i] = _COMM
            kind[i] = _KIND[comm_kind_from_letters(name)] if name else _OTHER_KIND
            source[i] = METADATA
            detail[i] = details.id(f"Collective name {name!r}" if name else "NCCL args")
            decided[i] = True

    # 3. The launching op.
    under_plain_op = np.zeros(n, dtype=np.bool_)
    if tree is not None and len(tree):
        under_plain_op = _by_launching_op(
            trace, tree, rows, category, kind, source, detail, decided, details, meta_of
        )

    # 5. The stream (not for a kernel that a plain op launched: that op says what it is).
    _by_stream(trace, rows, category, kind, source, detail, details, under_plain_op)

    # Communication kinds from NCCL metadata of the launching op, where it has some.
    _kinds_from_metadata(trace, rows, category, kind, source, meta_of)
    # A communication kernel always has a kind.
    kind[(category == _COMM) & (kind < 0)] = _OTHER_KIND
    kind[category != _COMM] = -1
    return KernelClasses(rows, category, kind, source, detail, meta_of, details.texts)


def _by_launching_op(
    trace: Trace,
    tree: LaunchTree,
    rows: I64,
    category: I8,
    kind: I8,
    source: I8,
    detail: I64,
    decided: Bools,
    details: _Details,
    meta_of: I64,
) -> Bools:
    """Steps 3 and 4b of the module docstring, over the host ancestry of each launch call.

    Also finds, for each kernel, the nearest op above its launch call with NCCL metadata
    (`meta_of`), where the trace has any. Returns the kernels launched under a plain op (no
    communication op nearer to the launch).
    """
    plain = np.zeros(rows.shape[0], dtype=np.bool_)
    entry = np.searchsorted(tree.row, rows)
    safe = np.minimum(entry, len(tree) - 1)
    linked = tree.row[safe] == rows
    has = linked & ~decided
    if not linked.any() or tree.host_row.shape[0] == 0:
        return plain
    host_rows = tree.host_row
    host_kind, host_name = node_kinds_names(trace, tree)
    op_like = (
        (host_kind == EventKind.CPU_OP)
        | (host_kind == EventKind.ANNOTATION)
        | (host_kind == EventKind.PYTHON)
    )
    # Evaluate comm_op once per distinct host name (marked in a table of the names, not sorted);
    # per name id its communication kind and detail, -1 for a name that is no communication op.
    used = np.zeros(len(trace.names), dtype=np.bool_)
    used[host_name[op_like]] = True
    comm_kind = np.full(len(trace.names), -1, dtype=np.int64)
    comm_detail = np.full(len(trace.names), -1, dtype=np.int64)
    for nid in np.flatnonzero(used).tolist():
        found = comm_op(trace.names[nid])
        if found is not None:
            kind_name, family = found
            text = trace.names[nid][:160] + (f" ({family})" if family else "")
            comm_kind[nid] = _KIND.get(kind_name, _OTHER_KIND)
            comm_detail[nid] = details.id(text)
    is_comm_node = op_like & (comm_kind[host_name] >= 0)
    is_op_node = host_kind == EventKind.CPU_OP
    meta = trace.comm_meta
    has_meta = np.zeros(host_rows.shape[0], dtype=np.bool_)
    if meta is not None and len(meta):  # a mask of the trace's rows, not a search per node
        row_has_meta = np.zeros(len(trace), dtype=np.bool_)
        row_has_meta[meta.row] = True
        has_meta = row_has_meta[host_rows]
        del row_has_meta
    start = np.where(linked, tree.launch_node[safe], NO_ID)
    (near_comm, near_op, near_meta), _ = walk_up(
        tree.host_parent, start, [is_comm_node, is_op_node, has_meta], farthest=False
    )
    with_meta = near_meta >= 0
    if meta is not None and with_meta.any():  # the metadata's entry of each node found
        meta_of[with_meta] = np.searchsorted(meta.row, host_rows[near_meta[with_meta]])
    near_comm = np.where(has, near_comm, NO_ID)
    # Communication: a comm node above the launch, and no plain op nearer to the launch
    # (nodes are in open order: on one chain, the nearer node has the larger index).
    by_comm = (near_comm >= 0) & ((near_op < 0) | (near_comm >= near_op))
    plain = (near_op >= 0) & ~by_comm
    comm = np.flatnonzero(by_comm)
    comm_name = host_name[near_comm[comm]]
    category[comm] = _COMM
    kind[comm] = comm_kind[comm_name]
    source[comm] = LAUNCH_OP
    detail[comm] = comm_detail[comm_name]
    decided[comm] = True
    # An unknown name takes the family of the op that launched it.
    unknown = has & ~decided & (source == NOTHING) & (near_op >= 0)
    if not unknown.any():
        return plain
    op_names = host_name[near_op[unknown]]
    # Per name id (each distinct name once, ascending; a table, not a pass per name).
    used = np.zeros(len(trace.names), dtype=np.bool_)
    used[op_names] = True
    name_cat = np.full(len(trace.names), -1, dtype=np.int64)
    name_det = np.full(len(trace.names), -1, dtype=np.int64)
    for nid in np.flatnonzero(used).tolist():
        op = trace.names[nid]
        for ops, family in _OP_FAMILY:
            if op in ops:
                name_cat[nid] = _CATEGORY[family]
                name_det[nid] = details.id(op[:160])
                break
    cat, det = name_cat[op_names], name_det[op_names]
    idx = np.flatnonzero(unknown)
    hit = cat >= 0
    category[idx[hit]] = cat[hit]
    source[idx[hit]] = OP_FAMILY
    detail[idx[hit]] = det[hit]
    return plain


def _by_stream(
    trace: Trace,
    rows: I64,
    category: I8,
    kind: I8,
    source: I8,
    detail: I64,
    details: _Details,
    under_plain_op: Bools,
) -> None:
    """Step 5: unknown kernels on a stream whose known kernels are all communication."""
    unknown = (source == NOTHING) & ~under_plain_op
    if not unknown.any():
        return
    device = trace.device[rows].astype(np.int64)
    stream = trace.stream[rows].astype(np.int64)
    known = source != NOTHING
    comm = category == _COMM
    # (device, stream) pairs: with communication, and with no known compute kernel.
    pairs_comm = {(d, s) for d, s in zip(device[comm].tolist(), stream[comm].tolist(),
                                         strict=True)}  # fmt: skip
    if not pairs_comm:
        return
    compute = known & ~comm
    pairs_compute = {(d, s) for d, s in zip(device[compute].tolist(), stream[compute].tolist(),
                                            strict=True)}  # fmt: skip
    only = pairs_comm - pairs_compute
    for d, s in sorted(only):
        mine = unknown & (device == d) & (stream == s)
        if not mine.any():
            continue
        category[mine] = _COMM
        kind[mine] = _OTHER_KIND
        source[mine] = STREAM
        detail[mine] = details.id(f"stream {s} of GPU {d} carries only communication")


def _kinds_from_metadata(
    trace: Trace, rows: I64, category: I8, kind: I8, source: I8, meta_of: I64
) -> None:
    """Each kernel's NCCL metadata, and the kind of a communication kernel from it.

    The metadata is the kernel's own, else its launching op's by External id, else the one
    found in the launch tree (`meta_of` on entry).
    """
    meta = trace.comm_meta
    if meta is None or len(meta) == 0:
        return
    from badput.analysis.comm import meta_index

    by_id = meta_index(trace, rows)
    found = by_id >= 0
    meta_of[found] = by_id[found]  # own or by External id first, then the tree's
    comm = np.flatnonzero((category == _COMM) & (source != OVERRIDE) & (source != METADATA))
    m = meta_of[comm]
    hit = m >= 0
    cache: dict[int, int] = {}
    for i, mm in zip(comm[hit].tolist(), m[hit].tolist(), strict=True):
        coll = int(meta.collective[mm])
        code = cache.get(coll)
        if code is None:
            name = meta.string(coll)
            code = cache[coll] = _KIND[comm_kind_from_letters(name)] if name else -1
        if code >= 0:
            kind[i] = code
