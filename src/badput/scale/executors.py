"""Where per-rank work runs: in this process, on a local process pool, or on Ray.

Every executor runs a top-level (picklable) function over argument tuples and yields the
results in input order, whatever order they complete in, so reports never depend on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from badput._memory import keep_freed_memory, memory_kept
from badput.errors import BadputError, UsageError

if TYPE_CHECKING:
    from concurrent.futures import Future

__all__ = ["Executor", "LocalExecutor", "Progress", "RayExecutor"]

R = TypeVar("R")

#: Called with the number of items finished so far, after each one finishes.
Progress = Callable[[int], None]

RAY_HINT = "the Ray executor needs ray: pip install 'badput[ray]'"


class Executor(Protocol):
    """Runs `fn(*item)` for each item; results come back in input order."""

    def map(
        self,
        fn: Callable[..., R],
        items: Sequence[tuple[Any, ...]],
        progress: Progress | None = None,
    ) -> Iterator[R]:
        """Results of `fn(*item)` for each item, in input order.

        Args:
            fn: a module-level function (pool and Ray workers import it by name).
            items: argument tuples, small (paths and options, never data).
            progress: called with the count finished after each item finishes.
        """
        ...


class LocalExecutor:
    """On this machine: in-process with one job, else a process pool of `jobs` workers.

    Args:
        jobs: worker processes; 1 runs every item in this process, one at a time.
    """

    def __init__(self, jobs: int = 1) -> None:
        if jobs < 1:
            raise UsageError(f"--jobs {jobs}: must be at least 1")
        self.jobs = jobs

    def map(
        self,
        fn: Callable[..., R],
        items: Sequence[tuple[Any, ...]],
        progress: Progress | None = None,
    ) -> Iterator[R]:
        """Results of `fn(*item)` for each item, in input order."""
        if self.jobs == 1 or len(items) <= 1:
            for done, item in enumerate(items, 1):
                yield fn(*item)
                if progress:
                    progress(done)
            return
        yield from self._pool(fn, items, progress)

    def _pool(
        self, fn: Callable[..., R], items: Sequence[tuple[Any, ...]], progress: Progress | None
    ) -> Iterator[R]:
        # Imported here: a command on one trace (most) starts no pool, and these take 10 ms.
        import multiprocessing
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
        from concurrent.futures.process import BrokenProcessPool

        # Not fork: the driver may hold threads (rich's live display) and fork copies locks.
        forkserver = "forkserver" in multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("forkserver" if forkserver else "spawn")
        if forkserver:
            # The server imports the task's module once; each worker forks with it loaded.
            context.set_forkserver_preload([fn.__module__])
        results: dict[int, R] = {}
        workers = min(self.jobs, len(items))
        # Workers of a command are the command's own processes: they keep freed memory too.
        init = keep_freed_memory if memory_kept() else None
        with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=init) as pool:
            # One item per task (chunksize 1): ranks differ in size, and a worker holds one
            # trace at a time.
            pending: dict[Future[R], int] = {
                pool.submit(fn, *item): i for i, item in enumerate(items)
            }
            next_out = 0
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    try:
                        results[pending.pop(future)] = future.result()
                    except BrokenProcessPool as e:
                        raise BadputError(
                            "a worker process died (out of memory?); try fewer --jobs"
                        ) from e
                if progress:
                    progress(len(items) - len(pending))
                while next_out in results:  # hand results on as soon as they are in order
                    yield results.pop(next_out)
                    next_out += 1


class RayExecutor:
    """A Ray cluster: the one at `address`, or a local instance started for this run.

    Each task receives only its arguments (a path and options) and returns only its result;
    the nodes need badput installed and the trace paths readable.

    Args:
        address: a running cluster ("auto", "ray://host:10001", ...); None starts a local one.
        num_cpus: CPUs of a local instance (default: all).
        max_in_flight: tasks submitted and not yet finished, at most (`--jobs`): the next is
            submitted when one finishes. None submits every task at once and lets Ray's
            scheduler queue them on the cluster's CPUs.
    """

    def __init__(
        self,
        address: str | None = None,
        num_cpus: int | None = None,
        max_in_flight: int | None = None,
    ) -> None:
        if max_in_flight is not None and max_in_flight < 1:
            raise UsageError(f"--jobs {max_in_flight}: must be at least 1")
        self.address = address
        self.num_cpus = num_cpus
        self.max_in_flight = max_in_flight

    def map(
        self,
        fn: Callable[..., R],
        items: Sequence[tuple[Any, ...]],
        progress: Progress | None = None,
    ) -> Iterator[R]:
        """Results of `fn(*item)` for each item, in input order."""
        import logging

        try:
            import ray
        except ImportError as e:
            raise UsageError(RAY_HINT) from e

        started = not ray.is_initialized()
        if started:
            # Quiet: no dashboard, worker output not forwarded (the report is our output).
            try:
                ray.init(
                    address=self.address,
                    num_cpus=self.num_cpus if self.address is None else None,
                    include_dashboard=False,
                    log_to_driver=False,
                    ignore_reinit_error=True,
                    logging_level=logging.WARNING,
                )
            except (ConnectionError, RuntimeError, ValueError) as e:
                where = f"at {self.address}" if self.address else "locally"
                raise BadputError(f"cannot start or reach Ray {where}: {e}") from e
        try:
            remote = ray.remote(num_cpus=1)(fn)
            cap = len(items) if self.max_in_flight is None else self.max_in_flight
            index: dict[Any, int] = {}
            results: dict[int, R] = {}
            pending: list[Any] = []
            submitted = 0
            done = 0
            next_out = 0
            while done < len(items):
                # Top up to `cap` tasks in flight; the next waits until one finishes.
                while submitted < len(items) and len(pending) < cap:
                    ref = remote.remote(*items[submitted])
                    index[ref] = submitted
                    pending.append(ref)
                    submitted += 1
                finished, pending = ray.wait(pending, num_returns=1)
                for ref in finished:
                    results[index.pop(ref)] = ray.get(ref)
                    done += 1
                if progress:
                    progress(done)
                while next_out in results:
                    yield results.pop(next_out)
                    next_out += 1
        except ray.exceptions.RayTaskError:
            raise  # the task itself raised: a bug, with its traceback
        except ray.exceptions.RayError as e:  # the cluster failed (a node, a raylet, memory)
            raise BadputError(f"Ray failed: {type(e).__name__}: {e}") from e
        finally:
            if started:
                ray.shutdown()
