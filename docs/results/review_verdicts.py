"""Print the review phase's verdicts (B1-B4, B6's MPNet half: ``docs/results.md``) from the
committed runs, by the decision rules written there before the runs started.

Every comparison is seed-paired: d = metric(cell) - metric(reference, same seed), in points
(x 100). A test counts the values above 0 in a one-sided exact sign test, ``P(X >= k)`` for
``X ~ Binomial(n, 1/2)``; a difference of exactly 0 stays in n and counts for neither side
(against the claimed side, and against the other: the study's one tie rule,
``claim_stats.TIE_RULE``, as in ``isotropy report`` and ``gpu_phase.py``).
A step whose runs are not all there is reported as pending, with the runs it lacks, and gets
no verdict. Each run's ``config.json`` is checked against the settings its rule names before
its metric is read.

Usage: python review_verdicts.py [RUNS_DIR]   (default: docs/results/runs beside this file)
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from isotropy.reporting.claim_bounds import bound_words
from isotropy.reporting.claim_registry import PAPER_EFFECT
from isotropy.reporting.claim_stats import effect_bound, holm, mean_interval
from isotropy.reporting.claim_summary import constant_predictor
from isotropy.reporting.confirmatory import sign_flip_p
from isotropy.reporting.packed import real_path
from isotropy.reporting.runs import Run, load_run
from isotropy.training.config import default_run_name

SEEDS = (0, 1, 2)
PENDING = ".pending"  # runs of a sweep still running (sync.sh), read where the others lack one
CONFIRM_SEEDS = (3, 4, 5)  # B3's confirmation: fresh seeds, never the screen's
DOSES = (-0.1, -0.03)  # B3's lambdas
# the paper's best BERT (lambda, zeta) per task, and phase A's learning rate
PAPER = {"sst2": (-5.0, 0.2), "mrpc": (-1.0, 0.6), "cola": (-1.0, 0.8), "stsb": (-1.0, 0.2)}
LR = {"sst2": 3e-5, "mrpc": 1e-4, "cola": 3e-5, "stsb": 1e-4}
LABEL = {"sst2": "SST-2", "mrpc": "MRPC", "cola": "CoLA", "stsb": "STS-B"}


@dataclass(frozen=True)
class Cell:
    """Runs of one setting under ``root``, with the settings its rule names."""

    root: str
    settings: tuple[tuple[str, Any], ...]


def istar(task: str, root: str, lam: float | None = None, zeta: float | None = None, *,
          pad: bool = False, lr: float | None = None, head: str = "cls",
          model: str = "minilm") -> Cell:
    lam0, zeta0 = PAPER[task]
    lam, zeta = lam0 if lam is None else lam, zeta0 if zeta is None else zeta
    return Cell(root, (("regularizer", ["istar"]), ("tuning", lam), ("zeta", zeta),
                       ("include_padding", pad), ("learning_rate", lr or LR[task]),
                       ("classifier_pooling", head), ("model", model)))


def base(task: str, root: str, *, lr: float | None = None, head: str = "cls",
         model: str = "minilm") -> Cell:
    return Cell(root, (("regularizer", ["none"]), ("learning_rate", lr or LR[task]),
                       ("classifier_pooling", head), ("model", model)))


def cosreg(task: str) -> Cell:
    return Cell("istar", (("regularizer", ["cosreg"]), ("cosreg_tuning", 1.0),
                          ("include_padding", False), ("learning_rate", LR[task]),
                          ("classifier_pooling", "cls")))


def run_name(task: str, cell: Cell, seed: int) -> str:
    """The run directory's name, as ``isotropy train`` names it from its settings."""
    return default_run_name({"task": task, "seed": seed, **dict(cell.settings)})


class Missing(Exception):
    """A run a step needs is not there (yet)."""


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) and isinstance(got, int | float) and not isinstance(got, bool):
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=0.0)
    return got == want


def metric(runs: Path, task: str, cell: Cell, seed: int) -> tuple[float, Run]:
    """(main metric at the final evaluation, the run) of one run (under ``runs``, else under
    ``runs/.pending``); ``Missing`` if it is absent or unfinished, ``ValueError`` if its
    settings are not the cell's."""
    name = run_name(task, cell, seed)
    for path in (runs / cell.root / name, runs / PENDING / cell.root / name):
        real = real_path(path)  # a packed sweep reads as its folder
        if (real / "config.json").is_file() and any(
                (real / f).is_file() for f in ("results.json", "results.json.gz")):
            break
    else:
        raise Missing(f"{cell.root}/{name}")
    settings = json.loads((real / "config.json").read_text())["settings"]
    merged = {"classifier_pooling": "cls", **{k: v for k, v in settings["isotropy"].items()
                                              if v is not None}, **settings["training"]}
    want = {"task": task, "seed": seed, **dict(cell.settings)}
    wrong = {k: (merged.get(k), v) for k, v in want.items() if not _same(merged.get(k), v)}
    if wrong:
        raise ValueError(f"{path}: settings differ from the rule's (got, wanted): {wrong}")
    run = load_run(path)
    value = run.value(run.main_metric)
    if value is None:
        raise ValueError(f"{path}: no final eval_{run.main_metric}")
    return value, run


def sign_p(k: int, n: int) -> float:
    """One-sided exact sign-test p, P(X >= k) for X ~ Binomial(n, 1/2).

    >>> sign_p(10, 12), sign_p(6, 6), sign_p(0, 6)
    (0.019287109375, 0.015625, 1.0)
    """
    return sum(math.comb(n, j) for j in range(k, n + 1)) / 2**n


@dataclass
class Comparison:
    """Seed-paired differences (points) of a cell against a reference, per task."""

    d: dict[str, list[float]]
    constant: dict[str, bool]  # the cell predicted one class on every seed
    seeds: tuple[int, ...] = SEEDS

    def values(self) -> list[float]:
        return [v for vs in self.d.values() for v in vs]

    def above(self) -> int:
        return sum(v > 0 for v in self.values())

    def below(self) -> int:
        return sum(v < 0 for v in self.values())

    def task_means(self) -> dict[str, float]:
        return {t: sum(v) / len(v) for t, v in self.d.items()}


def check_same_but_method(run_a: Run, run_b: Run, may_differ: frozenset[str] = frozenset()
                           ) -> None:
    """``ValueError`` unless two runs agree on everything but the method (model, data,
    schedule, readout, ...) and the settings named in ``may_differ``."""
    differ = {k: (run_a.settings.get(k), run_b.settings.get(k))
              for k in run_a.settings.keys() | run_b.settings.keys()
              if run_a.settings.get(k) != run_b.settings.get(k) and k not in may_differ}
    if differ or run_a.model != run_b.model:
        raise ValueError(f"{run_a.path} and {run_b.path} differ in more than the method: "
                         f"{differ or (run_a.model, run_b.model)}")


def compare(runs: Path, pairs: list[tuple[str, Cell, Cell]],
            seeds: tuple[int, ...] = SEEDS, may_differ: frozenset[str] = frozenset()
            ) -> Comparison:
    """d per task and seed for (task, cell, reference) pairs, which must differ in the method
    only and in the settings named in ``may_differ``; ``Missing`` lists every absent run at
    once."""
    missing: list[str] = []
    d: dict[str, list[float]] = {}
    constant: dict[str, bool] = {}
    for task, cell, ref in pairs:
        ds, cell_runs = [], []
        for seed in seeds:
            got = []
            for c in (cell, ref):
                try:
                    got.append(metric(runs, task, c, seed))
                except Missing as gone:
                    missing.append(str(gone))
            if len(got) < 2:
                continue
            (a, run_a), (b, run_b) = got
            check_same_but_method(run_a, run_b, may_differ)
            ds.append(100 * (a - b))
            cell_runs.append(run_a)
        d[task] = ds
        constant[task] = len(cell_runs) == len(seeds) and constant_predictor(cell_runs)
    if missing:
        raise Missing(", ".join(sorted(set(missing))))
    return Comparison(d, constant, seeds)


def _points(v: float) -> str:
    """A difference in points, signed; exactly 0 is said so.

    >>> _points(0.0), _points(-8.333), _points(0.004)
    ('0 (tie)', '-8.33', '+0.00')
    """
    return "0 (tie)" if v == 0 else f"{v:+.2f}"


PAPER_GAIN = PAPER_EFFECT["C1 vs none"]  # I-STAR minus base, BERT, Table 1 (points)


def bound_text(by_task: dict[str, list[float]], paper: dict[str, float] | None = PAPER_GAIN
               ) -> str:
    """The one-sided 95% bounds on the mean over tasks of the task means (points; stratified
    by task, ``claim_stats.effect_bound``) in words, beside the paper's own gain on the same
    tasks (I-STAR minus base, BERT, Table 1) where ``paper`` gives one."""
    groups = [v for v in by_task.values() if v]
    b = effect_bound(groups) if groups else None
    if b is None:
        return ("One-sided 95% bounds on the mean effect: none (a task with fewer than 2 seeds, "
                "or no spread).")
    text = (f"Mean over {b.tasks} task(s) {b.mean:+.2f} points, one-sided 95% bounds "
            f"(stratified by task) {b.lower:+.2f} and {b.upper:+.2f}: "
            f"{bound_words(b.lower, b.upper)}")
    if paper is not None:
        gain = sum(paper[t] for t in by_task) / len(by_task)
        text += (f"; the paper's gain on these tasks, {gain:+.2f}, is "
                 + ("excluded" if b.upper < gain else "not excluded"))
    return text + "."


def primary_text(by_task: dict[str, list[float]]) -> str:
    """The confirmatory plan's primary test (``docs/results.md``, "Confirmatory plan") of one
    comparison: S, the mean over tasks of the task means (points), and its exact stratified
    sign-flip two-sided p; exploratory, since these runs were seen before the plan.

    >>> primary_text({"mrpc": [1.0, 2.0, 3.0]}).split(": S = ")[1]
    '+2.00 points over 1 task(s), 3 values, exact stratified sign-flip two-sided p = 0.25.'
    """
    groups = [v for v in by_task.values() if v]
    if not groups:
        return "The confirmatory plan's primary test: no values yet."
    s, _, _, p = sign_flip_p(groups)
    return ("The confirmatory plan's primary test (exploratory: runs seen before the plan): "
            f"S = {s:+.2f} points over {len(groups)} task(s), {sum(map(len, groups))} values, "
            f"exact stratified sign-flip two-sided p = {p:.4g}.")


def _row(task: str, c: Comparison) -> str:
    cells = " | ".join(_points(v) for v in c.d[task])
    mean = mean_interval(c.d[task])  # the report's 95% Student-t interval
    flag = " (the cell predicts one class on every seed)" if c.constant[task] else ""
    return f"| {LABEL[task]}{flag} | {cells} | {mean.mean:+.2f} {mean.interval_text(2)} |"


def _table(c: Comparison) -> list[str]:
    head = ["| task | " + " | ".join(f"seed {s}" for s in c.seeds)
            + " | task mean [95% interval] |",
            "|---|" + "---|" * (len(c.seeds) + 1)]
    return head + [_row(t, c) for t in c.d]


def six_of_six(c: Comparison, title: str, *, constant_rule: bool) -> tuple[list[str], float]:
    """The rule of B2 and B4: supported at n of n above 0, contradicted at n of n below;
    with ``constant_rule`` (B4's), a cell that predicts one class on every seed counts as not
    above."""
    n, down = len(c.values()), c.below()
    k = sum(v > 0 for t, vs in c.d.items() if not (constant_rule and c.constant[t]) for v in vs)
    word = "supported" if k == n else "contradicted" if down == n else "inconclusive"
    p = sign_p(k, n)
    return [f"### {title}", "", *_table(c), "",
            f"{k} of {n} above 0, {down} below: one-sided p = {p:.3f} for 'above', "
            f"{sign_p(down, n):.3f} for 'below'. **{word}**", "", bound_text(c.d), "",
            primary_text(c.d)], p


def b1(runs: Path) -> tuple[list[str], float]:
    tasks = list(PAPER)
    out = ["### B1, the authors' padding protocol (d = B1 - reference, points)", ""]
    p_primary = math.nan
    for ref_name, ref, paper in (
            ("the base run (primary)", lambda t: base(t, "istar"), PAPER_GAIN),
            ("CosReg (secondary)", cosreg, PAPER_EFFECT["C1 vs CosReg"]),
            ("the same setting without padding (secondary)", lambda t: istar(t, "istar"),
             None)):
        c = compare(runs, [(t, istar(t, "review", pad=True), ref(t)) for t in tasks])
        n, k, down = len(c.values()), c.above(), c.below()
        word = "supported" if k >= 10 else "contradicted" if down >= 10 else "inconclusive"
        means = c.task_means()
        out += [f"Against {ref_name}:", "", *_table(c), "",
                f"{k} of {n} above 0, {down} below, {n - k - down} exactly 0: one-sided p = "
                f"{sign_p(k, n):.3f} for 'above'; task means above 0 on "
                f"{sum(v > 0 for v in means.values())} of {len(means)}. **{word}**", "",
                bound_text(c.d, paper), "", primary_text(c.d), ""]
        if ref_name.endswith("(primary)"):
            p_primary = sign_p(k, n)
    return out, p_primary


def b2(runs: Path) -> tuple[list[str], float]:
    c = compare(runs, [(t, istar(t, "review", lr=3e-5), base(t, "review", lr=3e-5))
                       for t in ("mrpc", "stsb")])
    return six_of_six(c, "B2, the learning rate (d = paper's setting - base run, both at 3e-5)",
                      constant_rule=False)


CANDIDATE_AT = 3  # B3's screen: a lambda above the base run on this many task means


def screen(c: Comparison) -> tuple[list[str], str]:
    """B3's screen of one lambda: the tasks whose mean d is above 0 (a task whose cell
    predicts one class on every seed is not), and the word: a candidate at 3 or more."""
    up = [t for t, m in c.task_means().items() if m > 0 and not c.constant[t]]
    if len(up) >= CANDIDATE_AT:
        return up, ("a **candidate** (confirmation runs on fresh seeds 3-5 for "
                    + ", ".join(LABEL[t] for t in up) + ")")
    return up, "**does not beat** the base run on this model"


def screening(runs: Path, lam: float) -> Comparison:
    """B3's screening values of one lambda: against phase A's base run, seeds 0-2."""
    return compare(runs, [(t, istar(t, "dose", lam), base(t, "istar")) for t in PAPER])


def _screens(runs: Path) -> tuple[dict[float, Comparison], dict[float, str]]:
    """The screening values of each lambda whose runs are all there, and the absent runs of
    each other lambda."""
    out, missing = {}, {}
    for lam in DOSES:
        try:
            out[lam] = screening(runs, lam)
        except Missing as gone:
            missing[lam] = str(gone)
    return out, missing


def screens(runs: Path) -> dict[float, Comparison]:
    """Every lambda's screening values; ``Missing`` names every absent run of all of them."""
    out, missing = _screens(runs)
    if missing:
        raise Missing(", ".join(missing.values()))
    return out


def candidates(runs: Path) -> dict[float, list[str]]:
    """B3's screen: {lambda: the tasks whose mean d is above 0} for each candidate lambda;
    ``Missing`` until every screening run is there."""
    return _candidates(screens(runs))


def _candidates(comparisons: dict[float, Comparison]) -> dict[float, list[str]]:
    found = {lam: screen(c)[0] for lam, c in comparisons.items()}
    return {lam: up for lam, up in found.items() if len(up) >= CANDIDATE_AT}


def b3(runs: Path) -> list[str]:
    """B3's screen, each lambda's word as soon as its own runs are all there; the
    confirmation (Holm-adjusted over the candidates) once every lambda's screen is."""
    out = ["### B3, the dose (d = I-STAR at lambda - phase A's base run, points)", ""]
    comparisons, missing = _screens(runs)
    for lam in DOSES:
        if lam in missing:
            out += [f"lambda = {lam:g}: pending (missing: {missing[lam]})", ""]
            continue
        c = comparisons[lam]
        up, word = screen(c)
        out += [f"lambda = {lam:g}:", "", *_table(c), "",
                f"task means above 0 on {len(up)} of {len(c.d)}: {word}", "",
                bound_text(c.d), "", primary_text(c.d), ""]
    if missing:
        return [*out, "The confirmation waits for every lambda's screen.", "",
                *dose_response(runs)]
    found = _candidates(comparisons)
    if found:
        out += confirmation(runs, found)
    return out + dose_response(runs)


def confirm_cells(task: str, lam: float) -> tuple[Cell, Cell]:
    """(lambda's cell, the base run's cell) of B3's confirmation, both in its own root."""
    return istar(task, "dose-confirm", lam), base(task, "dose-confirm")


CONFIRM_SPEC = Path(__file__).resolve().parent / "specs" / "dose-confirm.yaml"


def check_confirm_spec(found: dict[float, list[str]], path: Path | None = None) -> None:
    """``ValueError`` if the confirmation's spec (``path``, default :data:`CONFIRM_SPEC`),
    once written, is not the one the screen names (the runs must be those named before they
    started)."""
    path = CONFIRM_SPEC if path is None else path
    if path.is_file() and path.read_text(encoding="utf-8") != confirmation_spec(found):
        raise ValueError(f"{path} is not the spec B3's screen names ({found}): the screen's "
                         "runs changed after the confirmation was written")


def confirmation(runs: Path, found: dict[float, list[str]]) -> list[str]:
    """B3's confirmation of each candidate on fresh seeds: its values alone in a one-sided
    exact sign test (a cell predicting one class on every seed counts as not above),
    Holm-adjusted over the candidates; **supported** at an adjusted p < 0.05, **not
    confirmed** otherwise."""
    check_confirm_spec(found)
    out = ["#### B3's confirmation (fresh seeds "
           + ", ".join(str(s) for s in CONFIRM_SEEDS) + "; d = I-STAR at lambda - base run)", ""]
    comparisons, missing = {}, []
    for lam, tasks in found.items():
        try:
            comparisons[lam] = compare(runs, [(t, *confirm_cells(t, lam)) for t in tasks],
                                       CONFIRM_SEEDS)
        except Missing as gone:
            missing.append(str(gone))
    if missing:
        return [*out, f"pending (missing: {', '.join(missing)})", ""]
    return out + confirm_verdicts(comparisons)


def confirm_verdicts(comparisons: dict[float, Comparison]) -> list[str]:
    """Each candidate's table and verdict (see ``confirmation``)."""
    counts = {lam: (sum(v > 0 for t, vs in c.d.items() if not c.constant[t] for v in vs),
                    len(c.values())) for lam, c in comparisons.items()}
    raw = {lam: sign_p(k, n) for lam, (k, n) in counts.items()}
    adjusted = dict(zip(raw, holm(list(raw.values())), strict=True))
    out = []
    for lam, c in comparisons.items():
        (k, n), word = counts[lam], "supported" if adjusted[lam] < 0.05 else "not confirmed"
        out += [f"lambda = {lam:g}:", "", *_table(c), "",
                f"{k} of {n} above 0: one-sided p = {raw[lam]:.3f}, Holm-adjusted over "
                f"{len(raw)} candidate(s) {adjusted[lam]:.3f}. **{word}**", ""]
    return out


def confirmation_spec(found: dict[float, list[str]]) -> str:
    """The sweep spec of B3's confirmation, made of the screen's own points: ``dose.yaml``'s
    fixed settings and its point of each candidate lambda on each of that lambda's tasks, and
    phase A's base-run point (``istar.yaml``) of every such task, at fresh seeds, seed-major,
    into ``dose-confirm``."""
    import yaml

    from isotropy.sweeps.spec import load_spec

    if not found:
        raise ValueError("no candidate lambda: B3 has no confirmation to run")
    specs = Path(__file__).resolve().parent / "specs"
    dose, phase_a = load_spec(specs / "dose.yaml"), load_spec(specs / "istar.yaml")
    tasks = [t for t in PAPER if any(t in ts for ts in found.values())]
    points = [p for t in tasks for p in phase_a.points
              if p["task"] == t and p["regularizer"] == "none"]
    points += [p for lam, ts in found.items() for t in PAPER if t in ts
               for p in dose.points if p["task"] == t and p.get("tuning") == lam]
    if len(points) != len(tasks) + sum(len(ts) for ts in found.values()):
        raise ValueError(f"dose.yaml or istar.yaml lacks a point of {found}")
    root = str(Path(str(dose.output_root)).with_name("dose-confirm"))
    head = yaml.safe_dump({"output_root": root, "base": dose.base}, sort_keys=False,
                          default_flow_style=False)
    body = "".join("  - " + yaml.safe_dump(p, sort_keys=False, default_flow_style=True,
                                           width=1000) for p in points)
    named = "\n".join(f"#   lambda = {lam:g} on " + ", ".join(LABEL[t] for t in ts)
                      for lam, ts in found.items())
    return ("# Review phase, step B3's confirmation (docs/results.md, \"Review phase\"), written\n"
            "# by make_confirm_spec.py from the screen of seeds 0-2:\n" + named + "\n"
            "# Base runs and candidates on fresh seeds, seed-major: a stop leaves whole seeds.\n"
            + head + "points:\n" + body
            + f"seeds: {list(CONFIRM_SEEDS)}\norder: seed-major\n")


def dose_response(runs: Path) -> list[str]:
    """Per task, the mean d over the seeds at each lambda of the grid (no verdict); a lambda
    whose runs are not all there is shown as pending."""
    grid: list[tuple[str, Any]] = [("paper's", None), ("-0.3", -0.3), ("-0.1", -0.1),
                                   ("-0.03", -0.03)]
    lines = ["Dose-response (mean d over the seeds, points; lambda = 0 is the base run, 0):", "",
             "| task | " + " | ".join(f"lambda = {name}" for name, _ in grid) + " |",
             "|---|" + "---|" * len(grid)]
    for task in PAPER:
        cells = []
        for _, lam in grid:
            root = "istar" if lam in (None, -0.3) else "dose"
            try:
                c = compare(runs, [(task, istar(task, root, lam), base(task, "istar"))])
            except Missing:
                cells.append("pending")
                continue
            flag = " (one class)" if c.constant[task] else ""
            cells.append(f"{c.task_means()[task]:+.2f}{flag}")
        label = f"{LABEL[task]} (paper's lambda = {PAPER[task][0]:g})"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return [*lines, ""]


B4_TASKS = ("mrpc", "cola")


def b4_pairs() -> list[tuple[str, Cell, Cell]]:
    return [(t, istar(t, "readout", head="mean"), base(t, "readout", head="mean"))
            for t in B4_TASKS]


def b4(runs: Path) -> tuple[list[str], float]:
    """B4's primary test, then its secondaries, reported without a verdict: the base run under
    the mean readout against phase A's under [CLS], and phase A's d under [CLS]."""
    lines, p = six_of_six(compare(runs, b4_pairs()),
                          "B4, the readout (d = paper's setting - base run, mean readout)",
                          constant_rule=True)
    readout = compare(runs, [(t, base(t, "readout", head="mean"), base(t, "istar"))
                             for t in B4_TASKS], may_differ=frozenset({"classifier_pooling"}))
    cls = compare(runs, [(t, istar(t, "istar"), base(t, "istar")) for t in B4_TASKS])
    return [*lines, "", "Secondary, no verdict: the base run, mean readout - [CLS] readout "
            "(phase A), points:", "", *_table(readout), "",
            "Secondary, no verdict: d = paper's setting - base run under the [CLS] readout "
            "(phase A), points:", "", *_table(cls)], p


def finished_pairs(runs: Path, pairs: list[tuple[str, Cell, Cell]],
                   seeds: tuple[int, ...] = SEEDS) -> list[str]:
    """The seed-paired d (points) of the pairs whose two runs are both there, while a step
    waits for others: reported as they finish, no verdict."""
    out = []
    for task, cell, ref in pairs:
        for seed in seeds:
            try:
                (a, run_a), (b, run_b) = (metric(runs, task, c, seed) for c in (cell, ref))
            except Missing:
                continue
            check_same_but_method(run_a, run_b)
            out.append(f"- {LABEL[task]}, seed {seed}: {a:.4f} - {b:.4f} = "
                       f"{_points(100 * (a - b))} points")
    return out


MPNET_SEEDS = (0, 1)  # B6's MPNet half: two seeds, reported without a verdict


def b6(runs: Path) -> list[str]:
    """B6's MPNet half: the paper's setting against the base run on CoLA, all-mpnet-base-v2,
    seeds 0-1; reported without a verdict (two seeds: a sign test's p is at least 1/4), with
    each run's metric and the share of its majority class at the final evaluation."""
    cells = (("base run", base("cola", "mpnet", model="mpnet")),
             ("paper's setting", istar("cola", "mpnet", model="mpnet")))
    c = compare(runs, [("cola", cells[1][1], cells[0][1])], seeds=MPNET_SEEDS)
    rows = ["| cell | " + " | ".join(f"seed {s}" for s in MPNET_SEEDS) + " |",
            "|---|" + "---|" * len(MPNET_SEEDS)]
    for label, cell in cells:
        got = []
        for seed in MPNET_SEEDS:
            value, run = metric(runs, "cola", cell, seed)
            share = run.value("majority_fraction")
            got.append(f"{value:.4f}" + ("" if share is None else
                                         f" (majority class {100 * share:.1f}%)"))
        rows.append(f"| {label} | " + " | ".join(got) + " |")
    return ["### B6, MPNet-base (d = paper's setting - base run, CoLA, all-mpnet-base-v2)", "",
            *rows, "", *_table(c), "", f"{c.above()} of {len(c.values())} above 0, "
            f"{c.below()} below: reported without a verdict (two seeds)."]


def main(argv: list[str]) -> int:
    runs = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent / "runs"
    primary: dict[str, float] = {}
    plan: dict[str, float] = {}  # the confirmatory plan's p of each step's primary comparison
    for step, fn in (("B1", b1), ("B2", b2), ("B3", b3), ("B4", b4), ("B6", b6)):
        try:
            result = fn(runs)
        except Missing as gone:
            print(f"### {step}: pending (missing: {gone})\n")
            if step == "B4" and (done := finished_pairs(runs, b4_pairs())):
                print("Finished so far (no verdict before every seed is there):\n"
                      + "\n".join(done) + "\n")
            continue
        lines, p = result if isinstance(result, tuple) else (result, None)
        print("\n".join(lines) + "\n")
        if p is not None:
            primary[step] = p
            plan[step] = plan_p(lines)
    for family in (("B1", "B2"), ("B1", "B2", "B4")):
        if all(s in primary for s in family):
            adjusted = holm([primary[s] for s in family])
            print(f"Holm over {', '.join(family)}: " + ", ".join(
                f"{s} p = {primary[s]:.3f} -> {a:.3f}" for s, a in zip(family, adjusted,
                                                                      strict=True)))
    family = tuple(s for s in ("B1", "B2", "B4") if s in plan)
    if family:
        adjusted = holm([plan[s] for s in family])
        print(f"The confirmatory plan's primary test (exploratory), Holm over "
              f"{', '.join(family)}: " + ", ".join(
                  f"{s} p = {plan[s]:.4g} -> {a:.4g}" for s, a in zip(family, adjusted,
                                                                     strict=True)))
    return 0


def plan_p(lines: list[str]) -> float:
    """The two-sided p of a step's first :func:`primary_text` line (its primary comparison).

    >>> plan_p(["x", primary_text({"mrpc": [1.0, 2.0, 3.0]})])
    0.25
    """
    said = next(x for x in lines if x.startswith("The confirmatory plan's primary test ("))
    return float(said.rsplit("two-sided p = ", 1)[1].rstrip("."))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
