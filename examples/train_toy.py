"""A toy CPU training loop with a slow dataset and periodic checkpoints.

Used by `badput run -- python examples/train_toy.py` (no badput code in it) and by the tests.
Options: --steps N, --data-ms MS (time to produce a batch), --train-ms MS (extra work per
step), --checkpoint-every K, --report FILE (writes this script's own timings as JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import torch
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset[torch.Tensor]):
    """Each item takes `ms` milliseconds to produce (sleep: the main thread is free)."""

    def __init__(self, n: int, ms: float) -> None:
        self.n = n
        self.ms = ms

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.ms / 1000)
        return torch.full((64,), float(i))


def main() -> None:
    """Train the toy model; with --report, write the loop's own timings as JSON."""
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--data-ms", type=float, default=5.0)
    p.add_argument("--train-ms", type=float, default=15.0)
    p.add_argument("--checkpoint-every", type=int, default=10)
    p.add_argument("--report", default=None)
    args = p.parse_args()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowDataset(args.steps, args.data_ms), batch_size=None)
    pad = torch.randn(4_000_000)
    truth = {"data_wait_s": 0.0, "checkpoint_s": 0.0, "steps": 0}
    start = time.perf_counter()
    it = iter(loader)
    with tempfile.TemporaryDirectory() as tmp:
        while True:
            t = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                truth["data_wait_s"] += time.perf_counter() - t
                break
            truth["data_wait_s"] += time.perf_counter() - t
            loss = model(batch).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            end = time.perf_counter() + args.train_ms / 1000
            while time.perf_counter() < end:  # stands in for a longer forward/backward
                pass
            opt.step()
            truth["steps"] += 1
            if truth["steps"] % args.checkpoint_every == 0:
                t = time.perf_counter()
                # The state plus optimizer-sized padding: a save that takes some milliseconds.
                torch.save({"model": model.state_dict(), "pad": pad}, os.path.join(tmp, "ck.pt"))
                truth["checkpoint_s"] += time.perf_counter() - t
        # The loop ends here, before the temporary directory and its checkpoint are removed
        # (tens of milliseconds on a slow disk, and no part of the loop).
        truth["loop_s"] = time.perf_counter() - start
    if args.report:
        with open(args.report, "w") as f:
            json.dump(truth, f)


if __name__ == "__main__":
    main()
