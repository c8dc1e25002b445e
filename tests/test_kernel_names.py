"""Kernel name table (`analysis/patterns.py`): callees, classes, communication kinds and ops."""

# Real kernel names are long; they stay whole on one line each so that they can be searched for.
# ruff: noqa: E501

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from badput.analysis.patterns import (
    CATEGORIES,
    COMM_KINDS,
    NameClass,
    classify_name,
    comm_kind_from_letters,
    comm_op,
    is_communication_kernel,
    kernel_callee,
    kernel_category,
)
from badput.trace import load_trace
from badput.trace.model import EventKind

# --- kernel_callee -------------------------------------------------------------------------

CALLEES = [
    ("", ""),
    ("   ", ""),
    ("Kernel", "Kernel"),  # kineto-edge
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
    (
        "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
        "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t",
    ),
    (
        "void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<"
        "cutlass::bfloat16_t, cutlass::bfloat16_t, float, false> >(moe::dev::finalize::"
        "KernelParams<cutlass::bfloat16_t, cutlass::bfloat16_t, float, false>)",
        "moe::dev::finalize::finalizeKernelVecLoad",
    ),
    # Launchers unwrap, also nested (FlashAttention 3 as vLLM and SGLang traces show it).
    (
        "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<"
        "flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, "
        "cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, 128, cutlass::bfloat16_t, "
        "float> > > >(flash::FlashAttnFwdSm90<X>::Params)",
        "flash::FlashAttnFwdSm90",
    ),
    # ... and when the name is cut short inside the launched type's arguments.
    (
        "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::"
        "CollectiveMainloopFwdSm90<(int)2, cute::tuple<cute::C<(int)1>",
        "flash::FlashAttnFwdSm90",
    ),
    (
        "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8>"
        "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8::Params)",
        "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8",
    ),
    (  # cuDNN's copy of CUTLASS (TraceLens H100 trace)
        "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_"
        "32x4_nhwc_align8>(cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4_nhwc_"
        "align8::Params)",
        "cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4_nhwc_align8",
    ),
    (
        "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, "
        "int, int>, cutlass::gemm::collective::CollectiveMma<X>, void> >(Params)",
        "cutlass::gemm::kernel::GemmUniversal",
    ),
    # ck_tile::kentry<block size, occupancy, Kernel>: the first type argument.
    (
        "void ck_tile::kentry<256, 2, ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVS<"
        "P>, ck_tile::Default2DEpilogue<E> > >(ck_tile::FmhaFwdKernel<A, B>::Kargs)",
        "ck_tile::FmhaFwdKernel",
    ),
    (
        "void ck_tile::kentry<(int)1, ck_tile::GroupedGemmKernel<ck_tile::GemmSpatially>>(K)",
        "ck_tile::GroupedGemmKernel",
    ),
    # Anonymous namespaces, lambdas and operator() inside the template arguments.
    (
        "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true>"
        "(float*, float const*, int, int, int)",
        "(anonymous namespace)::softmax_warp_forward",
    ),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
        "silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#6}::"
        "operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, "
        "at::native::(anonymous namespace)::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::"
        "operator()() const::{lambda()#6}::operator()() const::{lambda(c10::BFloat16)#1}, "
        "std::array<char*, 2ul>)",
        "at::native::vectorized_elementwise_kernel",
    ),
    (
        "at::cuda::(anonymous namespace)::spin_kernel(long)",
        "at::cuda::(anonymous namespace)::spin_kernel",
    ),
    (  # a member of a class template: the class's arguments go too
        "void Foo<int, (Bar)3>::run<float>(float*)",
        "Foo::run",
    ),
    ("void foo::operator()<int>(int)", "foo::operator()"),
    # Parentheses and comparisons inside template arguments.
    ("void k<(N > 0), float>(float*)", "k"),
    ("void k<decltype(a->b), 2>(int)", "k"),
    # A return type with template arguments, as PyTorch prints it and as nsys simplifies it.
    (
        "std::enable_if<(int)0&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
        "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, float, int, int)",
        "vllm::fused_add_rms_norm_kernel",
    ),
    (
        "std::enable_if<T2>(int)0&&vllm::_typeConvert<T1>::exists, void>::type "
        "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(T1 *, long, float, int, int)",
        "vllm::fused_add_rms_norm_kernel",
    ),
    # Names cut short (by a profiler's "…" or by `name_head`) inside the template arguments.
    (
        "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::nat…",
        "at::native::reduce_kernel",
    ),
    (
        "void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel<c10::BFloat16>, (bool)1>(T1 *, cons…",
        "vllm::act_and_mul_kernel",
    ),
    # Itanium-mangled names some ROCm profilers leave.
    ("_ZN5aiter26fmha_fwd_hd128_bf16_causalE", "aiter::fmha_fwd_hd128_bf16_causal"),
    ("_Z14moe_sum_kernelIfEvPT_", "moe_sum_kernel"),
]


@pytest.mark.parametrize(("name", "callee"), CALLEES, ids=[c[1] or "empty" for c in CALLEES])
def test_kernel_callee(name: str, callee: str) -> None:
    assert kernel_callee(name) == callee


def test_kernel_callee_of_huge_names_is_cheap_and_reads_only_the_head() -> None:
    # 1 MB names: deep template nesting never closed, and a plain identifier.
    nested = "void deep_ep::internode::dispatch<" + "a<" * 500_000
    plain = "x" * 1_000_000
    start = time.perf_counter_ns()
    assert kernel_callee(nested) == "deep_ep::internode::dispatch"
    assert kernel_callee(plain) == "x" * 4096  # NAME_MATCH_CHARS
    assert classify_name(nested) == NameClass("communication", "all_to_all", "DeepEP")
    assert classify_name(plain) == NameClass("other", None, "")
    assert comm_op(nested) is None
    # Generous: it reads 4 KB per name; a quadratic scan of 1 MB would take minutes.
    assert time.perf_counter_ns() - start < 2_000_000_000


# --- classify_name -------------------------------------------------------------------------

COMM = "communication"
A2A = "all_to_all"
# (name, category, kind, family). Names from the shared traces (TraceLens H100, ResNet50 V100,
# DLRM 8-rank V100, HTA MI250 and critical-path A100) and from the libraries' sources and
# published profiles (see the table's comments in patterns.py).
CLASSES = [
    # NCCL / RCCL
    (
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        COMM,
        "all_reduce",
        "NCCL",
    ),
    (
        "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
        COMM,
        "send_recv",
        "NCCL",
    ),
    (
        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        COMM,
        "all_gather",
        "NCCL",
    ),
    (
        "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<8>)",
        COMM,
        "reduce_scatter",
        "NCCL",
    ),
    (
        "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        COMM,
        "broadcast",
        "NCCL",
    ),
    (
        "ncclDevKernel_Reduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        COMM,
        "reduce",
        "NCCL",
    ),
    ("ncclDevKernel_Generic(ncclDevComm*, channelMasks, ncclWork*)", COMM, "other", "NCCL"),
    (
        "void ncclKernelBroadcast<true>(int*, CtranAlgoDeviceState*, ctran::broadcast::KernelArgs)",
        COMM,
        "broadcast",
        "NCCL",
    ),
    ("mscclKernel_Sum_float_LL(ncclDevComm*, mscclAlgo*, mscclWork*)", COMM, "other", "MSCCL"),
    (
        "void allgather6<true>(void*, mscclpp::DeviceHandle<mscclpp::MemoryChannel>*, unsigned long)",
        COMM,
        "all_gather",
        "MSCCL++",
    ),
    # DeepEP and its forks
    (
        "void deep_ep::internode::dispatch<false, 8, 4, 7168>(int4*, float*, int*)",
        COMM,
        A2A,
        "DeepEP",
    ),
    ("void deep_ep::internode::combine<__nv_bfloat16, 8, 4>(int4*, float*)", COMM, A2A, "DeepEP"),
    (
        "void deep_ep::internode::notify_dispatch<false, 8>(int const*, int*, int)",
        COMM,
        A2A,
        "DeepEP",
    ),
    (
        "void deep_ep::internode::cached_notify<false>(int, int, int, int, int, int*)",
        COMM,
        A2A,
        "DeepEP",
    ),
    (
        "void deep_ep::intranode::cached_notify_dispatch<8>(int const*, int, void**, int**, int)",
        COMM,
        A2A,
        "DeepEP",
    ),
    ("void deep_ep::intranode::dispatch<8, 768, 6144>(int4*, float*, int*)", COMM, A2A, "DeepEP"),
    (
        "void deep_ep::internode_ll::dispatch<true, 3, 7168>(void*, float*, int*)",
        COMM,
        A2A,
        "DeepEP",
    ),
    (
        "void deep_ep::internode_ll::combine<false, 3, 7168, 128>(void*, void*, int*)",
        COMM,
        A2A,
        "DeepEP",
    ),
    (
        "void deep_ep::internode_ll::clean_low_latency_buffer<128>(int*, int, int*, int)",
        COMM,
        "other",
        "DeepEP",
    ),
    (
        "void deep_ep::ep::dispatch_impl<true, false, false, 132, 4, 28, 8, 14336, 56>(void*)",
        COMM,
        A2A,
        "DeepEP",
    ),
    (
        "void deep_ep::pp::pp_send_impl<20, 8, 65536, 4, 100000>(void*, int)",
        COMM,
        "send_recv",
        "DeepEP",
    ),
    ("void deep_ep::bucket::hybrid_all_reduce<1, 8, 20, 4>(void*)", COMM, "all_reduce", "DeepEP"),
    (
        "void primus_turbo::deep_ep::intranode::cached_notify_combine<8>(void**, int*, int, int, int)",
        COMM,
        A2A,
        "DeepEP",
    ),
    (
        "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*)",
        "other",
        None,
        "DeepEP layout",
    ),
    ("void nccl_ep::internode_ll::dispatch<true>(void*)", COMM, A2A, "NCCL EP"),
    ("void uccl_ep::internode::dispatch<false, 8>(int4*)", COMM, A2A, "EP all-to-all"),
    (
        "void mori::moe::EpDispatchIntraNodeKernel<__hip_bfloat16>(mori::moe::EpDispatchCombineArgs<__hip_bfloat16>)",
        COMM,
        A2A,
        "MORI-EP",
    ),
    (
        "moe_comm::moeA2ADispatchKernel(int const*, moe_comm::KernelParams)",
        COMM,
        A2A,
        "TensorRT-LLM MoE all-to-all",
    ),
    (
        "void tensorrt_llm::kernels::moe_comm::moeA2APrepareDispatchKernel(int*, int*, int, unsigned int*)",
        COMM,
        A2A,
        "TensorRT-LLM MoE all-to-all",
    ),
    # NVSHMEM
    ("nvshmemi_barrier_all_on_stream_kernel()", COMM, "other", "NVSHMEM"),
    (
        "void nvshmemi_fcollect_kernel<int>(int*, int const*, unsigned long)",
        COMM,
        "all_gather",
        "NVSHMEM",
    ),
    # custom all-reduce and symmetric memory
    (
        "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)",
        COMM,
        "all_reduce",
        "vLLM custom all-reduce",
    ),
    (
        "void vllm::cross_device_reduce_2stage<float, 4>(vllm::RankData*)",
        COMM,
        "all_reduce",
        "vLLM custom all-reduce",
    ),
    (
        "void (anonymous namespace)::one_shot_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16**, unsigned long)",
        COMM,
        "all_reduce",
        "custom collective",
    ),
    (
        "void c10d::symmetric_memory::two_shot_all_reduce_kernel<float, 4>(float**, unsigned long)",
        COMM,
        "all_reduce",
        "custom collective",
    ),
    (
        "void multimem_all_reduce_kernel<c10::BFloat16, 8>(c10::BFloat16*, unsigned long)",
        COMM,
        "all_reduce",
        "custom collective",
    ),
    (
        "void multimem_all_gather_kernel<16>(char*, char*, unsigned long)",
        COMM,
        "all_gather",
        "custom collective",
    ),
    (
        "c10d::nvshmem_extension::allToAllV(void*, void*, long*, unsigned long, int, int)",
        COMM,
        A2A,
        "custom collective",
    ),
    (
        "void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8>(tensorrt_llm::kernels::AllReduceParams)",
        COMM,
        "all_reduce",
        "custom collective",
    ),
    (
        "void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<(tensorrt_llm::kernels::ar_fusion::AllReduceFusionPattern)1, __nv_bfloat16, 8, true, true>(P)",
        COMM,
        "all_reduce",
        "custom collective",
    ),
    (
        "void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_twoshot_sync<half, 4, true>(P)",
        COMM,
        "all_reduce",
        "custom collective",
    ),
    # Triton (TorchInductor)
    ("triton_poi_fused_mul_squeeze_0", "elementwise", None, "Triton pointwise"),
    ("triton_poi_fused_clone_transpose_0", "elementwise", None, "Triton pointwise"),
    ("triton_red_fused_add_sum_0", "reduction", None, "Triton reduction"),
    ("triton_per_fused__to_copy_native_layer_norm_0", "reduction", None, "Triton reduction"),
    ("triton_tem_fused_addmm_1", "gemm", None, "Triton GEMM template"),
    ("triton_tem_fused_mm_0", "gemm", None, "Triton GEMM template"),
    # attention
    (
        "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t> >(pytorch_flash::Flash_fwd_params)",
        "attention",
        None,
        "flash attention",
    ),
    (
        "void flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4> >(Flash_fwd_params)",
        "attention",
        None,
        "flash attention",
    ),
    (
        "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<X> > >(P)",
        "attention",
        None,
        "flash attention",
    ),
    (
        "void flash::prepare_varlen_num_blocks_kernel(int, int, int, int const*, int*, bool)",
        "attention",
        None,
        "flash attention",
    ),
    (
        "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
        "attention",
        None,
        "attention",
    ),
    (
        "fmhaSm100fKernel_QkvE4m3OBfloat16HQk128HV128HVPerCta128PagedKvCausalP32VarSeqQ128Kv128PersistentContext",
        "attention",
        None,
        "attention",
    ),
    (
        "void tensorrt_llm::kernels::mmha::masked_multihead_attention_kernel<__nv_bfloat16, 128>(P)",
        "attention",
        None,
        "attention",
    ),
    (
        "void flashinfer::BatchPrefillWithPagedKVCacheKernel<KernelTraits, Params>(Params)",
        "attention",
        None,
        "attention",
    ),
    (
        "void flashinfer::BatchDecodeWithPagedKVCacheKernel<2u, 4u, 8u, 16u>(Params)",
        "attention",
        None,
        "attention",
    ),
    (
        "void vllm::paged_attention_v1_kernel<__nv_bfloat16, 128, 16, 128>(P)",
        "attention",
        None,
        "attention",
    ),
    (
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1_kernel0_0",
        "attention",
        None,
        "attention",
    ),
    ("void deep_gemm::sm100_fp8_paged_mqa_logits<128, 64>(P)", "attention", None, "attention"),
    (
        "void ck_tile::kentry<256, 1, ck_tile::FmhaBwdDQDKDVKernel<P, E> >(K)",
        "attention",
        None,
        "attention",
    ),
    # RoPE is elementwise although its names mention attention layouts
    (
        "void tensorrt_llm::kernels::applyMLARope<__nv_bfloat16, 64, 512>(P)",
        "elementwise",
        None,
        "RoPE",
    ),
    (
        "void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheKernel<true, 128u, 8u, 16u>(P)",
        "elementwise",
        None,
        "RoPE",
    ),
    (
        "void vllm::rotary_embedding_kernel<c10::BFloat16, (bool)1>(long const*, c10::BFloat16*)",
        "elementwise",
        None,
        "RoPE",
    ),
    # GEMM
    (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
        "gemm",
        None,
        "cuBLAS GEMM",
    ),
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN", "gemm", None, "cuBLAS GEMM"),
    ("nvjet_sm90_tst_384x80_64x3_4x1_v_bz_coopA_TNT", "gemm", None, "cuBLAS GEMM"),
    ("ampere_sgemm_128x64_nn", "gemm", None, "cuBLAS GEMM"),
    ("volta_sgemm_128x32_nt", "gemm", None, "cuBLAS GEMM"),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn", "gemm", None, "cuBLAS GEMM"),
    (
        "void splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>(cublasSplitKParams<float>, float const*)",
        "gemm",
        None,
        "cuBLAS GEMM",
    ),
    (
        "void gemmSN_TN_kernel<float, 128, 16, 2, 4, 8, 9, false, cublasGemvTensorStridedBatched<float const> >(P)",
        "gemm",
        None,
        "cuBLAS GEMM",
    ),
    (
        "void dot_kernel<float, 128, 0, cublasDotParams<cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float> > >(P)",
        "gemm",
        None,
        "cuBLAS GEMM",
    ),
    (
        "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8::Params)",
        "gemm",
        None,
        "GEMM",
    ),
    (
        "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GroupProblemShape<cute::tuple<long, long, long> > > >(P)",
        "gemm",
        None,
        "GEMM",
    ),
    (
        "Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16_MI16x16x1_SN_LDSB0_AFC1",
        "gemm",
        None,
        "Tensile GEMM",
    ),
    (
        "Custom_Cijk_Alik_Bljk_BBS_BH_Bias_AS_SAV_UserArgs_MT256x256x64_MI16x16x1_SN_K1_MIWT4_16",
        "gemm",
        None,
        "Tensile GEMM",
    ),
    (
        "bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x8x512u2_s4_et128x8_m128x8x32_cga1x1x1_16dp256b_TN_transOut_schedS_bN_sm100f",
        "gemm",
        None,
        "GEMM",
    ),
    (
        "void deep_gemm::fp8_gemm_kernel<4096u, 7168u, 128u, 128u, 128u, 8u>(P)",
        "gemm",
        None,
        "DeepGEMM",
    ),
    ("void deep_gemm::sm100_fp8_gemm_1d1d_impl<0u, 1536u, 7168u>(P)", "gemm", None, "DeepGEMM"),
    ("fused_moe_kernel", "gemm", None, "fused MoE GEMM"),
    ("aiter::fmoe_bf16_pertokenFp8_g1u1_vs_silu_1tg_ps_32x512", "gemm", None, "fused MoE GEMM"),
    (
        "void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<X>, true>(K)",
        "gemm",
        None,
        "GEMM",
    ),
    ("_w8a8_block_fp8_matmul", "gemm", None, "GEMM"),
    # convolutions run as GEMMs
    (
        "void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, true, true>(int, int)",
        "gemm",
        None,
        "cuDNN convolution",
    ),
    (
        "void cudnn::cnn::wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int, int)",
        "gemm",
        None,
        "cuDNN convolution",
    ),
    (
        "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int)",
        "gemm",
        None,
        "cuDNN convolution",
    ),
    (
        "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel_cudnn",
        "gemm",
        None,
        "cuDNN convolution",
    ),
    (
        "volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1",
        "gemm",
        None,
        "cuDNN convolution",
    ),
    ("volta_scudnn_128x64_relu_interior_nn_v1", "gemm", None, "cuDNN convolution"),
    ("naive_conv_fwd_nchw_float_double_float", "gemm", None, "convolution"),
    # depthwise / causal convolutions are not matrix products
    (
        "void at::native::(anonymous namespace)::conv_depthwise2d_forward_kernel<3, float, int>(P)",
        "other",
        None,
        "",
    ),
    (
        "void tensorrt_llm::kernels::causal_conv1d::causal_conv1d_update_kernel<64, 4>(P)",
        "other",
        None,
        "",
    ),
    # helpers around GEMMs (the examples and their families)
    (
        "void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<cutlass::bfloat16_t, cutlass::bfloat16_t, float, false> >(P)",
        "gemm-helper",
        None,
        "MoE finalize",
    ),
    (
        "void tensorrt_llm::kernels::cutlass_kernels::finalizeMoeRoutingKernel<__nv_bfloat16, float>(P)",
        "gemm-helper",
        None,
        "MoE finalize",
    ),
    (
        "void tensorrt_llm::kernels::cutlass_kernels::expandInputRowsKernel<__nv_bfloat16, (tensorrt_llm::kernels::cutlass_kernels::TmaWarpSpecializedGroupedGemmInput::FpXBlockScalingType)0>(P)",
        "gemm-helper",
        None,
        "MoE routing",
    ),
    (
        "void moe::dev::routing::routingRenormalize::routingIndicesHistogramScoresKernel<P>(P)",
        "gemm-helper",
        None,
        "MoE routing",
    ),
    (
        "void vllm::moe::moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, int, unsigned long)",
        "gemm-helper",
        None,
        "MoE routing",
    ),
    ("void cute_dsl::moePermuteKernel_bf16(P)", "gemm-helper", None, "MoE routing"),
    (
        "void ck_tile::kentry<2, ck_tile::MoeSortingMultiPhaseKernel_P23<ck_tile::MoeSortingProblemMp<int> >, ck_tile::MoeSortingMultiPhaseKernel_P23<P>::Kargs>(K)",
        "gemm-helper",
        None,
        "MoE routing",
    ),
    (
        "void cudnn::ops::scalePackedTensor_kernel<float, float>(cudnnTensor4dStruct, float*, float)",
        "gemm-helper",
        None,
        "cuDNN helper",
    ),
    (
        "void cudnn::cnn::im2col4d_kernel<float, long>(cudnn::cnn::im2col4d_params, cudnnConvolutionStruct, cudnnTensor4dStruct, float const*, float*)",
        "gemm-helper",
        None,
        "im2col",
    ),
    (
        "cask_cudnn::computeWgradSplitKOffsetsKernel(cask_cudnn::ComputeSplitKOffsetsParams)",
        "gemm-helper",
        None,
        "cuDNN helper",
    ),
    (
        "void cask_cudnn::computeOffsetsKernel<false, false>(cask_cudnn::ComputeOffsetsParams)",
        "gemm-helper",
        None,
        "cuDNN helper",
    ),
    (
        "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(P)",
        "gemm-helper",
        None,
        "cuDNN Winograd transform",
    ),
    (
        "void fft2d_r2c_32x32<float, false, 0u, false>(float2*, float const*, int, cudnn::reduced_divisor, bool)",
        "gemm-helper",
        None,
        "cuDNN FFT transform",
    ),
    (
        "void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, false, true, (cudnnKernelDataType_t)0>(P)",
        "gemm-helper",
        None,
        "layout transform",
    ),
    (
        "void nhwcToNchwKernel<float, float, float, true, false, (cudnnKernelDataType_t)0>(int, int, int, int, float const*, float*, float, float)",
        "gemm-helper",
        None,
        "layout transform",
    ),
    ("transpose_packed_MN2NM", "gemm-helper", None, "layout transform"),
    (
        "void epilogue::impl::globalKernel<float, float, float, true, true>(int, int, long, float*, cublasLtEpilogue_t, int)",
        "gemm-helper",
        None,
        "cuBLASLt epilogue",
    ),
    (
        "void tensorrt_llm::kernels::quantize_with_block_size<(tensorrt_llm::BlockScaleQuantizationType)0, __nv_bfloat16, 16, false>(P)",
        "gemm-helper",
        None,
        "quantize",
    ),
    ("_per_token_group_quant_fp8", "gemm-helper", None, "quantize"),
    # reductions
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>, unsigned int, float, 4> >(P)",
        "reduction",
        None,
        "reduction",
    ),
    (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float)",
        "reduction",
        None,
        "reduction",
    ),
    (
        "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>(cudnnTensorStruct, float const*)",
        "reduction",
        None,
        "reduction",
    ),
    (
        "void reduce_1Block_kernel<float, 128, 7, cublasGemvTensorStridedBatched<float> >(float const*, float)",
        "reduction",
        None,
        "reduction",
    ),
    (
        "void cub::DeviceCompactInitKernel<cub::ReduceByKeyScanTileState<int, int, true>, int*>(P, int, int*)",
        "reduction",
        None,
        "reduction",
    ),
    ("void tensorrt_llm::kernels::topKPerRowDecode<1024, true>(P)", "reduction", None, "reduction"),
    (
        "void vllm::moe::topkGatingSoftmax<8, 128, 4, 16, 32, int>(float const*, bool const*, float*)",
        "reduction",
        None,
        "reduction",
    ),
    # elementwise
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
        "elementwise",
        None,
        "elementwise",
    ),
    (
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>(P)",
        "elementwise",
        None,
        "elementwise",
    ),
    (
        "void fbgemm_gpu::permute_2D_data_kernel<false, int, int, decltype(nullptr)>(int, int, int, int const*)",
        "elementwise",
        None,
        "elementwise",
    ),
    (
        "void split_embedding_codegen_forward_unweighted_kernel<float, float, float, false, long, 1ul, 8ul>(P)",
        "elementwise",
        None,
        "elementwise",
    ),
    (
        "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>(P)",
        "elementwise",
        None,
        "elementwise",
    ),
    ("void moe::dev::activation::activationKernel<P>(P)", "elementwise", None, "elementwise"),
    # other
    (
        "void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, int, int>::Policy800, false, long, int, int, int>(int*)",
        "other",
        None,
        "",
    ),
    (
        "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, float const*)",
        "other",
        None,
        "",
    ),
    ("at::cuda::(anonymous namespace)::spin_kernel(long)", "other", None, ""),
    ("Kernel", "other", None, ""),
    ("", "other", None, ""),
    # A launcher whose kernel argument was cut off: the type string is all there is.
    ("void cutlass::device_kernel<", "other", None, ""),
    ("void cutlass::device_kernel", "other", None, ""),
]


@pytest.mark.parametrize(
    ("name", "category", "kind", "family"), CLASSES, ids=[c[0][:60] or "empty" for c in CLASSES]
)
def test_classify_name(name: str, category: str, kind: str | None, family: str) -> None:
    assert classify_name(name) == NameClass(category, kind, family)
    assert kernel_category(name) == category
    assert is_communication_kernel(name) == (category == "communication")


def test_table_covers_every_category_and_kind() -> None:
    # Every category and every communication kind appears in the case table above.
    classes = [classify_name(c[0]) for c in CLASSES]
    assert {c.category for c in classes} == set(CATEGORIES)
    assert {c.kind for c in classes if c.kind} == set(COMM_KINDS)


def test_template_arguments_never_decide() -> None:
    # The same callee with CUTLASS, cuBLAS, NCCL or DeepEP types in its arguments.
    for arguments in (
        "cutlass::bfloat16_t",
        "cublasGemvParams<float>",
        "ncclDevComm*",
        "deep_ep::Cfg",
    ):
        name = f"void moe::dev::finalize::finalizeKernel<{arguments}>({arguments})"
        assert classify_name(name) == NameClass("gemm-helper", None, "MoE finalize")


# --- comm_kind_from_letters -----------------------------------------------------------------

LETTERS = [
    ("allreduce", "all_reduce"),
    ("_allgather_base", "all_gather"),
    ("allgather_into_tensor_coalesced", "all_gather"),
    ("reduce_scatter_tensor_coalesced", "reduce_scatter"),
    ("_reduce_scatter_base", "reduce_scatter"),
    ("alltoall_base", "all_to_all"),
    ("all_to_allv", "all_to_all"),
    ("moeA2ADispatchKernel", "all_to_all"),
    ("All2All", "all_to_all"),
    ("send", "send_recv"),
    ("recv", "send_recv"),
    ("ncclDevKernel_SendRecv", "send_recv"),
    ("_broadcast_oop", "broadcast"),
    ("_reduce_oop", "reduce"),
    ("cross_device_reduce_2stage", "all_reduce"),
    ("nvshmem_fcollect", "all_gather"),
    ("ncclDevKernel_AllGather_RING_LL", "all_gather"),
    ("barrier", "other"),
    ("gather", "other"),
    ("scatter", "other"),
    ("", "other"),
]


@pytest.mark.parametrize(("text", "kind"), LETTERS)
def test_comm_kind_from_letters(text: str, kind: str) -> None:
    assert comm_kind_from_letters(text) == kind


# --- comm_op --------------------------------------------------------------------------------

OPS = [
    ("record_param_comms", ("other", "c10d")),
    ("nccl:all_reduce", ("all_reduce", "NCCL")),
    ("nccl:all_to_all", ("all_to_all", "NCCL")),
    ("nccl:send", ("send_recv", "NCCL")),
    ("nccl:recv", ("send_recv", "NCCL")),
    ("nccl:_all_gather_base", ("all_gather", "NCCL")),
    ("nccl:_reduce_scatter_base", ("reduce_scatter", "NCCL")),
    ("nccl:broadcast", ("broadcast", "NCCL")),
    ("gloo:all_reduce", ("all_reduce", "Gloo")),
    ("c10d::allreduce_", ("all_reduce", "c10d")),
    ("c10d::allgather_", ("all_gather", "c10d")),
    ("c10d::_allgather_base_", ("all_gather", "c10d")),
    ("c10d::reduce_scatter_", ("reduce_scatter", "c10d")),
    ("c10d::_reduce_scatter_base_", ("reduce_scatter", "c10d")),
    ("c10d::alltoall_base_", ("all_to_all", "c10d")),
    ("c10d::send", ("send_recv", "c10d")),
    ("c10d::recv_", ("send_recv", "c10d")),
    ("c10d::broadcast_", ("broadcast", "c10d")),
    ("c10d::barrier", ("other", "c10d")),
    ("_c10d_functional::all_reduce", ("all_reduce", "c10d functional")),
    ("_c10d_functional::all_gather_into_tensor", ("all_gather", "c10d functional")),
    ("_c10d_functional::reduce_scatter_tensor", ("reduce_scatter", "c10d functional")),
    ("_c10d_functional::all_to_all_single", ("all_to_all", "c10d functional")),
    ("c10d_functional::all_reduce", ("all_reduce", "c10d functional")),
    ("_c10d_functional_autograd::all_to_all_single", ("all_to_all", "c10d functional")),
    ("_c10d_functional::wait_tensor", None),
    ("symm_mem::one_shot_all_reduce", ("all_reduce", "PyTorch symmetric memory")),
    ("symm_mem::two_shot_all_reduce_", ("all_reduce", "PyTorch symmetric memory")),
    ("symm_mem::multimem_all_reduce_", ("all_reduce", "PyTorch symmetric memory")),
    ("symm_mem::multimem_all_gather_out", ("all_gather", "PyTorch symmetric memory")),
    ("symm_mem::all_to_all_vdev", ("all_to_all", "PyTorch symmetric memory")),
    ("symm_mem::fused_all_gather_matmul", ("all_gather", "PyTorch symmetric memory")),
    ("symm_mem::nvshmem_broadcast", ("broadcast", "PyTorch symmetric memory")),
    ("symm_mem::_async_input_mm", None),
    ("symm_mem::stream_write_value32_", None),
    ("_C_custom_ar::all_reduce", ("all_reduce", "vLLM custom all-reduce")),
    ("_C_custom_ar::register_buffer", None),
    ("vllm::all_reduce", ("all_reduce", "vLLM")),
    ("vllm::outplace_all_reduce", ("all_reduce", "vLLM")),
    ("vllm::unified_attention", None),
    ("sgl_kernel::all_reduce", ("all_reduce", "SGLang")),
    ("sgl_kernel::custom_reduce", ("all_reduce", "SGLang")),
    ("sgl_kernel::rmsnorm", None),
    ("trtllm::allreduce", ("all_reduce", "TensorRT-LLM")),
    ("trtllm::moe_allreduce", ("all_reduce", "TensorRT-LLM")),
    ("trtllm::allgather", ("all_gather", "TensorRT-LLM")),
    ("trtllm::reducescatter", ("reduce_scatter", "TensorRT-LLM")),
    ("trtllm::alltoall", ("all_to_all", "TensorRT-LLM")),
    ("trtllm::moe_permute_op", None),
    ("flashinfer::trtllm_allreduce_fusion", ("all_reduce", "FlashInfer")),
    ("pplx_kernels::all_to_all_internode_dispatch", ("all_to_all", "pplx-kernels")),
    ("pplx_kernels::all_to_all_intranode_combine", ("all_to_all", "pplx-kernels")),
    ("pplx_kernels::all_to_all_internode_create", None),
    ("deep_ep/buffer.py(312): dispatch", ("all_to_all", "DeepEP")),
    (
        "/usr/lib/python3/site-packages/deep_ep/buffer.py(700): low_latency_combine",
        ("all_to_all", "DeepEP"),
    ),
    ("deep_ep/buffer.py(512): internode_dispatch", ("all_to_all", "DeepEP")),
    ("deep_ep/buffer.py(250): get_dispatch_layout", None),
    ("Buffer.dispatch", ("all_to_all", "DeepEP")),
    ("Buffer.intranode_combine", ("all_to_all", "DeepEP")),
    ("pplx_kernels/all_to_all.py(110): dispatch", ("all_to_all", "pplx-kernels")),
    ("mori/ops/dispatch_combine.py(200): combine", ("all_to_all", "MORI-EP")),
    ("nvshmemx_alltoallmem_on_stream", ("all_to_all", "NVSHMEM")),
    ("nvshmemx_barrier_all_on_stream", ("other", "NVSHMEM")),
    ("aten::mm", None),
    ("aten::all", None),
    ("my_model.py(10): dispatch", None),
    ("", None),
]


@pytest.mark.parametrize(("name", "expected"), OPS, ids=[o[0] or "empty" for o in OPS])
def test_comm_op(name: str, expected: tuple[str, str] | None) -> None:
    assert comm_op(name) == expected


# --- the shared traces -------------------------------------------------------------------

# Distinct kernel names per category in each shared trace folder. Against the table before
# issue 18, 25 names moved, all on purpose: the 2 Tensile GEMMs of hta-amd-mi250 (other ->
# gemm); cuDNN's offset, scaling, im2col, non-fused Winograd and FFT transforms, its
# NCHW<->NHWC conversions and cuBLASLt's epilogue (gemm, reduction or elementwise ->
# gemm-helper). Every other name kept its category.
TRACE_CATEGORIES = {
    "hta-amd-mi250": {"elementwise": 8, "gemm": 2, "reduction": 2},
    "hta-critical-path": {
        "elementwise": 6,
        "gemm": 5,
        "gemm-helper": 6,
        "other": 3,
        "reduction": 1,
    },
    "kineto-edge": {"elementwise": 8, "gemm": 3, "other": 1, "reduction": 2},
    "kineto-resnet50": {
        "elementwise": 8,
        "gemm": 32,
        "gemm-helper": 15,
        "other": 4,
        "reduction": 8,
    },
    "param-dlrm-8rank": {
        "communication": 2,
        "elementwise": 47,
        "gemm": 12,
        "other": 5,
        "reduction": 10,
    },
    "tracelens-h100": {
        "attention": 2,
        "elementwise": 24,
        "gemm": 9,
        "gemm-helper": 2,
        "reduction": 3,
    },
}


def _kernel_names(folder: Path) -> set[str]:
    names: set[str] = set()
    for path in sorted(folder.glob("*.json*")):
        if "overlaid" in path.name or "expected" in path.name or path.suffix == ".jsonl":
            continue
        trace = load_trace(str(path))
        ids = np.unique(trace.name_id[trace.kind == int(EventKind.KERNEL)])
        names.update(trace.names[i] for i in ids.tolist())
    return names


@pytest.mark.parametrize("folder", sorted(TRACE_CATEGORIES))
def test_shared_trace_kernel_categories(shared_traces: Path, folder: str) -> None:
    names = _kernel_names(shared_traces / folder)
    counts = Counter(kernel_category(n) for n in names)
    assert dict(counts) == TRACE_CATEGORIES[folder]


def test_mi250_tensile_kernels_are_gemm(shared_traces: Path) -> None:
    names = _kernel_names(shared_traces / "hta-amd-mi250")
    tensile = sorted(n for n in names if n.startswith("Cijk_"))
    assert len(tensile) == 2
    assert {classify_name(n) for n in tensile} == {NameClass("gemm", None, "Tensile GEMM")}
