"""Run a function on several local processes joined by ``gloo`` and collect what each returns.

``worker(rank, *args)`` runs on every rank inside an initialised process group (one CPU
thread per process); its return value is saved by the rank and loaded back in the parent.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def require_gloo() -> None:
    """Skip the calling test when ``torch.distributed`` with ``gloo`` is not available."""
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rank_main(
    rank: int,
    worker: Callable[..., Any],
    args: tuple,
    world_size: int,
    port: int,
    out_dir: str,
) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=60),
    )
    try:
        result = worker(rank, *args)
        torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def run_on_ranks(
    worker: Callable[..., Any],
    *args: Any,
    world_size: int,
    out_dir: Path,
    timeout: float | None = None,
) -> list[Any]:
    """Spawn ``world_size`` processes running ``worker(rank, *args)``; their results by rank.

    With ``timeout`` (seconds), processes still running after it are killed and the test fails.
    """
    ctx = mp.spawn(
        _rank_main,
        args=(worker, args, world_size, free_port(), str(out_dir)),
        nprocs=world_size,
        join=False,
    )
    deadline = None if timeout is None else time.monotonic() + timeout
    while not ctx.join(timeout=2):
        if deadline is not None and time.monotonic() > deadline:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
            pytest.fail(f"the {world_size}-process run timed out")
    out = Path(out_dir)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(world_size)]
