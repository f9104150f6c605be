"""``isotropy sweep``: a grid or list of ``isotropy train`` runs, resumable, on local worker
processes or on Ray.

Every point is an ``isotropy train`` run in its own run directory under the output root, named
from its settings. Finished points are skipped, interrupted ones resumed from their last
checkpoint, failed ones reported with their error (and retried with ``--retry-failed``).
The spec format is described in docs/sweeps.md.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from isotropy.cli._common import OneLineParser, one_line, positive_int

__all__ = ["build_parser", "main"]

_EPILOG = """\
presets (the papers' grids; task and model are base settings, e.g. --set task=mrpc):
  istar-grid    base, CosReg lambda in {1,-1}, I-STAR lambda in {-5,-3,-1,0.5,1,3,5} x
                zeta in {0.2,0.4,0.6,0.8} and lambda=-1 x zeta in {0,1}; seeds 1-5
                (165 runs per task and model)
  istar-tuning  no regularizer, batch {8,16,32} x epochs {3,4,5} x lr {1e-5,3e-5,5e-5};
                seeds 1-5 (135 runs per task and model)
  entropy-grid  base, persistent entropy with and without feature selection; seeds 1-5

examples:
  isotropy sweep examples/sweep_istar_rte.yaml --dry-run
  isotropy sweep examples/sweep_istar_rte.yaml --workers 2
  isotropy sweep --preset istar-grid --set task=mrpc --set model=bert-base-uncased \\
      --output-root runs/istar-mrpc --dry-run
  isotropy sweep spec.yaml --grid learning_rate=1e-5,3e-5 --seeds 1 2 3
  isotropy sweep spec.yaml --engine ray --ray-address ray://head:10001
  isotropy sweep spec.yaml --retry-failed
  isotropy sweep spec.yaml --workers 4 --max-failures 2   # two failures: start no more

exit status: 0 every point done (or --dry-run / --show-spec), 1 a point failed,
2 bad input (nothing was run), 130 interrupted (running points are resumed next time),
138 stopped by SIGUSR1 (each running point first wrote a checkpoint at its step in
progress; the same command resumes them from it).
"""


class _Parser(OneLineParser):
    """Errors are one line, ``isotropy sweep: error: ...``, exit status 2."""

    error_prefix = "isotropy sweep"


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected SETTING=VALUE, got {text!r}")
    return key.strip(), value


def build_parser() -> argparse.ArgumentParser:
    """The ``isotropy sweep`` argument parser."""
    from isotropy.sweeps.driver import ENGINES
    from isotropy.sweeps.presets import SWEEP_PRESETS
    from isotropy.sweeps.spec import ORDERS

    p = _Parser(prog="isotropy sweep", description=__doc__, epilog=_EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("spec", nargs="?", metavar="SPEC",
                   help="sweep file (YAML, TOML or JSON): output_root, base, grid, methods, "
                        "points, seeds, order")
    p.add_argument("--preset", choices=list(SWEEP_PRESETS), help="a preset grid instead of SPEC")
    p.add_argument("--output-root", metavar="DIR",
                   help="where the run directories go (overrides output_root)")
    p.add_argument("--set", dest="set_values", action="append", type=_key_value, default=[],
                   metavar="SETTING=VALUE",
                   help="a base setting (any isotropy train setting; replaces a grid axis of "
                        "the same setting); repeatable")
    p.add_argument("--grid", dest="grid_values", action="append", type=_key_value, default=[],
                   metavar="SETTING=V1,V2,...",
                   help="a grid axis (replaces the spec's axis of that setting); repeatable")
    p.add_argument("--seeds", nargs="+", type=int, metavar="S", help="seeds (overrides seeds)")
    p.add_argument("--order", choices=ORDERS,
                   help="seed-major: one seed of every cell before the next seed (default); "
                        "cell-major: every seed of a cell before the next cell")
    p.add_argument("--engine", choices=ENGINES, default="local",
                   help="local worker processes (default) or Ray tasks")
    p.add_argument("--workers", type=positive_int, metavar="N",
                   help="points run at once (local default: the number of GPUs, else 1; each "
                        "local worker gets one GPU or cpus/N threads)")
    p.add_argument("--workers-per-gpu", type=positive_int, metavar="N",
                   help="local engine: let up to N workers share a GPU (default 1: one GPU "
                        "per worker); for runs too small to fill a GPU")
    p.add_argument("--ray-address", metavar="ADDRESS",
                   help="an existing Ray cluster (e.g. ray://head:10001 or auto); default: "
                        "start a local instance")
    p.add_argument("--ray-num-cpus", type=positive_int, metavar="N",
                   help="CPUs of the local Ray instance (default: this machine's)")
    p.add_argument("--cpus-per-trial", type=positive_int, metavar="N",
                   help="CPUs (threads) per Ray trial (default: the cluster's CPUs / --workers)")
    p.add_argument("--retry-failed", action="store_true",
                   help="run the failed points again (resumed from their last checkpoint)")
    p.add_argument("--max-failures", type=positive_int, metavar="N",
                   help="start no further point once N points have failed in this run of the "
                        "sweep (the running ones finish; the same command runs the rest)")
    p.add_argument("--exclude", nargs="+", default=[], metavar="RUN",
                   help="run directory names to leave out of this sweep, e.g. runs finished "
                        "elsewhere (added to the spec's exclude:; docs/sweeps.md)")
    p.add_argument("--dry-run", action="store_true",
                   help="list the points, their run directories and what is done; run nothing")
    p.add_argument("--show-spec", action="store_true",
                   help="print the spec (after --preset, --set, --grid ...) as YAML and exit")
    return p


def _value(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _grid_values(text: str) -> list[Any]:
    import yaml

    try:
        values = yaml.safe_load(f"[{text}]")
    except yaml.YAMLError:
        values = [v.strip() for v in text.split(",")]
    return values if isinstance(values, list) else [values]


def _load(args: argparse.Namespace) -> Any:
    from isotropy.sweeps.presets import SWEEP_PRESETS, override, preset_spec
    from isotropy.sweeps.spec import load_spec

    if args.spec and args.preset:
        raise ValueError("give a sweep file or --preset, not both")
    if not args.spec and not args.preset:
        raise ValueError("give a sweep file (isotropy sweep SPEC) or --preset "
                         f"({', '.join(SWEEP_PRESETS)})")
    spec = load_spec(args.spec) if args.spec else preset_spec(args.preset)
    base = {k: _value(v) for k, v in args.set_values}
    grid = {k: _grid_values(v) for k, v in args.grid_values}
    return override(spec, base=base, grid=grid, seeds=args.seeds, output_root=args.output_root,
                    order=args.order, exclude=args.exclude)


def _print_plan(steps: Sequence[Any], root: Any) -> None:
    counts: dict[str, int] = {}
    for _, state, _, _ in steps:
        counts[state] = counts.get(state, 0) + 1
    cells = len({p.cell for p, *_ in steps})
    seeds = len({p.seed for p, *_ in steps})
    print(f"{len(steps)} point(s) ({cells} cell(s), {seeds} seed(s)) in {root}: "
          + ", ".join(f"{counts.get(s, 0)} {s}" for s in ("done", "failed", "interrupted",
                                                           "pending"))
          + (f", {counts['running']} running" if counts.get("running") else ""))
    width = len(str(len(steps)))
    for p, state, detail, action in steps:
        note = f" [{detail}]" if detail else ""
        if state == "failed" and action == "skip":
            note += " (not retried without --retry-failed)"
        print(f"{p.index + 1:>{width}}  {state:<11} {p.name}{note}")


@contextlib.contextmanager
def _interrupt_on_signals() -> Iterator[None]:
    """SIGTERM (``kill``), and SIGINT even where the shell started the sweep with SIGINT
    ignored (a background job, ``nohup isotropy sweep ... &``), stop the sweep as Ctrl-C does:
    the running points are stopped and recorded as interrupted, and the same command resumes
    them. Further signals are ignored while that stop runs (it ends on its own: SIGKILL after
    a grace period). SIGUSR1 stops the sweep once each running point has written a checkpoint
    at its optimizer step in progress (local engine: :class:`~isotropy.sweeps.local_engine.
    StopAfterCheckpoints`; Ray stops its points as on Ctrl-C); SIGINT or SIGTERM during that
    wait stops them at once. The previous handlers are back on exit. Only from the main thread
    (where Python delivers signals)."""
    import signal
    import threading

    from isotropy.sweeps.local_engine import StopAfterCheckpoints

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = (signal.SIGINT, signal.SIGTERM)

    def interrupt(signum: int, frame: object) -> None:
        for sig in signals:  # one stop: a second signal must not cut its cleanup short
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    def after_checkpoints(signum: int, frame: object) -> None:
        signal.signal(signum, signal.SIG_IGN)  # one request
        raise StopAfterCheckpoints(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, interrupt) for sig in signals}
    if hasattr(signal, "SIGUSR1"):
        previous[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, after_checkpoints)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``isotropy sweep``; returns the exit status (see the epilog)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    from isotropy.io import output_dir_problem
    from isotropy.sweeps.driver import make_engine, plan, run_sweep
    from isotropy.sweeps.local_engine import LocalEngine, StopAfterCheckpoints
    from isotropy.sweeps.lock import sweep_in_progress
    from isotropy.sweeps.points import check_finished_runs, check_inputs, expand
    from isotropy.sweeps.state import SweepStatus, check_sweep_root

    try:
        spec = _load(args)
        if args.show_spec:
            import yaml

            print(yaml.safe_dump(spec.to_dict(), sort_keys=False), end="")
            return 0
        engine = make_engine(args.engine, workers=args.workers, ray_address=args.ray_address,
                             ray_num_cpus=args.ray_num_cpus, cpus_per_trial=args.cpus_per_trial,
                             workers_per_gpu=args.workers_per_gpu)
        points = expand(spec)
        root = points[0].run_dir.parent
        problem = output_dir_problem(root)
        if problem is not None:
            raise ValueError(f"output root {root}: {problem}")
        check_sweep_root(root)
        check_inputs(points)
        check_finished_runs(points)
        if args.dry_run:
            status = SweepStatus(root)
            status.live = sweep_in_progress(root)
            if status.live:
                print(f"a sweep is running in {root} now (this dry run changes nothing)")
            _print_plan(plan(points, status, retry_failed=args.retry_failed), root)
            return 0
    except (ValueError, FileNotFoundError) as err:
        parser.error(str(err))
    try:
        with _interrupt_on_signals():
            outcome = run_sweep(spec, points, engine, retry_failed=args.retry_failed,
                                max_failures=args.max_failures)
    except ValueError as err:  # another sweep holds the lock, Ray could not start...
        print(f"isotropy sweep: error: {one_line(err)}", file=sys.stderr)
        return 2
    except StopAfterCheckpoints:
        import signal

        how = ("each running point wrote a checkpoint at its step in progress"
               if isinstance(engine, LocalEngine) else "the running points were stopped")
        print(f"isotropy sweep: stopped (SIGUSR1): {how}; run the same command to resume",
              file=sys.stderr)
        return 128 + signal.SIGUSR1
    except KeyboardInterrupt:
        print("isotropy sweep: interrupted; run the same command to resume", file=sys.stderr)
        return 130
    return 1 if outcome.failed or outcome.count("done") < len(points) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
