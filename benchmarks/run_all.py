"""Run every benchmark script in this folder, one after the other, and print their tables.

Usage::

    python benchmarks/run_all.py            # the sizes reported in docs/benchmarks.md
    python benchmarks/run_all.py --quick    # small sizes, few repeats: a few minutes on 2 cores
    python benchmarks/run_all.py --only twonn topology

Each script runs in its own process (so that one's memory and threads do not affect the next),
with ``src/`` of this checkout first on ``PYTHONPATH`` so that the code measured is the code
beside the scripts. Output is passed through as it comes; a summary of wall times and exit
codes ends the run, and the exit code is non-zero if any script failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"


@dataclass(frozen=True)
class Benchmark:
    """One script and the arguments of its full and quick runs."""

    name: str
    script: str
    full: tuple[str, ...] = ()
    quick: tuple[str, ...] = ("--quick",)


BENCHMARKS = (
    Benchmark("isoscore", "bench_isoscore.py"),
    Benchmark("twonn", "bench_twonn.py", full=("--large",)),
    Benchmark("topology", "bench_topology.py"),
    Benchmark("training_step", "bench_training_step.py"),
    Benchmark("bf16_cpu", "bench_bf16_cpu.py", quick=("--repeats", "1")),
    Benchmark("train_throughput", "bench_train_throughput.py"),
    Benchmark("entropy_accumulation", "bench_entropy_accumulation.py"),
    Benchmark("monitor", "bench_monitor.py"),
)


def command(bench: Benchmark, quick: bool) -> list[str]:
    """The command line that runs ``bench`` with this interpreter."""
    script = f"{HERE.name}/{bench.script}"  # relative to the repository root, the working dir
    return [sys.executable, script, *(bench.quick if quick else bench.full)]


def child_env() -> dict[str, str]:
    """The environment with this checkout's ``src`` first on ``PYTHONPATH``, offline hub."""
    path = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1"}


def select(names: list[str] | None) -> list[Benchmark]:
    """The benchmarks named (all when ``names`` is empty), with a clear error for unknown ones."""
    if not names:
        return list(BENCHMARKS)
    known = {b.name: b for b in BENCHMARKS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {unknown}; choose from {sorted(known)}")
    return [known[n] for n in names]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes and few repeats")
    ap.add_argument("--only", nargs="+", metavar="NAME",
                    help=f"run only these ({', '.join(b.name for b in BENCHMARKS)})")
    args = ap.parse_args(argv)
    env = child_env()
    results: list[tuple[Benchmark, int, float]] = []
    for bench in select(args.only):
        cmd = command(bench, args.quick)
        shown = " ".join(["python", *cmd[1:]])
        print(f"\n## {bench.name}: {shown}\n", flush=True)
        start = time.perf_counter()
        rc = subprocess.run(cmd, env=env, cwd=HERE.parent).returncode
        results.append((bench, rc, time.perf_counter() - start))
    print("\n## summary\n")
    print("| benchmark | wall time (s) | exit code |")
    print("|---|---|---|")
    for bench, rc, seconds in results:
        print(f"| {bench.name} | {seconds:.0f} | {rc} |")
    failed = [bench.name for bench, rc, _ in results if rc != 0]
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
