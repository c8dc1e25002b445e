"""The precision of a training loop's matrix math, decided from what the loop did.

The MFU denominator is the dense peak of the precision the matrix products ran in, so the
meter never assumes one. The deciders, the first that speaks wins:

1. `given`: `Meter(precision=...)`.
2. `first step`: the dtypes of the inputs of the matrix products (mm, addmm, bmm,
   convolution, scaled-dot-product attention...) that ran during the first step, recorded
   by a `TorchDispatchMode` active for that step only (the warm-up step, not counted as
   productive). Under autocast these are the cast dtypes, so an fp32 model under bf16
   autocast reads bf16. A float32 product on CUDA counts as tf32 where torch allows TF32
   for it (`torch.backends.cuda.matmul.allow_tf32`, `torch.backends.cudnn.allow_tf32`).
3. `autocast`: autocast enabled when the first step began or ended.
4. otherwise None, with the reason.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["DtypeProbe", "autocast_precision", "decide_precision"]

# Matrix products whose inputs say what precision the tensor cores ran at.
_MATMULS = (
    "mm",
    "addmm",
    "bmm",
    "baddbmm",
    "addbmm",
    "convolution",
    "convolution_backward",
    "_scaled_mm",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_flash_attention_forward",
    "_efficient_attention_forward",
)
_CONVOLUTIONS = frozenset({"convolution", "convolution_backward"})

_DTYPES = {
    "float32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "float64": "fp64",
    "int8": "int8",
}


def _precision_of(dtype: Any, device: str, op: str) -> str | None:
    """The precision name of a matrix product's input dtype on `device`."""
    name = str(dtype).removeprefix("torch.")
    if name.startswith("float8"):
        return "fp8"
    p = _DTYPES.get(name)
    if p == "fp32" and device == "cuda":
        import torch

        tf32 = (
            torch.backends.cudnn.allow_tf32
            if op in _CONVOLUTIONS
            else torch.backends.cuda.matmul.allow_tf32
        )
        return "tf32" if tf32 else "fp32"
    return p


class DtypeProbe:
    """Counts the precisions of the matrix products run while it is active (one step).

    Recording never raises into the training loop: a failure to read an argument only loses
    that product.
    """

    def __init__(self) -> None:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        aten = torch.ops.aten
        packets = {getattr(aten, n): n for n in _MATMULS if hasattr(aten, n)}
        counts: dict[str, int] = {}
        self.counts = counts

        base: Any = TorchDispatchMode  # untyped in torch

        class _Mode(base):  # type: ignore[misc]
            def __torch_dispatch__(
                self, func: Any, types: Any, args: Any = (), kwargs: Any = None
            ) -> Any:
                out = func(*args, **(kwargs or {}))
                op = packets.get(func.overloadpacket)
                if op is not None:
                    try:
                        t = next(a for a in args if isinstance(a, torch.Tensor))
                        p = _precision_of(t.dtype, t.device.type, op)
                        if p is not None:
                            counts[p] = counts.get(p, 0) + 1
                    except Exception:  # the loop must not see a probe failure
                        pass
                return out

        self._mode: Any = _Mode()

    def __enter__(self) -> DtypeProbe:
        """Start recording."""
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop recording."""
        self._mode.__exit__(None, None, None)


def autocast_precision() -> str | None:
    """The autocast dtype's precision where autocast is on now (CUDA, then CPU), else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    for device in ("cuda", "cpu"):
        try:
            if torch.is_autocast_enabled(device):
                return _precision_of(torch.get_autocast_dtype(device), device, "mm")
        except Exception:  # an older torch without the device argument
            return None
    return None


def decide_precision(
    given: str | None, counts: dict[str, int] | None, autocast: str | None, probe_note: str
) -> tuple[str | None, str]:
    """(precision, the evidence that decided it) from the deciders in the module docs.

    Args:
        given: `Meter(precision=...)`.
        counts: matrix products of the first step by precision; None when not recorded.
        autocast: the autocast precision seen at the first step's boundaries.
        probe_note: why the first step was not recorded, when `counts` is None.
    """
    if given is not None:
        return given, "given (Meter(precision=...))"
    if counts:
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        seen = ", ".join(f"{n:,} {p}" for p, n in ranked)
        return ranked[0][0], f"first step's matrix products: {seen}"
    if autocast is not None:
        return autocast, "autocast on at a step boundary"
    why = "no matrix product in the first step" if counts is not None else probe_note
    return None, f"{why}; pass Meter(precision=...)"
