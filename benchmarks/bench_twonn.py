"""TwoNN intrinsic dimension: ``isotropy.measures.twonn.twonn`` vs ``skdim.id.TwoNN``, same process.

Run: ``python benchmarks/bench_twonn.py [--quick] [--large] [--dims D ...]`` (prints a markdown
table; a few minutes on 2 cores; ``--quick``: smaller clouds and one run of each, under a
minute; ``--dims 768``: only the clouds of that dimension).

Data: 20,000 x 384 and 4,096 x 768 float32 (``--quick``: smaller), a 10-dimensional Gaussian
embedded by a random linear map plus isotropic noise of standard deviation 0.01 (seeded), each
also with one row multiplied by 1000 (a point far out, as a token of massive activations).
Both estimators run with their defaults (``discard_fraction=0.1``, linear fit). Times are
medians of 3 runs; the runs of the two estimators alternate, so that load from other
processes affects both alike (one untimed warm-up run of ``twonn`` first).
With ``--large`` a last row times ``twonn`` alone on 50,000 x 384 and reports the peak resident
memory of the process (that case runs first, so the peak is that of ``twonn`` and its data),
to show that the blockwise nearest-neighbour search fits in memory (about 20 s more on an idle
2-core machine).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import median_time  # noqa: E402

from isotropy.measures.twonn import twonn  # noqa: E402

try:
    import skdim
except ImportError:  # pragma: no cover - optional reference
    skdim = None


def make_data(n: int, d: int = 384, k: int = 10, noise: float = 0.01, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, k)) @ rng.standard_normal((k, d))
    return (x + noise * rng.standard_normal((n, d))).astype(np.float32)


def reference(x: np.ndarray) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(skdim.id.TwoNN().fit(x).dimension_)


def _timed(fn: Callable[[], float]) -> tuple[float, float]:
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


CASES = [  # (points, dim, one row of large norm)
    (20_000, 384, False),
    (4_096, 768, False),
    (20_000, 384, True),
    (4_096, 768, True),
]
QUICK_CASES = [(5_000, 384, False), (2_048, 768, False), (5_000, 384, True)]


def compare(n: int, d: int, large_row: bool, runs: int) -> tuple[str, ...]:
    """One row of the table: both estimators on the same data, alternating, medians."""
    x = make_data(n, d)
    label = f"{n} x {d} float32, ID ~ 10"
    if large_row:
        x[0] *= 1000.0  # one point far out (a token with a massive activation)
        label += ", one row x 1000"
    twonn(x)  # warm-up
    ours_times, ref_times = [], []
    for _ in range(runs):
        ours, t = _timed(lambda: float(twonn(x)))
        ours_times.append(t)
        if skdim is not None:
            theirs, t = _timed(lambda: reference(x))
            ref_times.append(t)
    t_ours = statistics.median(ours_times)
    if skdim is None:  # pragma: no cover
        return (label, f"{ours:.10f}", "-", "-", f"{t_ours:.2f}", "-", "-")
    t_ref = statistics.median(ref_times)
    ratio = t_ref / t_ours
    speed = f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"
    return (label, f"{ours:.10f}", f"{theirs:.10f}",
            f"{abs(ours - theirs) / abs(theirs):.1e}", f"{t_ours:.2f}", f"{t_ref:.2f}", speed)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller clouds, one run of each")
    ap.add_argument("--large", action="store_true", help="also time twonn on 50,000 x 384")
    ap.add_argument("--dims", type=int, nargs="+", metavar="D",
                    help="only the clouds of these dimensions (e.g. --dims 768)")
    args = ap.parse_args(argv)
    cases, runs = (QUICK_CASES, 1) if args.quick else (CASES, 3)
    if args.dims:
        cases = [case for case in cases if case[1] in args.dims]
        if not cases:
            ap.error(f"no cloud of dimension {args.dims}; the clouds' dimensions: "
                     f"{sorted({case[1] for case in CASES})}")
    large: list[tuple[str, ...]] = []
    if args.large:
        bench_large(large)  # first, so that the peak memory is that of twonn alone
    rows = [compare(n, d, far, runs) for n, d, far in cases]

    flags = [f for f, on in (("--quick", args.quick), ("--large", args.large)) if on]
    if args.dims:
        flags += ["--dims", *map(str, args.dims)]
    command = " ".join(["python benchmarks/bench_twonn.py", *flags])
    print(
        f"command: {command}  (torch {torch.__version__}, "
        f"torch.get_num_threads() = {torch.get_num_threads()}"
        + (f", scikit-dimension {skdim.__version__})" if skdim is not None else ")")
    )
    print()
    print("| data | twonn | skdim TwoNN | rel. difference | twonn (s) | skdim (s) | speed |")
    print("|---|---|---|---|---|---|---|")
    for row in rows + large:
        print("| " + " | ".join(row) + " |")


def bench_large(rows: list[tuple[str, ...]]) -> None:
    big = make_data(50_000, seed=1)
    estimate: list[float] = []
    t_big = median_time(lambda: estimate.append(float(twonn(big))), repeat=1, warmup=0)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows.append(
        (
            f"50000 x 384 float32 (twonn only; peak RSS of the process {peak_mib:.0f} MiB)",
            f"{estimate[0]:.10f}",
            "-",
            "-",
            f"{t_big:.2f}",
            "-",
            "-",
        )
    )


if __name__ == "__main__":
    main()
