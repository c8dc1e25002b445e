"""Hardware table, FLOPs, time, memory, cost and energy models."""
