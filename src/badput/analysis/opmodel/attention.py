"""Scaled-dot-product and flash attention, forward and backward.

With B batches, H_Q query heads and H_KV key/value heads (GQA when H_KV < H_Q), N_Q queries,
N_KV keys, head dims d_qk and d_v (the convention of TraceLens's SDPA model and of
flash-attention's benchmark_flash_attention.py):

    forward  FLOPs = f·B·H_Q·(2·N_Q·N_KV·d_qk + 2·N_Q·N_KV·d_v)     (S = QKᵀ, O = PV)
    backward FLOPs = f·B·H_Q·N_Q·N_KV·(3·2·d_qk + 2·2·d_v)          (recompute S, dV, dP, dQ, dK)
    forward  bytes = |Q| + |K| + |V| + |O|, each at its own element size
    backward bytes = |Q| + |K| + |V| + |O| + |dO| + |LSE| + |dQ| + |dK| + |dV|

Softmax, scaling and dropout are not counted (O(N²) against O(N²·d)). f is the unmasked
fraction of the score matrix: 1, or for a causal mask the continuous area of the kept
triangle: ½ when N_Q = N_KV (the diagonal is not counted, as TraceLens and flash-attn count
it). With N_Q ≠ N_KV PyTorch's ``is_causal`` keeps the upper-left triangle and flash-attn's
``causal`` (≥ 2.1) the lower-right one; TraceLens refuses that case, badput models both.
"""

from __future__ import annotations

from badput.analysis.opmodel._core import Call, OpModel, Unmodellable, numel

__all__ = ["ATTENTION_OPS", "model_attention"]

# name: (index of q, layout of q/k/v ("bhnd" or "bnhd"), index of is_causal, backward,
#        causal alignment ("upper_left" for PyTorch, "lower_right" for flash-attn)).
# Indices from native_functions.yaml and flash_attn/flash_attn_interface.py.
_OPS: dict[str, tuple[int, str, int, bool, str]] = {
    "aten::_scaled_dot_product_flash_attention": (0, "bhnd", 4, False, "upper_left"),
    "aten::_scaled_dot_product_efficient_attention": (0, "bhnd", 6, False, "upper_left"),
    "aten::_scaled_dot_product_cudnn_attention": (0, "bhnd", 6, False, "upper_left"),
    "aten::_scaled_dot_product_flash_attention_for_cpu": (0, "bhnd", 4, False, "upper_left"),
    "aten::_flash_attention_forward": (0, "bnhd", 8, False, "upper_left"),
    "aten::_scaled_dot_product_flash_attention_backward": (1, "bhnd", 11, True, "upper_left"),
    "aten::_scaled_dot_product_efficient_attention_backward": (1, "bhnd", 11, True, "upper_left"),
    "aten::_scaled_dot_product_cudnn_attention_backward": (1, "bhnd", 14, True, "upper_left"),
    "aten::_flash_attention_backward": (1, "bnhd", 11, True, "upper_left"),
    "flash_attn::_flash_attn_forward": (0, "bnhd", 5, False, "lower_right"),
    "flash_attn::_flash_attn_backward": (1, "bnhd", 11, True, "lower_right"),
}
# Variable-length forms pack all sequences into one dim: the per-sequence lengths (and so the
# N_Q·N_KV products) are device tensors the trace does not record.
_VARLEN = frozenset(
    {"flash_attn::_flash_attn_varlen_forward", "flash_attn::_flash_attn_varlen_backward"}
)


def causal_fraction(n_q: int, n_kv: int, alignment: str) -> float:
    """Kept fraction of an N_Q×N_KV score matrix under a causal mask (continuous area).

    Args:
        n_q: Queries.
        n_kv: Keys.
        alignment: ``"upper_left"`` (query i sees keys ≤ i) or ``"lower_right"`` (query i
            sees keys ≤ i + N_KV − N_Q).

    Returns:
        The fraction in [0, 1]; ½ when the matrix is square.
    """
    if n_q == 0 or n_kv == 0:
        return 0.0
    q, k = float(n_q), float(n_kv)
    if alignment == "upper_left":
        kept = q * q / 2 if q <= k else k * k / 2 + (q - k) * k
    else:
        kept = q * k - q * q / 2 if k >= q else k * k / 2
    return kept / (q * k)


def _bhnd(shape: tuple[int, ...], layout: str) -> tuple[int, int, int, int]:
    if len(shape) != 4:
        raise Unmodellable("unsupported attention layout")
    if layout == "bhnd":
        return shape[0], shape[1], shape[2], shape[3]
    return shape[0], shape[2], shape[1], shape[3]


def model_attention(call: Call) -> OpModel:
    """Model one attention call; see the module docstring for the formula.

    Args:
        call: The op call (name in :data:`ATTENTION_OPS`).

    Returns:
        The model, category ``SDPA_fwd`` or ``SDPA_bwd``.

    Raises:
        Unmodellable: the shapes or arguments do not allow a model.
    """
    if call.name in _VARLEN:
        raise Unmodellable("variable-length attention")
    qi, layout, ci, bwd, align = _OPS[call.name]
    q, q_dt = call.tensor(qi)
    k, k_dt = call.tensor(qi + 1)
    v, v_dt = call.tensor(qi + 2)
    b, h_q, n_q, d_qk = _bhnd(q, layout)
    bk, h_kv, n_kv, d_k = _bhnd(k, layout)
    bv, h_v, n_v, d_v = _bhnd(v, layout)
    if bk != b or bv != b or d_k != d_qk or n_v != n_kv or h_v != h_kv:
        raise Unmodellable("shape mismatch")
    if h_kv == 0 or h_q % h_kv:
        raise Unmodellable("shape mismatch")
    causal = call.flag(ci)
    frac = causal_fraction(n_q, n_kv, align) if causal else 1.0
    pairs = numel((b, h_q, n_q, n_kv))
    per_pair = 6 * d_qk + 4 * d_v if bwd else 2 * d_qk + 2 * d_v
    flops = frac * pairs * per_pair
    o = numel((b, h_q, n_q, d_v))
    nbytes = numel(q) * q_dt.itemsize + numel(k) * k_dt.itemsize + numel(v) * v_dt.itemsize
    nbytes += o * q_dt.itemsize
    if bwd:
        # dO and O read (O for the rowsum D = Σ dO∘O), LSE read (fp32), dQ dK dV written.
        nbytes += o * q_dt.itemsize + numel((b, h_q, n_q)) * 4
        nbytes += numel(q) * q_dt.itemsize + numel(k) * k_dt.itemsize + numel(v) * v_dt.itemsize
    # dropout_p sits just before is_causal in the aten forward schemas only
    aten_fwd = not bwd and call.name.startswith("aten::")
    params = (
        ("B", b),
        ("N_Q", n_q),
        ("H_Q", h_q),
        ("N_KV", n_kv),
        ("H_KV", h_kv),
        ("d_h_qk", d_qk),
        ("d_h_v", d_v),
        ("causal", causal),
        ("dropout", call.number(ci - 1, 0.0) if aten_fwd else 0.0),
    )
    category = "SDPA_bwd" if bwd else "SDPA_fwd"
    return OpModel(call.name, category, float(flops), float(nbytes), q_dt.precision, params)


ATTENTION_OPS = frozenset({*_OPS, *_VARLEN})
