"""Where job code runs: a local process pool by default, a Dask cluster when configured.

Both take the same callable and arguments and hand back a ``concurrent.futures``-style
future, so the job code is the same either way.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol


class Executor(Protocol):
    name: str

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    def shutdown(self) -> None: ...


class ProcessExecutor:
    """A pool of worker processes, started with ``spawn`` so no thread state is inherited."""

    name = "process pool"

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=self.workers, mp_context=multiprocessing.get_context("spawn")
        )

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        try:
            return self._pool.submit(fn, *args)
        except BrokenProcessPool:
            # A job's process died (killed, out of memory): the pool is unusable, start anew.
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = self._new_pool()
            return self._pool.submit(fn, *args)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class DaskExecutor:
    """Jobs as tasks on a Dask distributed cluster (``TRIPLETLAB_DASK_SCHEDULER``)."""

    name = "dask"

    def __init__(self, address: str) -> None:
        from distributed import Client

        self.client = Client(address, set_as_default=False)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        # pure=False: the same job submitted twice (a retry) must run again.
        return self.client.submit(fn, *args, pure=False)

    def shutdown(self) -> None:
        self.client.close()


def make_executor(workers: int, dask_scheduler: str = "") -> Executor:
    if dask_scheduler:
        return DaskExecutor(dask_scheduler)
    return ProcessExecutor(workers)
