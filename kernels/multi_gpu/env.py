"""Where the multi-GPU processes run: the multicast-off environment and the launcher of N ranks.

NVLink multicast (NVLS) stays off in every process, set before ``torch.distributed`` is
initialised: NCCL's NVLS all-reduce, PyTorch's symmetric-memory multimem operations and
NVSHMEM's NVLS teams all create multicast objects (``cuMulticastCreate``), and on a host whose
GPUs others share a program that uses them can put those GPUs out of service. Nothing in this
package calls the multicast API; these three variables keep the libraries from doing it for us:

======================================  =====  ================================================
``NCCL_NVLS_ENABLE``                    ``0``  NCCL: no NVLink SHARP (multicast) algorithms
``TORCH_SYMM_MEM_DISABLE_MULTICAST``    ``1``  PyTorch symmetric memory: no multicast objects
``NVSHMEM_DISABLE_NVLS``                ``1``  NVSHMEM: no NVLS
======================================  =====  ================================================

:func:`launch` starts ``world_size`` processes with :mod:`torch.multiprocessing`; each sets the
variables again (a child may have been started with its own environment), joins one process
group (NCCL with one GPU per rank, gloo on the CPU) through a file store in a fresh temporary
directory (no TCP port to pick, so no two runs can clash), runs the given function and hands
its result back to the parent through a file. ``"spawn"`` is the default start method (CUDA
does not survive a fork); the CPU tests fork, which spares each rank the seconds of importing
torch again.

Nothing waits forever. Every collective gives up after ``timeout`` (the process group's
timeout: gloo's per-operation limit, NCCL's watchdog), which ends the rank with an error, and
the parent gives up on the whole run after ``deadline_s``, killing the ranks still alive: a
rank that never reaches a collective (or a collective the library does not time out) fails
the launch with :class:`LaunchTimeout` instead of hanging it.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, MutableMapping
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

__all__ = ["MULTICAST_OFF", "set_multicast_off", "multicast_off_problems", "multicast_env_text", "rank_multicast_env",
           "launch", "LaunchTimeout", "MAX_WORLD_SIZE", "START_METHODS", "GROUP_TIMEOUT", "RUN_DEADLINE_S"]

MULTICAST_OFF: dict[str, str] = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
MAX_WORLD_SIZE = 8  # one HGX node: the most GPUs one host of this project's runs holds
START_METHODS = ("spawn", "fork", "forkserver")
# How long a rank waits for the others at one collective before giving up: long enough for a
# cold Triton compile on every rank (the others wait for it at the next collective).
GROUP_TIMEOUT = timedelta(minutes=10)
# How long a whole launch may take: a full GPU run is minutes (docs/kernels/MULTI_GPU.md).
RUN_DEADLINE_S = 3600.0
_STOP_GRACE_S = 5.0  # between SIGTERM and SIGKILL of a rank that outlived the deadline


def set_multicast_off(environ: MutableMapping[str, str] | None = None) -> None:
    """Write :data:`MULTICAST_OFF` into ``environ`` (default ``os.environ``), overriding any other
    value: a run on shared GPUs never enables multicast, whatever the caller's shell said."""
    target = os.environ if environ is None else environ
    target.update(MULTICAST_OFF)


def multicast_off_problems(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """The variables of :data:`MULTICAST_OFF` that ``environ`` lacks or sets otherwise, as
    ``NAME=value`` lines (empty when all three are as required)."""
    source = os.environ if environ is None else environ
    return [f"{name}={source.get(name, '<unset>')} (needs {value})"
            for name, value in MULTICAST_OFF.items() if source.get(name) != value]


def multicast_env_text(environ: MutableMapping[str, str] | None = None) -> str:
    """The three variables as this process sees them, ``NAME=value`` separated by spaces (for
    the results file's provenance)."""
    source = os.environ if environ is None else environ
    return " ".join(f"{name}={source.get(name, '<unset>')}" for name in MULTICAST_OFF)


def rank_multicast_env(rank: int, world_size: int) -> str:
    """:func:`multicast_env_text` as a :func:`launch` target: what rank ``rank`` runs with."""
    return multicast_env_text()


class LaunchTimeout(TimeoutError):
    """A launch whose ranks did not all finish by its deadline (they were killed)."""


def _check_launch(world_size: object, backend: object, start_method: object, timeout: object,
                  deadline_s: object) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or not 1 <= world_size <= MAX_WORLD_SIZE:
        raise ValueError(f"world_size must be a whole number from 1 to {MAX_WORLD_SIZE}, got {world_size!r:.40}")
    if backend not in ("nccl", "gloo"):
        raise ValueError(f"backend must be 'nccl' or 'gloo', got {backend!r:.40}")
    if start_method not in START_METHODS:
        raise ValueError(f"start_method must be one of {', '.join(START_METHODS)}, got {start_method!r:.40}")
    if not isinstance(timeout, timedelta) or timeout <= timedelta(0):
        raise ValueError(f"timeout must be a positive timedelta, got {timeout!r:.40}")
    if isinstance(deadline_s, bool) or not isinstance(deadline_s, (int, float)) or not deadline_s > 0:
        raise ValueError(f"deadline_s must be a positive number of seconds, got {deadline_s!r:.40}")
    if backend == "nccl" and start_method == "fork":
        raise ValueError("start_method='fork' cannot run NCCL ranks: CUDA does not survive a fork")
    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise ValueError(f"world_size={world_size} NCCL ranks need as many GPUs; "
                         f"{torch.cuda.device_count()} are visible")


def _rank_main(rank: int, fn: Callable[..., object], world_size: int, backend: str, store: str,
               out_dir: str, timeout: timedelta, args: tuple) -> None:
    """One rank: multicast off, join the group, run ``fn(rank, world_size, *args)``, save its result."""
    set_multicast_off()
    device_id = None
    if backend == "nccl":
        device_id = torch.device("cuda", rank)  # one GPU per rank, by rank, before NCCL picks one itself
        torch.cuda.set_device(device_id)
    else:
        torch.set_num_threads(1)  # the ranks share the CPU: one thread each keeps them from thrashing
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world_size,
                            timeout=timeout, device_id=device_id)
    try:
        result = fn(rank, world_size, *args)
        dist.barrier()  # no rank tears the group down while another still sends
    finally:
        dist.destroy_process_group()
    torch.save(result, Path(out_dir) / f"rank{rank}.pt")


def _stop(processes: list) -> list[int]:
    """Terminate, then kill, the ranks still alive; their ranks."""
    alive = [rank for rank, p in enumerate(processes) if p.is_alive()]
    for rank in alive:
        processes[rank].terminate()
    end = time.monotonic() + _STOP_GRACE_S
    for rank in alive:
        processes[rank].join(max(0.0, end - time.monotonic()))
        if processes[rank].is_alive():
            processes[rank].kill()
            processes[rank].join()
    return alive


def _join(context: mp.ProcessContext, deadline_s: float) -> None:
    """Wait for every rank until ``deadline_s`` from now; a failed rank raises (torch stops the
    others), a late one raises :class:`LaunchTimeout` after the survivors are stopped."""
    end = time.monotonic() + deadline_s
    try:
        while not context.join(timeout=max(0.0, end - time.monotonic())):
            if time.monotonic() >= end:
                late = _stop(context.processes)
                raise LaunchTimeout(f"ranks {late} of {len(context.processes)} had not finished after "
                                    f"{deadline_s:g} s; stopped")
    finally:
        _stop(context.processes)  # an interrupt or a raise above leaves no rank behind
        for name in context.error_files:  # a failed rank's traceback, already read into the raise
            Path(name).unlink(missing_ok=True)


def launch(fn: Callable[..., object], world_size: int, *args: object, backend: str = "gloo",
           start_method: str = "spawn", timeout: timedelta = GROUP_TIMEOUT,
           deadline_s: float = RUN_DEADLINE_S) -> list[object]:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` processes of one process group and
    return their results, by rank.

    Parameters
    ----------
    fn : a module-level function (spawned children import it by name); its result must be
        picklable (tensors are moved to the CPU by the caller's ``fn`` if it wants them back).
    world_size : ranks, 1 to :data:`MAX_WORLD_SIZE`; with NCCL, one GPU each (rank ``r`` on ``cuda:r``).
    backend : ``"nccl"`` (GPUs) or ``"gloo"`` (CPU).
    start_method : ``"spawn"`` (default; required with CUDA), ``"fork"`` or ``"forkserver"``.
    timeout : how long one collective (and the group's rendezvous) may wait for the other ranks.
    deadline_s : how long the whole launch may take, seconds.

    Raises
    ------
    ValueError
        For a world size, backend, start method or time limit out of range (before anything starts).
    torch.multiprocessing.ProcessRaisedException
        When a rank raises (a collective that timed out among them); the message carries that
        rank's traceback. The other ranks are stopped.
    LaunchTimeout
        When some rank has not finished by ``deadline_s``; every rank is stopped.
    """
    _check_launch(world_size, backend, start_method, timeout, deadline_s)
    set_multicast_off()  # the children inherit it; each sets it again before joining the group
    with tempfile.TemporaryDirectory(prefix="kvx-multi-gpu-") as out_dir:
        store = str(Path(out_dir) / "store")  # the group's rendezvous: one file, new for each launch
        context = mp.start_processes(_rank_main, args=(fn, world_size, backend, store, out_dir, timeout, args),
                                     nprocs=world_size, join=False, start_method=start_method)
        _join(context, deadline_s)
        return [torch.load(Path(out_dir) / f"rank{r}.pt", weights_only=False) for r in range(world_size)]
