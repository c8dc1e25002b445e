"""Normalizations: layer, RMS, group and batch norm, forward and backward.

With |x| elements normalised over C "channels" (the normalised size of a layer/RMS norm,
the channel dim of a batch/group norm) and R = |x|/C statistic rows:

- **layer / group / batch norm, forward** (TraceLens's Normalization convention, shared so the
  numbers compare): FLOPs = 5·|x| + 6·C: 3 per element for the statistics (sum; subtract
  and multiply-add for the variance), 2 per element to apply (one multiply-add), and 6 per
  channel to form scale and shift. Bytes = |x|·(size(x) + size(y)) + T·C·size(x), with T the
  per-channel vectors touched: mean and variance (2), weight and bias when given, and 2 more
  in training (statistics written). For a layer norm the statistics are really per row
  (R of them, fp32); the per-channel form is kept for comparability and differs from the
  per-row one by under 1 % on the reference traces.
- **RMS norm, forward**: FLOPs = R·(2·C + 2) + |x|·(2 with a weight, else 1) (square and
  sum, rsqrt per row, scale, weight); bytes = |x|·(size(x) + size(y)) + C·size(w).
- **backward** (badput's own; TraceLens models no layer-norm backward on these traces):
  dx = rstd·(g − mean(g) − x̂·mean(g·x̂)) with g = dy·γ and x̂ = (x − μ)·rstd costs 10 FLOPs
  per element; dγ = Σ dy·x̂ costs 2, dβ = Σ dy 1, each when its output_mask bit is set.
  Bytes: read dy and x, write dx; read the saved statistics, read γ, write dγ and dβ.
"""

from __future__ import annotations

from badput.analysis.opmodel._core import Call, OpModel, Unmodellable, numel

__all__ = ["NORM_OPS", "model_norm"]

_FWD = {
    # name: (weight index, bias index, training flag index or None (always), channels from)
    "aten::native_layer_norm": (2, 3, None, "normalized"),
    "aten::layer_norm": (2, 3, None, "normalized"),
    "aten::native_group_norm": (1, 2, None, "dim1"),
    "aten::group_norm": (2, 3, None, "dim1"),
    "aten::native_batch_norm": (1, 2, 5, "dim1"),
    "aten::_native_batch_norm_legit": (1, 2, 5, "dim1"),
    "aten::_native_batch_norm_legit_no_training": (1, 2, -1, "dim1"),
    "aten::cudnn_batch_norm": (1, 2, 5, "dim1"),
    "aten::miopen_batch_norm": (1, 2, 5, "dim1"),
    "aten::batch_norm": (1, 2, 5, "dim1"),
}
_RMS = frozenset({"aten::rms_norm", "aten::_fused_rms_norm"})
# name: (dy index, x index, weight index, statistics indices, output_mask index, channels from)
_BWD: dict[str, tuple[int, int, int, tuple[int, ...], int | None, str]] = {
    # native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias,
    #                            output_mask)
    "aten::native_layer_norm_backward": (0, 1, 5, (3, 4), 7, "normalized"),
    # native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group, mask)
    "aten::native_group_norm_backward": (0, 1, 4, (2, 3), 9, "dim1"),
    # native_batch_norm_backward(grad_out, input, weight, running_mean, running_var,
    #                            save_mean, save_invstd, train, eps, output_mask)
    "aten::native_batch_norm_backward": (0, 1, 2, (5, 6), 9, "dim1"),
    # cudnn_batch_norm_backward(input, grad_output, weight, running_mean, running_var,
    #                           save_mean, save_var, epsilon, reserveSpace): all three grads
    "aten::cudnn_batch_norm_backward": (1, 0, 2, (5, 6), None, "dim1"),
    "aten::miopen_batch_norm_backward": (1, 0, 2, (5, 6), None, "dim1"),
    # _fused_rms_norm_backward(grad_out, input, normalized_shape, rstd, weight, output_mask)
    "aten::_fused_rms_norm_backward": (0, 1, 4, (3,), 5, "normalized"),
}


def _channels(call: Call, x: tuple[int, ...], how: str, idx: int) -> int:
    if how == "dim1":
        if len(x) < 2:
            raise Unmodellable("unexpected rank")
        return x[1]
    shape = call.value(idx)
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = [shape]
    if not isinstance(shape, list | tuple) or not all(isinstance(d, int) for d in shape):
        raise Unmodellable("malformed Concrete Inputs")
    if len(shape) > len(x) or tuple(x[len(x) - len(shape) :]) != tuple(shape):
        raise Unmodellable("shape mismatch")
    return numel([int(d) for d in shape])


def _forward(call: Call) -> OpModel:
    x, x_dt = call.tensor(0, min_rank=1)
    w_i, b_i, t_i, how = _FWD[call.name]
    c = _channels(call, x, how, 1)
    n = numel(x)
    training = True if t_i is None else (False if t_i < 0 else call.flag(t_i, True))
    weight = call.optional_tensor(w_i)
    bias = call.optional_tensor(b_i)
    flops = 6 * c + 2 * n + (3 * n if training else 0)
    vectors = 2 + (weight is not None) + (weight is not None and bias is not None)
    vectors += 2 if training else 0
    nbytes = 2 * n * x_dt.itemsize + vectors * c * x_dt.itemsize
    params = (
        ("op_shape", str(x)),
        ("num_channels", c),
        ("is_affine", weight is not None),
        ("has_bias", bias is not None),
        ("is_training", training),
    )
    return OpModel(call.name, "NORM_fwd", float(flops), float(nbytes), x_dt.precision, params)


def _rms(call: Call) -> OpModel:
    # rms_norm / _fused_rms_norm(input, normalized_shape, weight?, eps?)
    x, x_dt = call.tensor(0, min_rank=1)
    c = _channels(call, x, "normalized", 1)
    n = numel(x)
    rows = n // c if c else 0
    weight = call.optional_tensor(2)
    flops = rows * (2 * c + 2) + n * (2 if weight is not None else 1)
    nbytes = 2 * n * x_dt.itemsize + (numel(weight[0]) * weight[1].itemsize if weight else 0)
    params = (("op_shape", str(x)), ("num_channels", c), ("is_affine", weight is not None))
    return OpModel(call.name, "NORM_fwd", float(flops), float(nbytes), x_dt.precision, params)


def _backward(call: Call) -> OpModel:
    dy_i, x_i, w_i, stat_is, mask_i, how = _BWD[call.name]
    dy, dy_dt = call.tensor(dy_i)
    x, x_dt = call.tensor(x_i, min_rank=1)
    if dy != x:
        raise Unmodellable("shape mismatch")
    c = _channels(call, x, how, 2)
    n = numel(x)
    weight = call.optional_tensor(w_i)
    mask = call.value(mask_i) if mask_i is not None else None
    if not (isinstance(mask, list | tuple) and len(mask) in (2, 3)):
        mask = [True, weight is not None, weight is not None]
    want_dx, want_dw = bool(mask[0]), bool(mask[1]) and weight is not None
    want_db = len(mask) == 3 and bool(mask[2]) and weight is not None
    flops = 10 * n * want_dx + 2 * n * want_dw + n * want_db
    nbytes = n * dy_dt.itemsize + n * x_dt.itemsize + n * x_dt.itemsize * want_dx
    for i in stat_is:
        stat = call.optional_tensor(i)
        if stat is not None:
            nbytes += numel(stat[0]) * stat[1].itemsize
    if weight is not None:
        nbytes += c * weight[1].itemsize * (1 + want_dw + want_db)
    params = (
        ("op_shape", str(x)),
        ("num_channels", c),
        ("output_mask", str([want_dx, want_dw, want_db])),
    )
    return OpModel(call.name, "NORM_bwd", float(flops), float(nbytes), x_dt.precision, params)


def model_norm(call: Call) -> OpModel:
    """Model one normalization call; see the module docstring for the formulas.

    Args:
        call: The op call (name in :data:`NORM_OPS`).

    Returns:
        The model, category ``NORM_fwd`` or ``NORM_bwd``.

    Raises:
        Unmodellable: the shapes or arguments do not allow a model.
    """
    if call.name in _RMS:
        return _rms(call)
    if call.name in _BWD:
        return _backward(call)
    return _forward(call)


NORM_OPS = frozenset({*_FWD, *_RMS, *_BWD})
