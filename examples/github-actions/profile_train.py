"""A short profiled training run for CI: a few steps of a small model under torch.profiler.

Writes one Kineto trace (`*.pt.trace.json.gz`) into --out, which `badput analyze` and
`badput report` read. On a GPU runner the model trains on CUDA and the trace holds its kernels;
on a CPU-only runner it holds no GPU activity, so goodput is undefined and a --min-goodput gate
fails, as it should: goodput is a property of a GPU.

Run:

    python examples/github-actions/profile_train.py --steps 8 --out traces/

Replace the model and data with a few steps of your own training loop; keep the profiler
schedule (skip the first steps, then record a handful of whole steps) and
`tensorboard_trace_handler`.
"""

from __future__ import annotations

import argparse
import os

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    """Train a small MLP for wait + warmup + --steps steps, profiling the last --steps."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8, help="Profiled steps (ProfilerStep#N).")
    p.add_argument("--out", default="traces", help="Directory for the trace file.")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--width", type=int, default=2048)
    args = p.parse_args()

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(args.width, args.width),
        torch.nn.GELU(),
        torch.nn.Linear(args.width, args.width),
        torch.nn.GELU(),
        torch.nn.Linear(args.width, 10),
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    wait, warmup = 1, 2
    total = wait + warmup + args.steps
    data = TensorDataset(
        torch.randn(total * args.batch, args.width), torch.randint(0, 10, (total * args.batch,))
    )
    loader = DataLoader(data, batch_size=args.batch, pin_memory=cuda)

    os.makedirs(args.out, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(
        activities=activities,
        # skip the first step (allocator and cuDNN warm-up), then record whole steps
        schedule=schedule(wait=wait, warmup=warmup, active=args.steps, repeat=1),
        on_trace_ready=tensorboard_trace_handler(args.out, use_gzip=True),
    ) as prof:
        for x, y in loader:
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            prof.step()
    print(f"profiled {args.steps} steps on {device}; traces in {args.out}/")


if __name__ == "__main__":
    main()
