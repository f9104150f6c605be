"""Closed-form IsoScore / IsoScore* against the authors' ``IsoScore`` 2.0.1 package.

Run: ``python benchmarks/bench_isoscore.py [--quick]`` (prints a markdown table; under a
minute on 2 cores). ``--quick`` times fewer rounds (3 instead of 11 and 9) on the same sizes.

a. IsoScore of a given 768 x 768 covariance: ``isoscore_from_covariance`` vs
   ``IsoScore.IsoScore_cov`` (singular values).
b. IsoScore* forward + backward on a 4096 x 768 float32 batch with a given shrinkage matrix
   (zeta = 0.2): ``isoscore_star`` vs ``istar().IsoScore_star(..., is_eval=False)`` (autograd
   through ``svdvals``), and vs the floor every exact method pays: one ``Xc^T Xc`` product
   forward and one ``Xc @ Sigma`` product backward.

The functions of one comparison are timed in turns (round after round), so that they share
whatever load the machine has; each reported time is a median over the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import median_time  # noqa: E402

from isotropy import isoscore_from_covariance, isoscore_star  # noqa: E402

try:
    from IsoScore import IsoScore as ref
except ImportError:  # pragma: no cover - optional reference
    ref = None

Row = tuple[str, str, str, str, str]


def interleaved(fns: dict[str, tuple[Callable[[], object], int]], rounds: int) -> dict[str, float]:
    """Median seconds per call of each ``(fn, calls_per_round)``, timed in turns."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn, _ in fns.values():
        fn()  # warm-up
    for _ in range(rounds):
        for k, (fn, calls) in fns.items():
            times[k].append(median_time(fn, repeat=calls, warmup=0))
    return {k: statistics.median(v) for k, v in times.items()}


def _random_cov(d: int, rank: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    a = torch.randn(d, rank, generator=gen, dtype=torch.float64)
    a = a * torch.linspace(3.0, 0.1, rank, dtype=torch.float64)
    c = a @ a.T / rank
    return ((c + c.T) / 2).to(dtype)


def bench_covariance(d: int = 768, rounds: int = 11) -> list[Row]:
    rows: list[Row] = []
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float64, torch.float32):
        cov = _random_cov(d, 2 * d, dtype, gen)
        name = str(dtype).replace("torch.", "")
        fns = {"ours": (lambda c=cov: isoscore_from_covariance(c), 11)}
        if ref is not None:
            fns["ref"] = (lambda c=cov: ref.IsoScore_cov(c), 1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # IsoScore_cov calls torch.tensor on a tensor
            t = interleaved(fns, rounds=rounds)
            ours = float(isoscore_from_covariance(cov))
            theirs = float(ref.IsoScore_cov(cov)) if ref is not None else float("nan")
        case = f"(a) isoscore_from_covariance, {d}x{d} {name}, vs IsoScore_cov (svdvals)"
        ratio = f"{t['ref'] / t['ours']:.0f}x faster" if ref is not None else "-"
        other = f"{t['ref'] * 1e3:.1f}" if ref is not None else "-"
        rows.append((case, f"{t['ours'] * 1e3:.3f}", other, ratio, f"{abs(ours - theirs):.1e}"))
    return rows


def bench_star(n: int = 4096, d: int = 768, zeta: float = 0.2, rounds: int = 9) -> list[Row]:
    gen = torch.Generator().manual_seed(1)
    x0 = torch.randn(n, d, generator=gen) @ (torch.randn(d, d, generator=gen) / d**0.5)
    shrink = _random_cov(d, 4 * d, torch.float32, gen)

    def ours() -> float:
        x = x0.detach().requires_grad_(True)
        s = isoscore_star(x, zeta=zeta, shrinkage=shrink)
        s.backward()
        return float(s.detach())

    def floor() -> None:
        xc = x0 - x0.mean(0)
        sigma = xc.T @ xc
        _ = xc @ sigma

    def theirs() -> float:
        x = x0.detach().clone()
        s = ref.istar().IsoScore_star(x, shrink, zeta, is_eval=False)
        s.backward()
        return float(s.detach())

    fns = {"ours": (ours, 1), "floor": (floor, 1)}
    if ref is not None:
        fns["ref"] = (theirs, 1)
    t = interleaved(fns, rounds=rounds)
    label = f"(b) isoscore_star fwd+bwd, {n}x{d} fp32, zeta={zeta}, given Sigma_S,"
    rows: list[Row] = [(
        f"{label} vs floor (one Xc^T Xc + one Xc @ Sigma)",
        f"{t['ours'] * 1e3:.1f}",
        f"{t['floor'] * 1e3:.1f}",
        f"{t['ours'] / t['floor']:.2f}x the floor",
        "-",
    )]
    if ref is not None:
        rows.append((
            f"{label} vs istar().IsoScore_star(is_eval=False)",
            f"{t['ours'] * 1e3:.1f}",
            f"{t['ref'] * 1e3:.1f}",
            f"{t['ref'] / t['ours']:.1f}x faster",
            f"{abs(ours() - theirs()):.1e}",
        ))
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 timing rounds instead of 11 and 9")
    args = ap.parse_args(argv)
    if args.quick:
        rows = bench_covariance(rounds=3) + bench_star(rounds=3)
    else:
        rows = bench_covariance() + bench_star()
    command = "python benchmarks/bench_isoscore.py" + (" --quick" if args.quick else "")
    print(
        f"command: {command}  (torch {torch.__version__}, "
        f"torch.get_num_threads() = {torch.get_num_threads()})"
    )
    print()
    print("| case | ours (ms) | other (ms) | ratio | abs. difference of values |")
    print("|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
