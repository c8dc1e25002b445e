"""The per-rank task: read one trace, analyse and diagnose it, return the compact outcome.

A module-level function so that pool and Ray workers can import it by name. It takes only a
path and options, and never returns the trace itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from badput._imports import import_beside
from badput.errors import BadputError, TraceFormatError

if TYPE_CHECKING:
    from badput.analysis.classify import ClassRules
    from badput.diagnose import RankOutcome

__all__ = ["analyze_path"]

# What the analysis of a read trace imports (the diagnosis pulls in every analysis it runs),
# and numpy's masked arrays, which the first `np.unique` imports: on two threads or more,
# imported while the trace's pieces are scanned.
_AFTER_THE_READ = ("badput.diagnose", "numpy.ma")


def analyze_path(
    path: str,
    window: str | None = None,
    top: int = 10,
    progress: Callable[[int], None] | None = None,
    step_range: str | None = None,
    rules: ClassRules | None = None,
    read_jobs: int | None = None,
) -> RankOutcome:
    """Analyse one trace file into its compact outcome; a bad trace becomes a failed outcome.

    Args:
        path: the trace file.
        window: `--window` text (`steps:N`, `steps:A-B`, `ns:T0-T1`, `us:T0-T1`), None for the
            default.
        top: kernels kept per GPU (0 keeps all).
        progress: called with uncompressed bytes read so far (in-process runs only).
        step_range: `--step-range` text: the name of the ranges that delimit steps.
        rules: `--classify` overrides of the kernel classes.
        read_jobs: threads that read and analyse the trace (`load_trace`'s and
            `analyze_trace`'s `jobs`; default: the CPUs it may run on, at most 8).

    Returns:
        The outcome, or one with `error` set to the reason the trace could not be read.

    Example:
        >>> analyze_path("worker0.pt.trace.json.gz").summaries[0].goodput  # doctest: +SKIP
        0.0715
    """
    from badput.trace import load_trace
    from badput.trace._mapped import default_read_jobs

    jobs = read_jobs if read_jobs is not None else default_read_jobs()
    if jobs > 1:
        import_beside(_AFTER_THE_READ)
    spec = None
    if window is not None:
        from badput.analysis import WindowSpec

        spec = WindowSpec.parse(window)
    try:
        trace = load_trace(path, progress=progress, step_range=step_range, jobs=jobs)
        from badput.analysis import analyze_trace
        from badput.analysis.device import analyze_with_paths
        from badput.diagnose import outcome_of

        # The outcome holds no path's rows and edges (`RankOutcome` is compact): its paths
        # keep none from the start (tens of MB of a 1 GB trace's, through the diagnosis).
        if jobs <= 1:
            devices = analyze_trace(trace, spec, rules=rules, jobs=jobs, path_edges=False)
            return outcome_of(trace, devices, top=top, jobs=jobs)
        # On two cores or more, each GPU's critical path is found beside its analysis and
        # diagnosis (the rules need it only for their what-ifs): a lone GPU's graph started
        # once its window is chosen, several GPUs' paths each when its diagnosis first asks
        # (one graph held at a time).
        from badput.analysis._beside import Beside
        from badput.analysis.memory import memory_timelines

        # The memory timelines need the trace alone: found beside from the start, they fill
        # the helper thread's wait for the launch tree.
        memory = Beside(jobs, memory_timelines, trace)
        devices, paths = analyze_with_paths(trace, spec, rules=rules, jobs=jobs, path_edges=False)
        return outcome_of(trace, devices, top=top, jobs=jobs, paths=paths, memory=memory)
    except TraceFormatError as e:
        from badput.diagnose import RankOutcome

        return RankOutcome(path=path, error=e.problem)
    except BadputError as e:
        from badput.diagnose import RankOutcome

        return RankOutcome(path=path, error=str(e))
