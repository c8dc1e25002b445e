"""Synthetic N-rank trace sets with a known straggler, clock offsets and waits.

Every rank runs the same steps on a true (shared) timeline: step k is [k*P, (k+1)*P), GPU
and host `ProfilerStep#` annotations; compute kernels fill [k*P, k*P + c) where c is
`compute_us` (+ `extra_us` on the slow rank, + jitter), then one NCCL all-reduce starts on
each rank when its compute is done and ends, on every rank, at the same true instant
k*P + max(c over ranks) + `comm_us`. So each rank waits (latest compute end - its compute
end) inside the all-reduce, and the slow rank waits least.

Each rank's trace clock reads true time + its offset (`offsets_ns`, whole nanoseconds, ms to
seconds apart by default), and `skip` drops a rank's first steps (a window that starts later).
Times are whole microseconds (`TraceBuilder` default unit).
"""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import dataclass
from pathlib import Path

from synth import BASE_NS, H100, NCCL_ALLREDUCE, TraceBuilder

__all__ = ["RankSet", "replicate_ranks", "write_rank_set"]

GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn"


@dataclass(frozen=True)
class RankSet:
    """What was written, and the answers the construction implies.

    Attributes:
        paths: one trace per rank, rank order.
        offsets_ns: each rank's clock minus rank 0's.
        compute_us: compute per rank per step (rank x step), true time.
        waits_us: each rank's wait in each step's all-reduce (rank x step).
        steps: steps per rank (before `skip`).
    """

    paths: list[Path]
    offsets_ns: list[int]
    compute_us: list[list[int]]
    waits_us: list[list[int]]
    steps: int


def write_rank_set(
    folder: Path,
    *,
    ranks: int = 8,
    steps: int = 6,
    compute_us: int = 800,
    comm_us: int = 100,
    step_us: int = 2000,
    slow_rank: int | None = None,
    extra_us: int = 0,
    jitter_us: int = 0,
    offsets_ns: list[int] | None = None,
    skip: dict[int, int] | None = None,
    seed: int = 0,
    world_size: int | None = None,
) -> RankSet:
    """Write `ranks` traces into `folder`; see the module docstring.

    Args:
        folder: where the traces go (`rank{k}.pt.trace.json`).
        ranks: number of ranks.
        steps: steps per rank.
        compute_us: compute per step of an ordinary rank.
        comm_us: all-reduce time after the last rank arrives.
        step_us: step length (must hold compute, extra, jitter and comm).
        slow_rank: the rank that computes `extra_us` longer per step.
        extra_us: how much longer.
        jitter_us: every rank's compute varies by up to this much per step (seeded).
        offsets_ns: each rank's clock offset to the true time; default seeded, up to +-2 s.
        skip: rank -> number of first steps left out of its trace.
        seed: random seed of jitter and default offsets.
        world_size: `distributedInfo.world_size` (default `ranks`).
    """
    rng = random.Random(seed)
    if offsets_ns is None:
        offsets_ns = [0] + [rng.randrange(-2_000_000_000, 2_000_000_000) for _ in range(ranks - 1)]
    compute = [
        [
            compute_us
            + (extra_us if r == slow_rank else 0)
            + (rng.randrange(0, jitter_us + 1) if jitter_us else 0)
            for _ in range(steps)
        ]
        for r in range(ranks)
    ]
    latest = [max(compute[r][k] for r in range(ranks)) for k in range(steps)]
    assert max(latest) + comm_us < step_us, "step too short for its work"
    waits = [[latest[k] - compute[r][k] for k in range(steps)] for r in range(ranks)]
    paths = []
    for r in range(ranks):
        b = TraceBuilder(device=r, pid=1000 + r, tid=1000 + r, base_ns=BASE_NS + offsets_ns[r])
        b.device_properties([r], name=H100)
        b.distributed_info(r, world_size or ranks)
        for k in range((skip or {}).get(r, 0), steps):
            s = k * step_us
            b.profiler_step(k + 1, s, s + step_us)
            b.profiler_step(k + 1, s, s + step_us, gpu=True)
            t, end = s, s + compute[r][k]
            while t < end:  # kernels of at most 200 us, launched just ahead
                piece = min(t + 200, end)
                b.launch(GEMM, cpu=(t - 3, t - 2), gpu=(t, piece))
                t = piece
            c0 = s + compute[r][k]
            b.launch(
                NCCL_ALLREDUCE, cpu=(c0 - 3, c0 - 2), gpu=(c0, s + latest[k] + comm_us), stream=20
            )
        paths.append(b.write(folder / f"rank{r}.pt.trace.json"))
    rel = [o - offsets_ns[0] for o in offsets_ns]
    return RankSet(paths, rel, compute, waits, steps)


def replicate_ranks(
    src: Path, dst: Path, copies: int, shift_us: int = 1_234, compresslevel: int = 1
) -> Path:
    """`copies` x the real ranks in `src` (`*.json.gz`), written to `dst`.

    Copy c of rank r is rank c * n + r of world size copies * n, its clock shifted by
    c * shift_us: a bigger job from real traces (the tests' and `benchmarks/bench_ranks.py`'s).
    """
    dst.mkdir(parents=True, exist_ok=True)
    files = sorted(src.glob("*.json.gz"))
    n = len(files)
    for path in files:
        doc = json.loads(gzip.decompress(path.read_bytes()))
        rank = doc["distributedInfo"]["rank"]
        shifted = 0
        for c in range(copies):
            for e in doc["traceEvents"]:
                if "ts" in e:
                    e["ts"] += c * shift_us - shifted
            shifted = c * shift_us
            doc["distributedInfo"].update(rank=c * n + rank, world_size=copies * n)
            out = dst / f"rank{c * n + rank:04d}.pt.trace.json.gz"
            out.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=compresslevel))
    return dst
