"""The two-process harness reports each rank's own failure: its exception, a fatal signal
with the native message it printed, or a hang cut at the deadline."""

from __future__ import annotations

import os

import pytest
from _distributed import RanksFailed, require_gloo, run_on_ranks, step

pytestmark = pytest.mark.slow  # spawns ranks: Python processes that import torch


def _fail_differently(rank: int) -> None:
    import torch.distributed as dist

    # both ranks past the rendezvous first: a rank 0 that failed and tore down its group at once
    # could make rank 1's init_process_group fail instead of reaching its own failure
    dist.barrier()
    if rank == 0:
        raise ValueError("boom on rank 0")
    step("about to abort")
    os.write(2, b"native message before the abort\n")
    os.abort()


def _hang_on_rank_0(rank: int) -> int:
    if rank == 0:
        import time

        time.sleep(600)
    return rank


def test_each_rank_reports_its_own_failure(tmp_path):
    require_gloo()
    with pytest.raises(RanksFailed) as info:
        run_on_ranks(_fail_differently, world_size=2, out_dir=tmp_path)
    report = str(info.value)
    rank0, rank1 = report.split("--- rank 1:")
    assert "rank 0: exit code 1" in rank0
    assert "ValueError: boom on rank 0" in rank0
    assert rank1.startswith(" killed by SIGABRT; last step: about to abort")
    assert "native message before the abort" in rank1
    assert "Fatal Python error: Aborted" in rank1  # faulthandler's dump of the rank's stack


def test_a_hung_rank_is_killed_at_the_deadline(tmp_path):
    require_gloo()
    with pytest.raises(RanksFailed, match="timed out after 20 s") as info:
        run_on_ranks(_hang_on_rank_0, world_size=2, out_dir=tmp_path, timeout=20)
    assert "rank 0: still running at the deadline: killed" in str(info.value)
