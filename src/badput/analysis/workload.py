"""What the traced program does: training (backward and/or optimizer) or inference.

Decided from the host ops the trace recorded, never from kernel names:

- training: the trace holds backward work (ops run by the autograd engine,
  `autograd::engine::evaluate_function: ...`, or `...Backward...` ops) or an optimizer step
  (`Optimizer.step#...`, `Optimizer.zero_grad#...`, fused/foreach optimizer kernels' ops
  `aten::_fused_adam*`, `aten::_foreach_*` under an optimizer step);
- inference: the trace holds host ops but none of these;
- unknown: the trace has no host ops (an nsys export without NVTX, a GPU-only trace).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from badput.trace.model import EventKind, Trace

__all__ = ["BACKWARD_OP", "OPTIMIZER_OP", "Workload", "workload_of"]

#: Host ops that only training runs: the autograd engine's backward ops, a `...Backward0`
#: node, gradient accumulation.
BACKWARD_OP = re.compile(
    r"^autograd::engine::evaluate_function|Backward\d*$|^torch::autograd::AccumulateGrad"
)
#: The optimizer step (`Optimizer.step#AdamW.step` is how torch.optim's profiling hook names
#: it; fused optimizers call `aten::_fused_adam*`).
OPTIMIZER_OP = re.compile(r"^Optimizer\.(step|zero_grad)#|^aten::_fused_(adam|adamw|sgd)")


@dataclass(frozen=True)
class Workload:
    """Training, inference or unknown, with the ops that say so.

    Attributes:
        kind: "training", "inference" or "unknown".
        evidence: the deciding ops in words (`"backward ops: 412 (e.g. MmBackward0)"`).
        backward_ops: host ops of backward work in the trace.
        optimizer_ops: optimizer-step ops in the trace.
    """

    kind: str
    evidence: str
    backward_ops: int = 0
    optimizer_ops: int = 0

    @property
    def training(self) -> bool:
        """Whether it is training."""
        return self.kind == "training"


def workload_of(trace: Trace) -> Workload:
    """Whether `trace` records training or inference (module docstring)."""
    ops = np.flatnonzero((trace.kind == EventKind.CPU_OP) | (trace.kind == EventKind.ANNOTATION))
    if ops.shape[0] == 0:
        return Workload("unknown", "the trace records no host ops")
    # Counted per interned name id (ids index `trace.names`): no sort of the ops' ids.
    counts = np.bincount(trace.name_id[ops])
    ids = np.flatnonzero(counts)
    counts = counts[ids]
    backward = optimizer = 0
    example_bwd = example_opt = ""
    for nid, c in zip(ids.tolist(), counts.tolist(), strict=True):
        name = trace.names[nid][:200]
        if BACKWARD_OP.search(name):
            backward += c
            example_bwd = example_bwd or name
        elif OPTIMIZER_OP.search(name):
            optimizer += c
            example_opt = example_opt or name
    if backward or optimizer:
        parts = []
        if backward:
            parts.append(f"backward ops: {backward} (e.g. {example_bwd})")
        if optimizer:
            parts.append(f"optimizer ops: {optimizer} (e.g. {example_opt})")
        return Workload("training", "; ".join(parts), backward, optimizer)
    return Workload("inference", f"{int(counts.sum())} host ops, no backward op, no optimizer step")
