"""Convolutions, forward and backward.

Forward: ``convolution``, ``_convolution``, ``cudnn_convolution``, ``conv2d``, ...; backward:
``convolution_backward``, and PyTorch <= 1.10's ``cudnn_convolution_backward`` (which records
dy, so it needs no stride or padding; without a recorded ``output_mask`` both dx and dw count).

With input x [N, C_in, *S_in], weight w [C_out, C_in/g, *k] (transposed: [C_in, C_out/g, *k])
and output y [N, C_out, *S_out]:

    S_out = ⌊(S_in + 2·p − d·(k − 1) − 1) / s⌋ + 1            (transposed:
            (S_in − 1)·s − 2·p + d·(k − 1) + output_padding + 1)
    FLOPs = 2·|y|·(C_in/g)·∏k  (transposed: 2·|x|·(C_out/g)·∏k); the bias add is not counted
    bytes = |x|·size(x) + |w|·size(w) + |y|·size(y) (+ |bias|·size(bias))

The multiply-add count is TraceLens's (2·∏w[1:] per output element, which already accounts
for groups). Backward computes the masked gradients: dx costs the forward FLOPs (a transposed
convolution of dy with w), dw the same again (a correlation of x with dy), db |y|; bytes read
dy once per gradient and x or w as needed, and write each gradient.
"""

from __future__ import annotations

from badput.analysis.opmodel._core import Call, OpModel, Param, Unmodellable, numel

__all__ = ["CONV_OPS", "model_conv"]

# Positions of (stride, padding, dilation, transposed, output_padding, groups) in each op's
# schema (native_functions.yaml); None where the op has no such argument.
_LAYOUT: dict[str, tuple[int, int, int, int | None, int | None, int, int | None]] = {
    # name: (stride, padding, dilation, transposed, output_padding, groups, bias)
    "aten::convolution": (3, 4, 5, 6, 7, 8, 2),
    "aten::_convolution": (3, 4, 5, 6, 7, 8, 2),
    "aten::conv1d": (3, 4, 5, None, None, 6, 2),
    "aten::conv2d": (3, 4, 5, None, None, 6, 2),
    "aten::conv3d": (3, 4, 5, None, None, 6, 2),
    # cudnn_convolution(self, weight, padding, stride, dilation, groups, ...): no bias, and
    # padding comes before stride.
    "aten::cudnn_convolution": (3, 2, 4, None, None, 5, None),
    # cudnn_convolution_transpose(self, weight, padding, output_padding, stride, dilation, groups)
    "aten::cudnn_convolution_transpose": (4, 2, 5, None, 3, 6, None),
}


def _out_spatial(
    s_in: tuple[int, ...],
    k: tuple[int, ...],
    stride: tuple[int, ...],
    pad: tuple[int, ...],
    dil: tuple[int, ...],
    transposed: bool,
    out_pad: tuple[int, ...],
) -> tuple[int, ...]:
    out = []
    for i in range(len(s_in)):
        if stride[i] <= 0 or dil[i] <= 0:
            raise Unmodellable("malformed Concrete Inputs")
        if transposed:
            o = (s_in[i] - 1) * stride[i] - 2 * pad[i] + dil[i] * (k[i] - 1) + out_pad[i] + 1
        else:
            o = (s_in[i] + 2 * pad[i] - dil[i] * (k[i] - 1) - 1) // stride[i] + 1
        if o < 0:
            raise Unmodellable("shape mismatch")
        out.append(o)
    return tuple(out)


def _geometry(
    call: Call,
    x: tuple[int, ...],
    w: tuple[int, ...],
    slots: tuple[int, int, int, int | None, int | None, int],
) -> tuple[tuple[int, ...], bool, int, tuple[tuple[str, Param], ...]]:
    """Output shape, transposed flag, groups and the parameters read."""
    nd = len(x) - 2
    if nd < 1 or len(w) != len(x):
        raise Unmodellable("unexpected rank")
    s_i, p_i, d_i, t_i, op_i, g_i = slots
    # The geometry decides the output size: without it (a trace recorded without
    # `Concrete Inputs`) any number would be made up.
    if any(call.value(i) is None for i in (s_i, p_i, d_i, g_i)):
        raise Unmodellable("missing Concrete Inputs")
    stride = call.int_list(s_i, nd, 1)
    pad = call.int_list(p_i, nd, 0)
    dil = call.int_list(d_i, nd, 1)
    transposed = call.flag(t_i) if t_i is not None else call.name.endswith("_transpose")
    out_pad = call.int_list(op_i, nd, 0) if op_i is not None else (0,) * nd
    groups = int(call.number(g_i, 1))
    if groups <= 0:
        raise Unmodellable("malformed Concrete Inputs")
    c_out = w[1] * groups if transposed else w[0]
    c_in_w = w[0] if transposed else w[1] * groups
    if c_in_w != x[1]:
        raise Unmodellable("shape mismatch")
    spatial = _out_spatial(x[2:], w[2:], stride, pad, dil, transposed, out_pad)
    y = (x[0], c_out, *spatial)
    params: tuple[tuple[str, Param], ...] = (
        ("stride", str(stride)),
        ("padding", str(pad)),
        ("dilation", str(dil)),
        ("groups", groups),
    )
    return y, transposed, groups, params


def _conv_flops(x: tuple[int, ...], w: tuple[int, ...], y: tuple[int, ...], tr: bool) -> int:
    # 2·∏w[1:] multiply-adds per output (per input when transposed) element.
    return 2 * numel(x if tr else y) * numel(w[1:])


def _forward(
    call: Call, slots: tuple[int, int, int, int | None, int | None, int, int | None]
) -> OpModel:
    x, x_dt = call.tensor(0)
    w, w_dt = call.tensor(1)
    y, tr, _groups, params = _geometry(call, x, w, slots[:6])
    bias = call.optional_tensor(slots[6]) if slots[6] is not None else None
    if bias is not None and numel(bias[0]) == 0:
        bias = None
    # The bias add (|y| FLOPs) is left out, as TraceLens counts convolutions, so that
    # FLOPs compare across the two tools; its bytes are counted (the op reads the bias).
    flops = _conv_flops(x, w, y, tr)
    nbytes = numel(x) * x_dt.itemsize + numel(w) * w_dt.itemsize + numel(y) * x_dt.itemsize
    if bias is not None:
        nbytes += numel(bias[0]) * bias[1].itemsize
    evidence: tuple[tuple[str, Param], ...] = (
        ("input", str(x)),
        ("weight", str(w)),
        ("output", str(y)),
        ("bias", bias is not None),
        ("transposed", tr),
        *params,
    )
    return OpModel(call.name, "CONV_fwd", float(flops), float(nbytes), x_dt.precision, evidence)


def _backward(call: Call) -> OpModel:
    # convolution_backward(grad_output, input, weight, bias_sizes?, stride, padding, dilation,
    #                      transposed, output_padding, groups, output_mask)
    dy, dy_dt = call.tensor(0)
    x, x_dt = call.tensor(1)
    w, w_dt = call.tensor(2)
    y, tr, _groups, params = _geometry(call, x, w, (4, 5, 6, 7, 8, 9))
    if y != dy:
        raise Unmodellable("shape mismatch")
    mask = call.value(10)
    if not (isinstance(mask, list | tuple) and len(mask) == 3):
        mask = [True, True, bool(call.value(3))]
    conv = _conv_flops(x, w, y, tr)
    flops = 0
    nbytes = 0
    if mask[0]:  # dx = dyᵀ ⋆ w: read dy and w, write dx
        flops += conv
        nbytes += numel(dy) * dy_dt.itemsize + numel(w) * w_dt.itemsize + numel(x) * x_dt.itemsize
    if mask[1]:  # dw = x ⋆ dy: read x and dy, write dw
        flops += conv
        nbytes += numel(x) * x_dt.itemsize + numel(dy) * dy_dt.itemsize + numel(w) * w_dt.itemsize
    if mask[2]:  # db = Σ dy: read dy, write C_out
        flops += numel(dy)
        nbytes += numel(dy) * dy_dt.itemsize + y[1] * dy_dt.itemsize
    evidence: tuple[tuple[str, Param], ...] = (
        ("input", str(x)),
        ("weight", str(w)),
        ("output", str(y)),
        ("output_mask", str([bool(v) for v in mask])),
        ("transposed", tr),
        *params,
    )
    return OpModel(call.name, "CONV_bwd", float(flops), float(nbytes), x_dt.precision, evidence)


def _cudnn_backward(call: Call) -> OpModel:
    # cudnn_convolution_backward(self, grad_output, weight, padding, stride, dilation, groups,
    #                            benchmark, deterministic, allow_tf32, output_mask): PyTorch
    # <= 1.10's backward of a non-transposed cuDNN convolution; dy is recorded, so the FLOPs
    # need no geometry. No bias gradient (cuDNN's bias gradient is a separate op).
    x, x_dt = call.tensor(0, min_rank=3)
    dy, dy_dt = call.tensor(1, min_rank=3)
    w, w_dt = call.tensor(2, min_rank=3)
    if not (len(x) == len(dy) == len(w) and x[0] == dy[0] and dy[1] == w[0]):
        raise Unmodellable("shape mismatch")
    mask = call.value(10)
    if not (isinstance(mask, list | tuple) and len(mask) == 2):
        mask = [True, True]  # what autograd asks of a layer whose input and weight need grads
    conv = _conv_flops(x, w, dy, False)
    flops = conv * (bool(mask[0]) + bool(mask[1]))
    nbytes = 0
    if mask[0]:  # dx: read dy and w, write dx
        nbytes += numel(dy) * dy_dt.itemsize + numel(w) * w_dt.itemsize + numel(x) * x_dt.itemsize
    if mask[1]:  # dw: read x and dy, write dw
        nbytes += numel(x) * x_dt.itemsize + numel(dy) * dy_dt.itemsize + numel(w) * w_dt.itemsize
    evidence: tuple[tuple[str, Param], ...] = (
        ("input", str(x)),
        ("weight", str(w)),
        ("output", str(dy)),
        ("output_mask", str([bool(v) for v in mask])),
    )
    return OpModel(call.name, "CONV_bwd", float(flops), float(nbytes), x_dt.precision, evidence)


def model_conv(call: Call) -> OpModel:
    """Model one convolution call; see the module docstring for the formula.

    Args:
        call: The op call (name in :data:`CONV_OPS`).

    Returns:
        The model, category ``CONV_fwd`` or ``CONV_bwd``.

    Raises:
        Unmodellable: the shapes or arguments do not allow a model.
    """
    if call.name == "aten::convolution_backward":
        return _backward(call)
    if call.name == "aten::cudnn_convolution_backward":
        return _cudnn_backward(call)
    return _forward(call, _LAYOUT[call.name])


CONV_OPS = frozenset({*_LAYOUT, "aten::convolution_backward", "aten::cudnn_convolution_backward"})
