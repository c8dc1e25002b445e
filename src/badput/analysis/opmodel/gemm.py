"""Matrix multiplications: ``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``matmul``, ``linear``, FP8.

One formula for all of them (the convention of TraceLens's GEMM model and of
https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/):

    FLOPs = 2·B·M·N·K  (+ B·M·N when a bias/addend C is added)
    bytes = |A|·size(A) + |B|·size(B) + B·M·N·size(out) (+ |C|·size(C))

where |X| is the element count of the operand as recorded (so a broadcast operand is read
once) and size() the element size of its own ``Input type``. The bias is the operand as
recorded, not assumed 1×N as TraceLens does; for the usual 1-D bias the two agree.
"""

from __future__ import annotations

from badput.analysis.opmodel._core import Call, OpModel, Unmodellable, broadcast, numel
from badput.analysis.opmodel.dtypes import DType, scalar_type_dtype

__all__ = ["GEMM_OPS", "model_gemm"]


def _result(
    call: Call,
    b: int,
    m: int,
    n: int,
    k: int,
    operands: list[tuple[tuple[int, ...], DType]],
    out: DType,
    bias: tuple[tuple[int, ...], DType] | None,
    extra_bytes: int = 0,
) -> OpModel:
    (a_shape, a_dt) = operands[0]
    (b_shape, b_dt) = operands[1]
    # Packed FP4 (two values per byte) records half the logical K; the math is on all of them.
    k_math = 2 * k if a_dt.name.lower() == "c10::float4_e2m1fn_x2" else k
    mn = numel((b, m, n))
    flops = 2 * numel((b, m, n)) * k_math + (mn if bias is not None else 0)
    nbytes = numel(a_shape) * a_dt.itemsize + numel(b_shape) * b_dt.itemsize
    nbytes += mn * out.itemsize + extra_bytes
    if bias is not None:
        nbytes += numel(bias[0]) * bias[1].itemsize
    params: list[tuple[str, int | float | bool | str]] = [
        ("B", b),
        ("M", m),
        ("N", n),
        ("K", k_math),
        ("bias", bias is not None),
        ("dtype_A", a_dt.name),
        ("dtype_B", b_dt.name),
    ]
    return OpModel(call.name, "GEMM", float(flops), float(nbytes), a_dt.precision, tuple(params))


def _check_k(k1: int, k2: int) -> None:
    if k1 != k2:
        raise Unmodellable("shape mismatch")


def _mm(call: Call, first: int, bias: bool) -> OpModel:
    a, a_dt = call.tensor(first, rank=2)
    bm, b_dt = call.tensor(first + 1, rank=2)
    _check_k(a[1], bm[0])
    c = call.optional_tensor(0) if bias else None
    return _result(call, 1, a[0], bm[1], a[1], [(a, a_dt), (bm, b_dt)], a_dt, c)


def _bmm(call: Call, first: int, bias: bool) -> OpModel:
    a, a_dt = call.tensor(first, rank=3)
    bm, b_dt = call.tensor(first + 1, rank=3)
    _check_k(a[2], bm[1])
    if a[0] != bm[0]:
        raise Unmodellable("shape mismatch")
    c = call.optional_tensor(0) if bias else None
    return _result(call, a[0], a[1], bm[2], a[2], [(a, a_dt), (bm, b_dt)], a_dt, c)


def _matmul(call: Call) -> OpModel:
    # torch.matmul semantics: 1-D operands gain a dim of 1, leading dims broadcast.
    a, a_dt = call.tensor(0, min_rank=1)
    bm, b_dt = call.tensor(1, min_rank=1)
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*bm, 1) if len(bm) == 1 else bm
    _check_k(a2[-1], b2[-2])
    batch = numel(broadcast(a2[:-2], b2[:-2]))
    return _result(call, batch, a2[-2], b2[-1], a2[-1], [(a, a_dt), (bm, b_dt)], a_dt, None)


def _linear(call: Call) -> OpModel:
    # y = x·Wᵀ + b with x [..., K], W [N, K], b [N] optional.
    x, x_dt = call.tensor(0, min_rank=1)
    w, w_dt = call.tensor(1, rank=2)
    _check_k(x[-1], w[1])
    m = numel(x[:-1])
    c = call.optional_tensor(2)
    return _result(call, 1, m, w[0], x[-1], [(x, x_dt), (w, w_dt)], x_dt, c)


def _scaled_mm(call: Call) -> OpModel:
    # aten::_scaled_mm(A, B, scale_a, scale_b, bias?, scale_result?, out_dtype?, fast_accum):
    # A and B FP8 (or packed FP4), scales FP32 (or e8m0 blocks), output out_dtype or A's dtype.
    a, a_dt = call.tensor(0, rank=2)
    bm, b_dt = call.tensor(1, rank=2)
    _check_k(a[1], bm[0])
    scales = 0
    for i in (2, 3, 5):
        s = call.optional_tensor(i)
        if s is not None:
            scales += numel(s[0]) * s[1].itemsize
    out = scalar_type_dtype(call.value(6)) or a_dt
    bias = call.optional_tensor(4)
    return _result(call, 1, a[0], bm[1], a[1], [(a, a_dt), (bm, b_dt)], out, bias, scales)


def model_gemm(call: Call) -> OpModel:
    """Model one GEMM call; see the module docstring for the formula.

    Args:
        call: The op call (name in :data:`GEMM_OPS`).

    Returns:
        The model, category ``GEMM``.

    Raises:
        Unmodellable: the shapes or dtypes do not allow a model.
    """
    op = call.name
    if op == "aten::mm":
        return _mm(call, 0, bias=False)
    if op == "aten::addmm":
        return _mm(call, 1, bias=True)
    if op == "aten::bmm":
        return _bmm(call, 0, bias=False)
    if op == "aten::baddbmm":
        return _bmm(call, 1, bias=True)
    if op == "aten::matmul":
        return _matmul(call)
    if op == "aten::linear":
        return _linear(call)
    return _scaled_mm(call)


GEMM_OPS = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::matmul",
        "aten::linear",
        "aten::_scaled_mm",
    }
)
