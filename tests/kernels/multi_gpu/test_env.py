"""The launcher of N ranks: multicast off in every rank (spawned or forked), arguments refused
before anything starts, and no hang: a collective that waits too long ends its rank with an
error, and a rank that never finishes is stopped at the run's deadline."""

from __future__ import annotations

import operator
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from torch.multiprocessing import ProcessRaisedException

from kernels.multi_gpu import env

pytestmark = pytest.mark.timeout(60)
OFF_LINE = "NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"


def test_multicast_off_overrides_the_callers_value():
    environ = {"NCCL_NVLS_ENABLE": "1"}
    assert len(env.multicast_off_problems(environ)) == 3
    env.set_multicast_off(environ)
    assert environ == env.MULTICAST_OFF and env.multicast_off_problems(environ) == []
    assert env.multicast_env_text(environ) == OFF_LINE


# A spawned rank imports torch afresh (~2 s of CPU), so the spawn case runs one.
@pytest.mark.parametrize("start_method,ranks", [pytest.param("spawn", 1, marks=pytest.mark.slow), ("fork", 2)])
def test_every_rank_runs_with_multicast_off_whatever_the_parent_set(monkeypatch, start_method, ranks):
    # The caller's shell asks for NVLS; every rank, a fresh interpreter (spawn, as the GPU run
    # starts them) or a copy of this one (fork), still runs with all three variables off.
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    monkeypatch.delenv("NVSHMEM_DISABLE_NVLS", raising=False)
    seen = env.launch(env.rank_multicast_env, ranks, start_method=start_method, timeout=timedelta(seconds=20),
                      deadline_s=45.0)
    assert seen == [OFF_LINE] * ranks


def test_results_come_back_by_rank():
    # operator.add(rank, world_size): 0 + 2 and 1 + 2.
    assert env.launch(operator.add, 2, start_method="fork", timeout=timedelta(seconds=20)) == [2, 3]


@pytest.mark.parametrize("kwargs,message", [
    (dict(world_size=9), "world_size must be a whole number from 1 to 8"),
    (dict(world_size=True), "world_size must be a whole number"),
    (dict(world_size=2, backend="mpi"), "backend must be"),
    (dict(world_size=2, start_method="thread"), "start_method must be one of"),
    (dict(world_size=2, backend="nccl", start_method="fork"), "CUDA does not survive a fork"),
    (dict(world_size=2, timeout=5), "timeout must be a positive timedelta"),
    (dict(world_size=2, timeout=timedelta(0)), "timeout must be a positive timedelta"),
    (dict(world_size=2, deadline_s=0), "deadline_s must be a positive number"),
])
def test_bad_launches_are_refused_before_anything_starts(kwargs, message):
    with pytest.raises(ValueError, match=message):
        env.launch(print, **kwargs)


def test_nccl_ranks_need_as_many_gpus():
    ranks = torch.cuda.device_count() + 1  # one more than this machine has
    message = "NCCL ranks need as many GPUs" if ranks <= env.MAX_WORLD_SIZE else "world_size must be"
    with pytest.raises(ValueError, match=message):
        env.launch(print, ranks, backend="nccl")


def _recv_that_never_comes(rank: int, world_size: int) -> None:
    """Rank 0 waits for a message rank 1 never sends; rank 1 is busy elsewhere (in no collective
    of its own that could time out first) until it is stopped."""
    if rank == 0:
        dist.recv(torch.empty(1), src=1)
    else:
        time.sleep(20)


def test_a_collective_that_waits_too_long_fails_the_launch():
    begin = time.monotonic()
    with pytest.raises(ProcessRaisedException, match="Process 0 terminated(.|\n)*Timed out waiting 1000ms for recv"):
        env.launch(_recv_that_never_comes, 2, start_method="fork", timeout=timedelta(seconds=1), deadline_s=30.0)
    # The group's 1 s timeout ended it (and rank 1 was stopped), not the 30 s deadline.
    assert time.monotonic() - begin < 15


def _rank_one_sleeps(rank: int, world_size: int) -> None:
    if rank == 1:
        time.sleep(120)


def test_a_rank_that_never_finishes_is_stopped_at_the_deadline():
    begin = time.monotonic()
    with pytest.raises(env.LaunchTimeout, match=r"ranks \[0, 1\] of 2 had not finished after 1 s"):
        env.launch(_rank_one_sleeps, 2, start_method="fork", timeout=timedelta(seconds=30), deadline_s=1.0)
    assert time.monotonic() - begin < 10
