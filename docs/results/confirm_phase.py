"""Print the confirmatory step (``docs/results.md``, "Confirmatory plan (2026-11-28)") from its
committed runs, one phase at a time (this file: the CPU phase; never pooled with a GPU window's
runs, another model or another protocol).

The phase's two primary comparisons, named in its specs before any of their runs started:

- I-STAR (``specs/confirm-cpu.yaml``): Δ = the final dev metric of I-STAR at the paper's best
  BERT (λ, ζ) with the authors' padding minus that of the base run of the same seed, in points
  (x 100), on MRPC and STS-B, seeds 5-9;
- persistent entropy (``specs/confirm-entropy-cpu.yaml``): Δ = the last-30% metric of the
  entropy loss with selected bars minus that of no regularizer, same seed, in points, on CoLA
  and MRPC, seeds 5-9, 10 epochs.

The primary test (:func:`isotropy.reporting.confirmatory.primary_test`: the exact stratified
sign-flip test of S = the mean over tasks of the task means) runs only once every pair of its
comparison is there: the plan counts every run. Until then the finished pairs are printed,
marked partial, with no p. Holm's family is the plan's amendment's (2026-11-29): four tests,
this phase's two and the GPU phase's two. While a test of the family is not complete, a
complete test's Holm-adjusted p is the range it takes over every value the missing p's could
have (:func:`holm_range`): its verdict is printed when the whole range falls on one side of
0.05, and waits otherwise (the GPU phase's tests are read elsewhere; here they count as
missing). Beside the verdict, the one-sided 95% bounds on the mean effect in words, and for
I-STAR the paper's own gain on the same tasks (Table 1, BERT).

Under each comparison, its exploratory counterpart: the same comparison on the same tasks in
the runs made before the plan (B1, phase A, phase B with B5; their protocols differ as each
line says), task means read from the committed runs, for reading the two side by side.

The specs' other cells are compared with the base run beside the primary tests, never in the
family: seed-paired differences, and once a comparison is complete its exact two-sided
sign-flip p, unadjusted. Each run's ``config.json`` is checked before its metric is read:
against the settings its cell names (``review_verdicts.metric``), and every setting of a
confirmatory run against the point its spec expands to (:func:`check_spec_point`); the two
runs of a pair must differ in the method only. A run under ``runs/.pending/`` (a sweep still
running, ``sync.sh``) is read where ``runs/`` lacks it.

Usage: python confirm_phase.py [RUNS_DIR]   (default: docs/results/runs beside this file)
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import review_verdicts as rv  # noqa: E402  (a script beside this one, not a package)
from review_verdicts import (  # noqa: E402
    LABEL,
    LR,
    PAPER,
    PAPER_GAIN,
    Cell,
    Missing,
    check_same_but_method,
    metric,
)

from isotropy.reporting.claim_bounds import bound_words  # noqa: E402
from isotropy.reporting.claim_stats import ALPHA  # noqa: E402
from isotropy.reporting.claim_summary import constant_predictor, holm  # noqa: E402
from isotropy.reporting.claim_values import tail_metric  # noqa: E402
from isotropy.reporting.confirmatory import Primary, primary_test, sign_flip_p  # noqa: E402
from isotropy.reporting.packed import real_path  # noqa: E402
from isotropy.reporting.runs import Run  # noqa: E402

SEEDS = (5, 6, 7, 8, 9)  # fresh: no earlier run of the study used them
FAMILY = 4  # Holm's family (the amendment): the CPU phase's two tests and the GPU phase's two
SPECS = Path(__file__).resolve().parent / "specs"
# settings a run records that its spec point does not decide: where it was written, whether
# it resumed, a token placeholder, and an object the point gives unserialised
NOT_COMPARED = frozenset({"output_dir", "logging_dir", "resume", "hub_token",
                          "accelerator_config"})
ISTAR_ROOT, ENTROPY_ROOT = "confirm-cpu", "confirm-entropy-cpu"
CONFIRMATORY = (ISTAR_ROOT, ENTROPY_ROOT)  # each the name of its spec and of its sweep
ISTAR_TASKS = ("mrpc", "stsb")
ENTROPY_TASKS = ("cola", "mrpc")


def istar_cell(task: str, lam: float | None = None) -> Cell:
    """I-STAR with padding at the paper's ζ for ``task``; λ defaults to the paper's."""
    lam0, zeta = PAPER[task]
    return Cell(ISTAR_ROOT, (("regularizer", ["istar"]), ("tuning", lam0 if lam is None else lam),
                             ("zeta", zeta), ("include_padding", True),
                             ("learning_rate", LR[task]), ("full_determinism", True),
                             ("model", "minilm")))


def cosreg_cell(task: str) -> Cell:
    return Cell(ISTAR_ROOT, (("regularizer", ["cosreg"]), ("cosreg_tuning", 1.0),
                             ("include_padding", True), ("learning_rate", LR[task]),
                             ("full_determinism", True), ("model", "minilm")))


def istar_base(task: str) -> Cell:
    return Cell(ISTAR_ROOT, (("regularizer", ["none"]), ("learning_rate", LR[task]),
                             ("full_determinism", True), ("model", "minilm")))


def _entropy(root: str, select: bool | None, *settings: tuple[str, object]) -> Cell:
    """The entropy loss (β = 1) with selected bars (``True``), all bars (``False``), or no
    regularizer (``None``), with ``settings`` besides."""
    reg = (("regularizer", ["none"]),) if select is None else (
        ("regularizer", ["entropy"]), ("entropy_weight", 1.0), ("select_features", select))
    return Cell(root, (*reg, *settings, ("model", "minilm")))


def entropy_cell(select: bool | None) -> Cell:
    """The entropy spec's cell (:func:`_entropy`): the paper's 10 epochs, evaluated at step 0."""
    return _entropy(ENTROPY_ROOT, select, ("num_train_epochs", 10.0), ("eval_on_start", True),
                    ("full_determinism", True))


def final_metric(value: float, run: Run) -> float:
    return value


def last_30(value: float, run: Run) -> float:
    """The main metric averaged over the evaluations of the last 30% of training."""
    tail = tail_metric(run)
    if tail is None:
        raise ValueError(f"{run.path}: no evaluation in the last 30% of training")
    return tail


Read = Callable[[float, Run], float]


@dataclass(frozen=True)
class Comparison:
    """A cell against a reference, seed-paired, on some tasks."""

    title: str
    cells: Callable[[str], tuple[Cell, Cell]]  # task -> (cell, reference)
    tasks: tuple[str, ...]
    read: Read
    what: str  # the value read, in words


@dataclass
class Pairs:
    """Per task, per seed: Δ in points, or None while a run of the pair is missing."""

    d: dict[str, dict[int, float | None]]
    constant: dict[str, bool]  # the cell predicted one class on every seed

    def complete(self) -> bool:
        return all(v is not None for seeds in self.d.values() for v in seeds.values())

    def groups(self) -> list[list[float]]:
        return [[v for v in seeds.values() if v is not None] for seeds in self.d.values()]

    def count(self) -> tuple[int, int]:
        """(pairs there, pairs in all)."""
        values = [v for seeds in self.d.values() for v in seeds.values()]
        return sum(v is not None for v in values), len(values)


@functools.cache
def spec_points(spec: str) -> dict[str, Any]:
    """The points of ``specs/<spec>.yaml`` by run name, as ``isotropy sweep`` expands them."""
    from isotropy.sweeps.points import expand
    from isotropy.sweeps.spec import load_spec

    return {p.name: p for p in expand(load_spec(SPECS / f"{spec}.yaml"))}


def _json(value: Any) -> Any:
    """A setting as ``config.json`` records it."""
    if isinstance(value, enum.Enum):
        value = value.value
    return json.loads(json.dumps(value, default=str))


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) and isinstance(got, int | float) and not isinstance(got, bool):
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=0.0)
    return got == want


def check_spec_point(run: Run, spec: str) -> None:
    """``ValueError`` unless every setting the run recorded is the one its spec's point gives
    (:data:`NOT_COMPARED` aside): the same schedule, data, model and method, not only the
    settings its cell names."""
    from isotropy.training.settings import args_from_dict

    config = json.loads((real_path(Path(run.path)) / "config.json").read_text())
    point = spec_points(spec).get(Path(run.path).name)
    if point is None:
        raise ValueError(f"{run.path}: not a run of specs/{spec}.yaml")
    wrong = {}
    for section, args in zip(("isotropy", "training"), args_from_dict(point.settings),
                             strict=True):
        saved = config["settings"][section]
        for f in dataclasses.fields(args):
            if f.name in saved and f.name not in NOT_COMPARED:
                want = _json(getattr(args, f.name))
                if not _same(saved[f.name], want):
                    wrong[f.name] = (saved[f.name], want)
    if wrong:
        raise ValueError(f"{run.path}: settings differ from specs/{spec}.yaml's point "
                         f"(got, wanted): {wrong}")


def pairs(runs: Path, c: Comparison, seeds: Sequence[int] = SEEDS) -> Pairs:
    """The comparison's seed-paired differences as far as its runs are there (a run with
    other settings than its cell's raises ``ValueError``)."""
    d: dict[str, dict[int, float | None]] = {}
    constant: dict[str, bool] = {}
    for task in c.tasks:
        cell, ref = c.cells(task)
        d[task], cell_runs = {}, []
        for seed in seeds:
            got = []
            for which in (cell, ref):  # both read: a wrong run is refused even alone
                try:
                    value, run = metric(runs, task, which, seed)
                except Missing:
                    continue
                if which.root in CONFIRMATORY:
                    check_spec_point(run, which.root)
                got.append((c.read(value, run), run))
            if len(got) < 2:
                d[task][seed] = None
                continue
            (a, run_a), (b, run_b) = got
            check_same_but_method(run_a, run_b)
            d[task][seed] = 100 * (a - b)
            cell_runs.append(run_a)
        constant[task] = len(cell_runs) == len(seeds) and constant_predictor(cell_runs)
    return Pairs(d, constant)


def holm_range(known: Sequence[float], missing: int) -> list[tuple[float, float]]:
    """The Holm-adjusted p of each test in ``known`` while ``missing`` more tests of the family
    have no p yet: its least value (the missing p's at 0) and its greatest (at 1); Holm's
    adjusted p's never fall when another p rises, so every value they could have lies between.

    >>> holm_range([0.02], 1), holm_range([0.3], 3), holm_range([0.02], 0)
    ([(0.02, 0.04)], [(0.3, 1.0)], [(0.02, 0.02)])
    >>> holm_range([0.01, 0.02], 2)  # at most 4 x 0.01 and 3 x 0.02
    [(0.02, 0.04), (0.02, 0.06)]
    """
    low = holm([*known, *[0.0] * missing])[: len(known)]
    high = holm([*known, *[1.0] * missing])[: len(known)]
    return list(zip(low, high, strict=True))


def verdict(t: Primary, p_low: float, p_high: float) -> str:
    """The plan's word for a test whose Holm-adjusted p lies in [p_low, p_high]."""
    if p_high < ALPHA and t.statistic != 0:
        word = "supported" if t.statistic > 0 else "contradicted"
    elif p_low >= ALPHA or t.statistic == 0:
        word = "inconclusive"
    else:
        return ("undecided until the family's other tests are complete (its Holm-adjusted p "
                f"lies between {p_low:.3g} and {p_high:.3g})")
    if t.paper is not None and t.upper is not None and t.upper < t.paper:
        word += ", the paper's effect excluded"
    return word


def _cell(v: float | None) -> str:
    return "–" if v is None else ("0 (tie)" if v == 0 else f"{v:+.2f}")


def table(p: Pairs, seeds: Sequence[int] = SEEDS) -> list[str]:
    out = ["| task | " + " | ".join(f"seed {s}" for s in seeds) + " | task mean (pairs) |",
           "|---|" + "---|" * (len(seeds) + 1)]
    for task, by_seed in p.d.items():
        there = [v for v in by_seed.values() if v is not None]
        mean = f"{sum(there) / len(there):+.2f} ({len(there)})" if there else "– (0)"
        flag = " (one class on every seed)" if p.constant[task] else ""
        out.append(f"| {LABEL[task]}{flag} | "
                   + " | ".join(_cell(by_seed[s]) for s in seeds) + f" | {mean} |")
    return out


PRIMARY = (
    Comparison("I-STAR: the paper's (λ, ζ) with padding minus the base run",
               lambda t: (istar_cell(t), istar_base(t)), ISTAR_TASKS, final_metric,
               "the final dev metric"),
    Comparison("Persistent entropy: selected bars minus no regularizer",
               lambda t: (entropy_cell(True), entropy_cell(None)), ENTROPY_TASKS, last_30,
               "the dev metric averaged over the last 30% of training"),
)
PAPER_EFFECT = {PRIMARY[0].title: PAPER_GAIN}  # the paper's own Δ per task, where it gives one

SECONDARY = (
    Comparison("CosReg (padding) minus the base run (C7: no gain)",
               lambda t: (cosreg_cell(t), istar_base(t)), ISTAR_TASKS, final_metric,
               "the final dev metric"),
    Comparison("I-STAR λ = +1 (padding) minus the base run (C6: hurts)",
               lambda t: (istar_cell(t, 1.0), istar_base(t)), ISTAR_TASKS, final_metric,
               "the final dev metric"),
    Comparison("I-STAR λ = −0.3 (padding) minus the base run",
               lambda t: (istar_cell(t, -0.3), istar_base(t)), ISTAR_TASKS, final_metric,
               "the final dev metric"),
    Comparison("Persistent entropy, all bars minus no regularizer (P4: on par)",
               lambda t: (entropy_cell(False), entropy_cell(None)), ENTROPY_TASKS, last_30,
               "the last-30% dev metric"),
    Comparison("Persistent entropy, selected minus all bars (P3)",
               lambda t: (entropy_cell(True), entropy_cell(False)), ENTROPY_TASKS, last_30,
               "the last-30% dev metric"),
)


def phase_b(select: bool | None) -> Cell:
    """Phase B's cell (3 epochs, seeds 0-4 with B5; :func:`_entropy`)."""
    return _entropy("entropy", select, ("num_train_epochs", 3.0))


@dataclass(frozen=True)
class Counterpart:
    """The exploratory runs that made a comparison before the plan, on the same tasks."""

    what: str  # which runs, and how their protocol differs
    comparison: Comparison
    seeds: tuple[int, ...]


def _old(title: str, cells: Callable[[str], tuple[Cell, Cell]], tasks: tuple[str, ...],
         read: Read) -> Comparison:
    return Comparison(title, cells, tasks, read, "")


COUNTERPART = {
    PRIMARY[0].title: Counterpart(
        "B1 (the review phase's paper setting with padding against phase A's base run, seeds "
        "0-2, without deterministic kernels)",
        _old("B1", lambda t: (rv.istar(t, "review", pad=True), rv.base(t, "istar")),
             ISTAR_TASKS, final_metric), (0, 1, 2)),
    PRIMARY[1].title: Counterpart(
        "phase B with B5 (3 epochs instead of 10, seeds 0-4)",
        _old("P2", lambda t: (phase_b(True), phase_b(None)), ENTROPY_TASKS, last_30),
        (0, 1, 2, 3, 4)),
    SECONDARY[0].title: Counterpart(
        "phase A's CosReg, without padding, seeds 0-2",
        _old("C7", lambda t: (rv.cosreg(t), rv.base(t, "istar")), ISTAR_TASKS, final_metric),
        (0, 1, 2)),
    SECONDARY[1].title: Counterpart(
        "phase A's λ = +1, without padding, seeds 0-2",
        _old("C6", lambda t: (rv.istar(t, "istar", 1.0), rv.base(t, "istar")), ISTAR_TASKS,
             final_metric), (0, 1, 2)),
    SECONDARY[2].title: Counterpart(
        "phase A's λ = −0.3, without padding, seeds 0-2",
        _old("-0.3", lambda t: (rv.istar(t, "istar", -0.3), rv.base(t, "istar")), ISTAR_TASKS,
             final_metric), (0, 1, 2)),
    SECONDARY[3].title: Counterpart(
        "phase B with B5 (3 epochs, seeds 0-4)",
        _old("P4", lambda t: (phase_b(False), phase_b(None)), ENTROPY_TASKS, last_30),
        (0, 1, 2, 3, 4)),
    SECONDARY[4].title: Counterpart(
        "phase B with B5 (3 epochs, seeds 0-4)",
        _old("P3", lambda t: (phase_b(True), phase_b(False)), ENTROPY_TASKS, last_30),
        (0, 1, 2, 3, 4)),
}


def counterpart_text(runs: Path, c: Comparison) -> str:
    """The exploratory counterpart's task means (points) and their mean over the tasks, read
    from the committed runs; said so where its runs are not there."""
    old = COUNTERPART[c.title]
    p = pairs(runs, old.comparison, old.seeds)
    groups = p.groups()
    if not p.complete():
        there, total = p.count()
        return f"Exploratory counterpart, {old.what}: {there} of {total} pairs committed."
    means = ", ".join(f"{LABEL[t]} {sum(g) / len(g):+.2f}" for t, g in zip(p.d, groups,
                                                                           strict=True))
    s = sum(sum(g) / len(g) for g in groups) / len(groups)
    return (f"Exploratory counterpart (seen before the plan), {old.what}: task means {means} "
            f"points; S = {s:+.2f}.")


def _paper(c: Comparison) -> float | None:
    gain = PAPER_EFFECT.get(c.title)
    return None if gain is None else sum(gain[t] for t in c.tasks) / len(c.tasks)


def primary_section(runs: Path) -> list[str]:
    """The two primary comparisons, each with its test once complete, and the Holm reading."""
    found = [(c, pairs(runs, c)) for c in PRIMARY]
    tests = {c.title: primary_test(c.title, p.groups(), _paper(c))
             for c, p in found if p.complete()}
    out = []
    for c, p in found:
        there, total = p.count()
        out += [f"#### {c.title} (Δ in points, {c.what})", "", *table(p), "",
                counterpart_text(runs, c), ""]
        t = tests.get(c.title)
        if t is None:
            out += [f"Partial: {there} of {total} pairs. No test before all {total} are there "
                    "(the plan counts every run).", ""]
            continue
        ranges = dict(zip(tests, holm_range([x.p for x in tests.values()],
                                            FAMILY - len(tests)), strict=True))
        low, high = ranges[c.title]
        adjusted = (f"{low:.3g}" if low == high else
                    f"between {low:.3g} and {high:.3g} until the family's other tests are "
                    "complete")
        bounds = ("no bounds (a task without a spread)" if t.lower is None else
                  f"one-sided 95% bounds {t.lower:+.2f} and {t.upper:+.2f}: "
                  f"{bound_words(t.lower, t.upper)}")
        paper = "" if t.paper is None else (
            f"; the paper's gain on these tasks, {t.paper:+.2f}, is "
            + ("excluded" if t.upper is not None and t.upper < t.paper else "not excluded"))
        out += [f"All {total} pairs: S = {t.statistic:+.2f} points, exact stratified sign-flip "
                f"two-sided p = {t.p:.4g}, Holm-adjusted (the amendment's family of four) "
                f"{adjusted}; {bounds}{paper}. **{verdict(t, low, high)}**", ""]
    return out


def secondary_section(runs: Path) -> list[str]:
    out = []
    for c in SECONDARY:
        p = pairs(runs, c)
        there, total = p.count()
        out += [f"#### {c.title} (Δ in points, {c.what})", "", *table(p), "",
                counterpart_text(runs, c), ""]
        if p.complete():
            s, _, _, two = sign_flip_p(p.groups())
            out += [f"All {total} pairs: S = {s:+.2f} points, exact stratified sign-flip "
                    f"two-sided p = {two:.4g} (unadjusted, not in the plan's family).", ""]
        else:
            out += [f"Partial: {there} of {total} pairs.", ""]
    return out


CELLS = (  # every cell of the two specs: (spec, label, task -> cell, tasks, value read)
    *((ISTAR_ROOT, label, cell, ISTAR_TASKS, final_metric) for label, cell in (
        ("base run", istar_base), ("I-STAR, paper's (λ, ζ), padding", istar_cell),
        ("CosReg λ = 1, padding", cosreg_cell),
        ("I-STAR λ = +1, padding", lambda t: istar_cell(t, 1.0)),
        ("I-STAR λ = −0.3, padding", lambda t: istar_cell(t, -0.3)))),
    *((ENTROPY_ROOT, label, lambda t, s=select: entropy_cell(s), ENTROPY_TASKS, last_30)
      for label, select in (("no regularizer", None), ("entropy, selected bars", True),
                            ("entropy, all bars", False))),
)


def runs_section(runs: Path, seeds: Sequence[int] = SEEDS) -> list[str]:
    """Each run's value (I-STAR's spec: the final dev metric; the entropy spec: the last-30%
    metric), per cell and seed, and how many runs of each spec are there."""
    out = ["| spec | task | cell | " + " | ".join(f"seed {s}" for s in seeds) + " |",
           "|---|---|---|" + "---|" * len(seeds)]
    done: dict[str, list[int]] = {}
    for spec, label, cell, tasks, read in CELLS:
        for task in tasks:
            values = []
            for seed in seeds:
                try:
                    values.append(f"{read(*metric(runs, task, cell(task), seed)):.4f}")
                except Missing:
                    values.append("–")
            n = done.setdefault(spec, [0, 0])
            n[0] += sum(v != "–" for v in values)
            n[1] += len(values)
            out.append(f"| {spec} | {LABEL[task]} | {label} | " + " | ".join(values) + " |")
    counts = "; ".join(f"`{spec}`: {a} of {b}" for spec, (a, b) in done.items())
    return [f"Runs finished: {counts}.", "", *out]


def report(runs: Path) -> list[str]:
    return ["### The runs (MiniLM-L6-H384, float32, CPU, fresh seeds 5-9)", "",
            *runs_section(runs), "", "### Primary tests (the plan's family)", "",
            *primary_section(runs), "### Beside them (not in the family)", "",
            *secondary_section(runs)]


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    runs = Path(args[0]) if args else Path(__file__).resolve().parent / "runs"
    print("\n".join(report(runs)).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
