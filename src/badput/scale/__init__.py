"""Running per-rank work at scale: executors (local pool, Ray) and the per-rank task."""

from badput.scale.executors import Executor, LocalExecutor, Progress, RayExecutor
from badput.scale.work import analyze_path

__all__ = ["Executor", "LocalExecutor", "Progress", "RayExecutor", "analyze_path"]
