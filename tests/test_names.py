"""Kernel names for display: short, salient, and never two different names alike."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from badput.report.names import MIN_DISTINCT_WIDTH, distinct_names, short_name
from badput.report.units import elide_middle, format_dtypes, format_shapes

# Real kernel names, from the TraceLens H100 traces and the bundled ResNet-50 V100 trace.
SM90 = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize{}_warpgroupsize1x1x1_execute_segment"
    "_k_off_kernel__5x_cublas"
)
GEMMS = [SM90.format(t) for t in ("128x128x64", "128x64x64", "64x64x64")]
CUTLASS = [
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x64_64x6_tn_align8>"
    "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x64_64x6_tn_align8::Params)",
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8>"
    "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8::Params)",
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2>"
    "(cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2::Params)",
    "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4"
    "_nhwc_align8>(cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4_nhwc_align8::"
    "Params)",
]
_FLASH = (
    "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4,"
    " false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, "
    "cutlass::bfloat16_t> >, false, {}, false, false, false, true, false>"
    "(pytorch_flash::Flash_fwd_params)"
)
FLASH = [_FLASH.format("true"), _FLASH.format("false")]
ELEMENTWISE = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::AddFunctor<float>, at::detail::Array<char*, "
    "3>)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
    "silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#6}::"
    "operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::"
    "(anonymous namespace)::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() "
    "const::{lambda()#6}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>"
    ", std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*"
    ", 3ul>)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, "
    "std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, "
    "2ul>)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, "
    "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<"
    "char*, 3ul> >(int, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
    "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, "
    "float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, "
    "at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float>"
    " >, std::array<char*, 2ul>)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, "
    "1>)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::tanh_kernel_cuda(at::"
    "TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
    "{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::tanh_kernel_cuda(at::"
    "TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
    "{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)",
]
REDUCE = [
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float,"
    " float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::"
    "MeanOps<float, float, float, float>, unsigned int, float, 4>)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float,"
    " float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, "
    "float>, unsigned int, float, 4>)",
]
CUDNN = [
    "void cudnn::cnn::wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int, int, int, "
    "float const*, int, float*, float const*, kernel_grad_params, unsigned long long, int, float, "
    "int, int, int, int)",
    "void cudnn::cnn::wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(int, int, int, "
    "float const*, int, float*, float const*, kernel_grad_params, unsigned long long, int, float, "
    "int, int, int, int)",
    "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, float "
    "const*, int, float const*, int, float*, kernel_grad_params, unsigned long long, int, "
    "unsigned long long, int, float, int, int, int)",
]
OTHER = [
    "Memcpy HtoD (Pageable -> Device)",
    "Memcpy DtoH (Device -> Pinned)",
    "Memset (Device)",
    "volta_sgemm_64x64_nt",
    "volta_sgemm_64x64_nn",
]
REAL = [*GEMMS, *CUTLASS, *FLASH, *ELEMENTWISE, *REDUCE, *CUDNN, *OTHER]


@pytest.mark.parametrize("width", [MIN_DISTINCT_WIDTH, 12, 20, 30, 41, 50, 60, 80, 200])
def test_real_names_stay_apart_within_width(width: int) -> None:
    out = distinct_names(REAL, width)
    assert len(out) == len(REAL)
    assert len(set(out)) == len(REAL), out
    assert all(len(o) <= width for o in out), out


def test_void_and_argument_lists_dropped() -> None:
    for name in (*ELEMENTWISE, *CUDNN, *FLASH):
        short = short_name(name, 200)
        assert not short.startswith("void ")
        assert "(" not in short and "TensorIteratorBase" not in short


def test_salient_template_arguments_kept() -> None:
    assert short_name(ELEMENTWISE[0], 80) == (
        "at::native::vectorized_elementwise_kernel<4, AddFunctor, fp32>"
    )
    assert "silu_kernel" in short_name(ELEMENTWISE[1], 60)
    assert "bf16" in short_name(ELEMENTWISE[1], 60)
    full = "cudnn::cnn::wgrad_alg0_engine<fp32, 128, 5, 5, 3, 3, 3, F, 512>"
    assert short_name(CUDNN[0], 70) == full
    # Narrower: the namespace goes first, then booleans, then trailing numbers.
    assert short_name(CUDNN[0], 60) == full.removeprefix("cudnn::cnn::")
    assert short_name(CUDNN[0], 48) == "wgrad_alg0_engine<fp32, 128, 5, 5, 3, 3, 3, 512>"
    assert short_name(CUDNN[0], 40) == "wgrad_alg0_engine<fp32, 128, 5, 5, 3, …>"
    assert short_name(OTHER[0]) == "Memcpy HtoD (Pageable -> Device)"  # not an argument list


def test_the_three_cutlass_gemms_no_longer_print_alike() -> None:
    """The old `_short` printed all of them as `cutlass::Kernel2<…>(…)`."""
    for width in (30, 40, 60):
        out = distinct_names(CUTLASS[:3], width)
        assert len(set(out)) == 3, out
        assert all(o.startswith(("Kernel2<", "cutlass::Kernel2")) for o in out), out


def test_gemms_differing_in_the_middle_show_where_they_differ() -> None:
    out = distinct_names(GEMMS, 40)
    assert len(set(out)) == 3
    for tile, o in zip(("128x128x64", "128x64x64", "64x64x64"), out, strict=True):
        assert tile[:8] in o, out


def test_flash_variants_differing_in_one_flag() -> None:
    out = distinct_names(FLASH, 36)
    assert len(set(out)) == 2 and all(len(o) <= 36 for o in out)
    assert all(o.startswith("flash_fwd_") for o in out)


def test_equal_names_equal_forms_and_order_kept() -> None:
    names = [ELEMENTWISE[0], CUDNN[0], ELEMENTWISE[0]]
    out = distinct_names(names, 30)
    assert out[0] == out[2] and out[0] != out[1]


def test_hash_suffix_is_stable_and_last_resort() -> None:
    # Two names alike in everything a 10-character column can show.
    a, b = "x" * 30 + "a" + "x" * 30, "x" * 30 + "b" + "x" * 30
    out = distinct_names([a, b], 10)
    assert len(set(out)) == 2 and all(len(o) <= 10 for o in out)
    assert out == distinct_names([a, b], 10)
    assert distinct_names([b, a], 10) == out[::-1]


def test_tiny_widths_stay_within_width() -> None:
    for width in (0, 1, 2, 5):
        assert all(len(o) <= max(width, 1) for o in distinct_names(REAL, width))


_SYMBOLS = st.sampled_from([*"<>(),: _#{}*&x0123456789", "::", "float", "c10::BFloat16"])
_IDENT = st.text(alphabet="abcdefghij_", min_size=1, max_size=6)
_NAME = st.lists(st.one_of(_SYMBOLS, _IDENT), min_size=1, max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(
    names=st.lists(st.one_of(_NAME, st.sampled_from(REAL)), min_size=1, max_size=25, unique=True),
    width=st.integers(min_value=MIN_DISTINCT_WIDTH, max_value=120),
)
def test_property_distinct_and_within_width(names: list[str], width: int) -> None:
    out = distinct_names(names, width)
    assert len(out) == len(names)
    assert all(len(o) <= width for o in out)
    assert len(set(out)) == len(names)


@settings(max_examples=200, deadline=None)
@given(names=st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=15, unique=True),
       width=st.integers(min_value=MIN_DISTINCT_WIDTH, max_value=60))  # fmt: skip
def test_property_any_text(names: list[str], width: int) -> None:
    out = distinct_names(names, width)
    assert all(len(o) <= width for o in out)
    assert len(set(out)) == len(names)


def test_elide_middle() -> None:
    assert elide_middle("abcdef", 6) == "abcdef"
    assert elide_middle("abcdefgh", 5) == "ab…gh"
    assert elide_middle("abcdefgh", 1) == "…"
    assert elide_middle("abcdefgh", 0) == ""


def test_dtypes_and_shapes() -> None:
    assert format_dtypes(["c10::BFloat16", "c10::BFloat16", "Scalar", ""]) == "bf16"
    assert format_dtypes(["float", "c10::BFloat16"]) == "fp32/bf16"
    assert format_dtypes(["c10::Float8_e4m3fn", "c10::Float8_e5m2"]) == "fp8e4m3/fp8e5m2"
    assert format_dtypes(["TensorList", "Scalar"]) == "–"
    assert format_dtypes(["float", "Double", "Bool"], [[8, 8], [], []]) == "fp32"
    assert format_shapes([[8944, 1024], [1024, 2816]]) == "8944x1024 · 1024x2816"
    assert format_shapes([[1024], [8944, 1024], [1024, 1024], [], []]) == (
        "1024 · 8944x1024 · 1024x1024"
    )
    assert format_shapes([[[16, 559, 32], [16, 559, 32]], []]) == "[16x559x32 ×2]"
    assert format_shapes([[[2, 3], [4]]]) == "[2x3, 4]"
    assert format_shapes(None) == "–" and format_shapes([[], []]) == "–"


# Copies and sets as the CUDA profiler names them: what tells them apart is the memory kind.
COPIES = [
    "Memcpy HtoD (Pinned -> Device)",
    "Memcpy HtoD (Pageable -> Device)",
    "Memcpy DtoD (Device -> Device)",
    "Memcpy DtoH (Device -> Pageable)",
    "Memcpy DtoH (Device -> Pinned)",
    "Memset (Device)",
]


@pytest.mark.parametrize("width", [12, 16, 20, 24, 30, 40, 80])
def test_copies_keep_their_memory_kind(width: int) -> None:
    """The old shortening printed `Memcpy DtoD (…> Device)`: Pinned/Pageable gone."""
    out = distinct_names(COPIES, width)
    assert len(set(out)) == len(COPIES) and all(len(o) <= width for o in out), out
    for name, shown in zip(COPIES, out, strict=True):
        for kind in ("Pinned", "Pageable"):
            if kind in name and width >= 16:
                assert kind in shown, (width, shown)
        direction = name.split()[1]
        if direction != "(Device)":
            assert direction in shown, (width, shown)


def test_copy_forms() -> None:
    assert short_name("Memcpy DtoD (Device -> Device)", 20) == "Memcpy DtoD"
    assert short_name("Memcpy HtoD (Pinned -> Device)", 20) == "Memcpy HtoD Pinned"
    assert short_name("Memcpy HtoD (Pageable -> Device)", 14) == "HtoD Pageable"


# Symbols compiled with g++ 13 from ck_tile- and aiter-like templates (`nm`), and what
# `c++filt` gives for them.
CK_TILE = (
    "_ZN7ck_tile6kentryILi1ENS_13FmhaFwdKernelINS_9TileShapeILi128ELi64EEEEEJNS4_5KargsEEEEvDpT1_"
)
CK_TILE_CXX = (
    "void ck_tile::kentry<1, ck_tile::FmhaFwdKernel<ck_tile::TileShape<128, 64> >, "
    "ck_tile::FmhaFwdKernel<ck_tile::TileShape<128, 64> >::Kargs>(ck_tile::FmhaFwdKernel<"
    "ck_tile::TileShape<128, 64> >::Kargs)"
)
AITER = "_ZN5aiter24add_rmsnorm_quant_kernelIN3c108BFloat16ELi256ELi8EEEvPT_PKS3_S6_fi"
AITER_CXX = (
    "void aiter::add_rmsnorm_quant_kernel<c10::BFloat16, 256, 8>(c10::BFloat16*, "
    "c10::BFloat16 const*, c10::BFloat16 const*, float, int)"
)


def test_mangled_names_are_demangled_before_shortening() -> None:
    from badput.report.names import _cxa_demangle, demangle

    if _cxa_demangle() is not None:  # libstdc++ here: the full signature, as c++filt gives
        assert demangle(CK_TILE) == CK_TILE_CXX
        assert demangle(AITER) == AITER_CXX
        assert short_name(AITER, 60) == "aiter::add_rmsnorm_quant_kernel<bf16, 256, 8>"
    assert "kentry" in short_name(CK_TILE, 40) and not short_name(CK_TILE, 40).startswith("_Z")
    out = distinct_names([CK_TILE, AITER], 30)
    assert not any(o.startswith("_Z") for o in out), out


def test_demangle_falls_back_to_the_nested_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from badput.report import names

    monkeypatch.setattr(names, "_cxa_demangle", lambda: None)
    names.demangle.cache_clear()
    try:
        assert names.demangle(CK_TILE) == "ck_tile::kentry<…>"
        assert names.demangle(AITER) == "aiter::add_rmsnorm_quant_kernel<…>"
        assert names.demangle("_Z10add_kernelPfS_i") == "add_kernel"
        assert names.demangle("_Zgarbage") == "_Zgarbage"  # not parseable: the raw name
        assert names.demangle("volta_sgemm_64x64_nt") == "volta_sgemm_64x64_nt"
        assert short_name(AITER, 60) == "aiter::add_rmsnorm_quant_kernel<…>"
    finally:
        names.demangle.cache_clear()


@pytest.mark.parametrize("width", [12, 20, 30, 41, 60])
def test_names_never_cut_a_number(width: int) -> None:
    from badput.report.units import fits_numbers

    out = distinct_names(REAL + COPIES, width)
    assert all(fits_numbers(o) for o in out), [o for o in out if not fits_numbers(o)]
