"""H0 barcode + persistent entropy, forward and backward: ours vs the gudhi route.

The reference route builds the Vietoris--Rips simplex tree with gudhi up to triangles
(``max_dimension=2``), computes persistence, takes the 0-dimensional regular pairs from
``SimplexTree.flag_persistence_generators()`` (vertex, edge end points a, b), recomputes the edge
lengths ||x_a - x_b|| in torch, and differentiates the persistent entropy. Ours is
``persistent_entropy(h0_barcode(X))``. Both run in this process on the same data; the table
reports medians and the ratio. Usage::

    python benchmarks/bench_topology.py [--quick] [--budget SECONDS]

``--quick`` times fewer rounds, skips the gudhi ``max_dimension=2`` run at 1,024 points (a
subprocess that may use the whole ``--budget``) and times 4,096 points once.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

import numpy as np
import torch

from isotropy.measures.topology import h0_barcode, persistent_entropy

DIM = 768


def ours(X: torch.Tensor) -> float:
    x = X.detach().requires_grad_(True)
    h = persistent_entropy(h0_barcode(x))
    h.backward()
    return float(h.detach())


def gudhi_route(X: torch.Tensor, max_dimension: int = 2) -> float:
    import gudhi

    x = X.detach().requires_grad_(True)
    st = gudhi.RipsComplex(points=x.detach().double().numpy()).create_simplex_tree(
        max_dimension=max_dimension
    )
    st.compute_persistence()
    regular0 = st.flag_persistence_generators()[0]  # rows: (vertex, a, b)
    edges = torch.from_numpy(np.ascontiguousarray(regular0[:, 1:], dtype=np.int64))
    lengths = (x[edges[:, 0]] - x[edges[:, 1]]).norm(dim=1)
    p = lengths / lengths.sum()
    h = -(p * torch.log(p)).sum()
    h.backward()
    return float(h.detach())


def median_times(
    fns: list[Callable[[torch.Tensor], float]], X: torch.Tensor, reps: list[int], rounds: int
) -> list[float]:
    """Median seconds per call of each function, interleaved round by round so that every
    function sees the same machine load; ``reps[k]`` calls of ``fns[k]`` per round."""
    for fn in fns:
        fn(X)  # warm-up
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for fn, r, out in zip(fns, reps, times, strict=True):
            for _ in range(r):
                t0 = time.perf_counter()
                fn(X)
                out.append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def gudhi_dim2_in_subprocess(n: int, budget_s: float, mem_gb: float) -> str:
    """One run of the gudhi route on a separate process with a time and memory cap."""
    code = textwrap.dedent(
        f"""
        import resource, time, torch
        resource.setrlimit(resource.RLIMIT_AS, ({int(mem_gb * 2**30)}, {int(mem_gb * 2**30)}))
        from bench_topology import gudhi_route
        X = torch.randn({n}, {DIM}, generator=torch.Generator().manual_seed(0))
        t0 = time.perf_counter(); gudhi_route(X, 2); print(time.perf_counter() - t0)
        """
    )
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=path)
    try:
        res = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=budget_s,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return f"not finished within the {budget_s:.0f} s budget"
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["?"])[-1]
        return f"failed under a {mem_gb:.0f} GiB memory cap ({last[:60]})"
    return f"{float(res.stdout.strip()) * 1e3:.0f} ms (single run)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="fewer repetitions; no gudhi max_dimension=2 run at 1,024 points",
    )
    ap.add_argument("--budget", type=float, default=45.0, help="seconds for gudhi at 1,024 points")
    ap.add_argument("--mem-gb", type=float, default=4.0, help="memory cap for that run (GiB)")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: gudhi is single-threaded, and a shared machine makes "
        "multi-threaded timings of small problems erratic)",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rounds = 3 if args.quick else 10
    g = torch.Generator().manual_seed(0)
    rows = []

    X64 = torch.randn(64, DIM, generator=g)
    h_ours, h_ref = ours(X64), gudhi_route(X64)
    assert abs(h_ours - h_ref) < 1e-4 * abs(h_ref), (h_ours, h_ref)  # same barcode
    t_ours, t_ref = median_times([ours, gudhi_route], X64, [10, 2], rounds)
    rows.append(("64 x 768", f"{t_ours * 1e3:.2f} ms", f"{t_ref * 1e3:.1f} ms", t_ref / t_ours))

    X256 = torch.randn(256, DIM, generator=g)
    t_ours, t_ref = median_times([ours, gudhi_route], X256, [3, 1], 2 if args.quick else 3)
    rows.append(("256 x 768", f"{t_ours * 1e3:.1f} ms", f"{t_ref * 1e3:.0f} ms", t_ref / t_ours))

    X1k = torch.randn(1024, DIM, generator=g)
    assert abs(ours(X1k) - gudhi_route(X1k, 1)) < 1e-4
    t_ours, t_ref1 = median_times(
        [ours, lambda x: gudhi_route(x, 1)], X1k, [3, 1], 1 if args.quick else 3
    )
    rows.append(
        (
            "1,024 x 768",
            f"{t_ours * 1e3:.1f} ms",
            f"{t_ref1 * 1e3:.0f} ms (max_dimension=1)",
            t_ref1 / t_ours,
        )
    )
    if args.quick:
        outcome = "skipped (--quick)"
    else:
        outcome = gudhi_dim2_in_subprocess(1024, args.budget, args.mem_gb)
    triangles = math.comb(1024, 3)
    rows.append(("1,024 x 768", "", f"max_dimension=2 ({triangles:,} triangles): {outcome}", None))

    X4k = torch.randn(4096, DIM, generator=g)
    (t_ours,) = median_times([ours], X4k, [1], 1 if args.quick else 3)
    rows.append(("4,096 x 768", f"{t_ours * 1e3:.0f} ms", "not run", None))

    print(f"command: python {' '.join(sys.argv)}")
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}; fp32 input; "
        f"times are medians of forward + backward; load average {os.getloadavg()[0]:.1f}"
    )
    print()
    print(
        "| points x dim | ours: h0_barcode + persistent_entropy | gudhi RipsComplex route | "
        "ratio (gudhi / ours) |"
    )
    print("|---|---|---|---|")
    for size, a, b, ratio in rows:
        r = f"{ratio:.0f}x" if ratio is not None else ""
        print(f"| {size} | {a} | {b} | {r} |")


if __name__ == "__main__":
    main()
