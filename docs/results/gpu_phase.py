"""Print the GPU phase of ``docs/gpu.md`` from the archived runs of ``docs/gpu-runs/<n>/``:
every run of ``benchmarks/gpu/runs.yaml`` that came back, the review phase's seed-paired
comparisons on them, and how far a repeated run moved.

A GPU phase of its own: one model (MiniLM with float16-rounded weights, loaded as float32),
never pooled with the CPU runs of ``docs/results.md``. A run that came back more than once (a
seed rerun by a later call) is read from its first copy, the lowest GPU run number; the later
copies only measure the GPU's run-to-run noise. Runs are matched by their ``config.json``
settings, not by name, and a cell and its reference must agree on every compared setting but
the method.

Each comparison: d = metric(cell) - metric(reference, same seed), in points (x 100), on the
seeds where both runs are there; the values above 0 in a one-sided exact sign test (a
difference of exactly 0 stays in n and counts for neither side: the study's one tie rule,
``claim_stats.TIE_RULE``, as in the review phase and ``isotropy report``).
A verdict word is given only when all five seeds of every task of the comparison are there:
**supported** if p('above') < 0.05, **contradicted** if p('below') < 0.05, else
**inconclusive**; before that the counts are printed as they stand, marked partial. Beside
the rule, a stricter reading added after the runs were seen: the primary comparisons' (B1, B2,
B3's two doses) two-sided p, Holm-adjusted across the four.

Usage: python gpu_phase.py [GPU_RUNS_DIR]   (default: docs/gpu-runs)
"""

from __future__ import annotations

import json
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from review_verdicts import (  # noqa: E402
    LABEL,
    LR,
    PAPER,
    PAPER_GAIN,
    _points,
    bound_text,
    check_same_but_method,
    primary_text,
    sign_p,
)

from isotropy.reporting.claim_stats import holm, mean_interval  # noqa: E402
from isotropy.reporting.claim_summary import constant_predictor  # noqa: E402
from isotropy.reporting.confirmatory import sign_flip_p  # noqa: E402
from isotropy.reporting.runs import Run, load_run  # noqa: E402

SEEDS = (0, 1, 2, 3, 4)
TASKS = tuple(PAPER)
# (task, regularizers, tuning, zeta, include_padding, learning rate): a cell, seeds aside
Key = tuple[str, tuple[str, ...], float | None, float | None, bool, float]


def cell_key(task: str, *, lam: float | None = None, zeta: float | None = None,
             pad: bool = False, lr: float | None = None, istar: bool = True) -> Key:
    """The settings of a cell; an I-STAR cell defaults to the paper's (lambda, zeta)."""
    if not istar:
        return (task, ("none",), None, None, False, lr or LR[task])
    lam0, zeta0 = PAPER[task]
    return (task, ("istar",), lam0 if lam is None else lam, zeta0 if zeta is None else zeta,
            pad, lr or LR[task])


def run_key(config: dict[str, Any]) -> tuple[Key, int]:
    """(cell, seed) of a run, from its ``config.json``."""
    iso, train = config["settings"]["isotropy"], config["settings"]["training"]
    regs = tuple(iso["regularizer"])
    lr = float(train["learning_rate"])
    if regs == ("none",):
        return (iso["task"], regs, None, None, False, lr), int(train["seed"])
    return ((iso["task"], regs, float(iso["tuning"]), float(iso["zeta"]),
             bool(iso["include_padding"]), lr), int(train["seed"]))


def unpack(archives: Path, into: Path) -> list[tuple[int, Path]]:
    """Every run of ``archives/<n>/runs-*.tar.xz``, as (n, run directory), n ascending."""
    found: list[tuple[int, Path]] = []
    numbered = [p for p in archives.iterdir() if p.is_dir() and p.name.isdigit()]
    for folder in sorted(numbered, key=lambda p: int(p.name)):
        for archive in sorted(folder.glob("runs-*.tar.xz")):
            dest = into / folder.name
            with tarfile.open(archive) as tar:
                tar.extractall(dest, filter="data")
        runs = into / folder.name / "runs"
        if runs.is_dir():
            found += [(int(folder.name), p) for p in sorted(runs.iterdir()) if p.is_dir()]
    return found


@dataclass
class Copy:
    """One copy of a run: the GPU run it came back from, and the run."""

    gpu_run: int
    run: Run

    @property
    def value(self) -> float:
        v = self.run.value(self.run.main_metric)
        if v is None:
            raise ValueError(f"{self.run.path}: no final eval_{self.run.main_metric}")
        return v


def index(runs: list[tuple[int, Path]]) -> dict[tuple[Key, int], list[Copy]]:
    """The copies of each (cell, seed), first copy first."""
    out: dict[tuple[Key, int], list[Copy]] = {}
    for n, path in runs:
        if not (path / "results.json").is_file():
            continue  # unfinished
        key = run_key(json.loads((path / "config.json").read_text()))
        out.setdefault(key, []).append(Copy(n, load_run(path)))
    for copies in out.values():
        copies.sort(key=lambda c: c.gpu_run)
    return out


@dataclass
class Comparison:
    """Seed-paired differences (points) of a cell against its reference, per task."""

    d: dict[str, dict[int, float]]  # task -> seed -> d
    constant: dict[str, bool]  # the cell predicted one class on every seed compared

    def values(self) -> list[float]:
        return [v for by_seed in self.d.values() for v in by_seed.values()]

    def complete(self) -> bool:
        return all(len(by_seed) == len(SEEDS) for by_seed in self.d.values())


def compare(runs: dict[tuple[Key, int], list[Copy]],
            pairs: list[tuple[Key, Key]]) -> Comparison:
    """d for every seed where both the cell's and the reference's first copies are there."""
    d: dict[str, dict[int, float]] = {}
    constant: dict[str, bool] = {}
    for cell, ref in pairs:
        task, by_seed, cell_runs = cell[0], {}, []
        for seed in SEEDS:
            if (cell, seed) not in runs or (ref, seed) not in runs:
                continue
            a, b = runs[cell, seed][0], runs[ref, seed][0]
            check_same_but_method(a.run, b.run)
            by_seed[seed] = 100 * (a.value - b.value)
            cell_runs.append(a.run)
        d[task] = by_seed
        constant[task] = constant_predictor(cell_runs)
    return Comparison(d, constant)


def verdict(c: Comparison, complete: bool | None = None,
            partial: str = "no verdict before all five seeds") -> str:
    """The counts, their one-sided p's, and the word: only when ``complete`` (default: all
    seeds of the comparison are there), else the counts marked ``partial``."""
    values = c.values()
    n, up, down = len(values), sum(v > 0 for v in values), sum(v < 0 for v in values)
    if n == 0:
        return "no pairs yet"
    text = (f"{up} of {n} above 0, {down} below, {n - up - down} exactly 0: one-sided p = "
            f"{_p(sign_p(up, n))} for 'above', {_p(sign_p(down, n))} for 'below'")
    if not (c.complete() if complete is None else complete):
        return f"{text} (partial: {partial})"
    word = ("supported" if sign_p(up, n) < 0.05 else
            "contradicted" if sign_p(down, n) < 0.05 else "inconclusive")
    return f"{text}. **{word}**"


def _p(p: float) -> str:
    """A p-value to 3 decimals, or to 2 significant digits below 0.001.

    >>> _p(0.0207), _p(0.000201), _p(1.0)
    ('0.021', '0.00020', '1.000')
    """
    return f"{p:.3f}" if p >= 0.001 else f"{p:.2g}" if p < 1e-4 else f"{p:.5f}"


def two_sided(c: Comparison) -> float:
    """Twice the smaller one-sided sign-test p (capped at 1), a difference of exactly 0
    counted against both sides: the study's one tie rule (``claim_stats.TIE_RULE``), as in
    ``isotropy report`` and the review phase.

    >>> two_sided(Comparison({"mrpc": {0: 1.0, 1: 2.0, 2: 3.0}}, {"mrpc": False}))
    0.25
    """
    values = c.values()
    n = len(values)
    up, down = sum(v > 0 for v in values), sum(v < 0 for v in values)
    return min(1.0, 2 * min(sign_p(up, n), sign_p(down, n)))


def _head(first: str) -> list[str]:
    return ["| " + first + " | " + " | ".join(f"seed {s}" for s in SEEDS)
            + " | mean [95% interval] |", "|---|" + "---|" * (len(SEEDS) + 1)]


def _row(label: str, by_seed: dict[int, float]) -> str:
    """One table row: d per seed ('–' where not there), and their mean with its interval."""
    cells = " | ".join(_points(by_seed[s]) if s in by_seed else "–" for s in SEEDS)
    if not by_seed:
        return f"| {label} | {cells} | – |"
    m = mean_interval(list(by_seed.values()))
    return f"| {label} | {cells} | {m.mean:+.2f} {m.interval_text(2)} |"


def table(c: Comparison) -> list[str]:
    return _head("task") + [
        _row(LABEL[task] + (" (one class on every seed)" if c.constant[task] else ""), by_seed)
        for task, by_seed in c.d.items()]


# (title, cell, reference, tasks): the review phase's comparisons, in the order of runs.yaml
COMPARISONS: list[tuple[str, Callable[[str], Key], Callable[[str], Key], tuple[str, ...]]] = [
    ("B1: the paper's (lambda, zeta) with padding - the base run",
     lambda t: cell_key(t, pad=True), lambda t: cell_key(t, istar=False), TASKS),
    ("Phase A's protocol: the paper's (lambda, zeta) without padding - the base run",
     lambda t: cell_key(t), lambda t: cell_key(t, istar=False), TASKS),
    ("B1, secondary: with padding - without padding",
     lambda t: cell_key(t, pad=True), lambda t: cell_key(t), TASKS),
    ("B3: lambda = -0.1 - the base run",
     lambda t: cell_key(t, lam=-0.1), lambda t: cell_key(t, istar=False), TASKS),
    ("B3: lambda = -0.03 - the base run",
     lambda t: cell_key(t, lam=-0.03), lambda t: cell_key(t, istar=False), TASKS),
    ("B2: the paper's (lambda, zeta) - the base run, both at 3e-5",
     lambda t: cell_key(t, lr=3e-5), lambda t: cell_key(t, lr=3e-5, istar=False),
     ("mrpc", "stsb")),
]


# the primary comparisons of the multiplicity reading (titles' first words): B1, B3, B2
PRIMARY = ("B1:", "B3:", "B2:")


def comparisons(runs: dict[tuple[Key, int], list[Copy]]) -> list[str]:
    out: list[str] = []
    primary: dict[str, Comparison] = {}
    for title, cell, ref, tasks in COMPARISONS:
        c = compare(runs, [(cell(t), ref(t)) for t in tasks])
        paper = None if title.endswith("- without padding") else PAPER_GAIN
        by_task = {t: list(v.values()) for t, v in c.d.items()}
        out += [f"### {title} (points)", "", *table(c), "", verdict(c), "",
                bound_text(by_task, paper), "", primary_text(by_task), ""]
        if title.startswith(PRIMARY):
            key = title.split(" - ")[0]
            assert key not in primary, f"two primary comparisons named {key!r}"
            primary[key] = c
    return out + multiplicity(primary) + (plan_reading(primary) if any(
        c.values() for c in primary.values()) else [])


def multiplicity(primary: dict[str, Comparison]) -> list[str]:
    """A stricter reading than the phase's rule, added after its runs were seen (so it can only
    take verdict words away): each primary comparison's two-sided p, Holm-adjusted across all
    of them (one not run yet counts as p = 1, so the family keeps its size), a word at
    adjusted p < 0.05; marked provisional while any of them is partial."""
    if not any(c.values() for c in primary.values()):
        return []
    raw = {t: two_sided(c) if c.values() else 1.0 for t, c in primary.items()}
    adjusted = holm(list(raw.values()))
    lines = ["### Multiplicity: two-sided p, Holm-adjusted across the primary comparisons", "",
             "| comparison | two-sided p | Holm-adjusted | reading |", "|---|---|---|---|"]
    for (t, c), a in zip(primary.items(), adjusted, strict=True):
        up = sum(v > 0 for v in c.values())
        word = ("not run" if not c.values() else "partial" if not c.complete() else
                "inconclusive" if a >= 0.05 else
                "supported" if 2 * up > len(c.values()) else "contradicted")
        lines.append(f"| {t} | {_p(raw[t]) if c.values() else '-'} | {_p(a)} | {word} |")
    if not all(c.complete() for c in primary.values()):
        lines += ["", "Provisional: a comparison of the family is partial, so every adjusted p "
                  "can still change."]
    return [*lines, ""]


def plan_reading(primary: dict[str, Comparison]) -> list[str]:
    """The confirmatory plan's primary test (``docs/results.md``, "Confirmatory plan") of each
    primary comparison, exploratory (the runs were seen before the plan): S, the mean over
    tasks of the task means (points), its exact stratified sign-flip two-sided p, Holm-adjusted
    across the same family (one not run yet: p = 1), *supported* / *contradicted* on the side
    of S at an adjusted p < 0.05."""
    groups = {t: [list(v.values()) for v in c.d.values() if v] for t, c in primary.items()}
    tests = {t: sign_flip_p(g) if g else (0.0, 1.0, 1.0, 1.0) for t, g in groups.items()}
    adjusted = holm([two for _, _, _, two in tests.values()])
    lines = ["### The confirmatory plan's primary test (exploratory), Holm-adjusted across "
             "the same comparisons", "",
             "| comparison | S (points) | sign-flip two-sided p | Holm-adjusted | reading |",
             "|---|---|---|---|---|"]
    for (t, c), (s, _, _, two), a in zip(primary.items(), tests.values(), adjusted,
                                         strict=True):
        word = ("not run" if not c.values() else "partial" if not c.complete() else
                "inconclusive" if a >= 0.05 or s == 0 else
                "supported" if s > 0 else "contradicted")
        lines.append(f"| {t} | {f'{s:+.2f}' if c.values() else '-'} | "
                     f"{_p(two) if c.values() else '-'} | {_p(a)} | {word} |")
    return [*lines, ""]


B6_GRID = (-5.0, -3.0, -1.0, 1.0, 3.0, 5.0)  # the I-STAR paper's lambda grid, zeta = 0.2


def b6(runs: dict[tuple[Key, int], list[Copy]]) -> list[str]:
    """B6 (``benchmarks/gpu/runs-b6.yaml``): STS-B's Pearson at each lambda of the paper's grid
    at zeta = 0.2 against the base run, and Table 2's "the best lambda is negative": the
    negative and the positive lambda of the highest mean, seed-paired, by the rule of
    ``docs/gpu.md`` (**supported** at 5 of 5 seeds with the negative one above, p = 1/32;
    **contradicted** at 5 of 5 below; a verdict only with all five seeds of every lambda)."""
    base = cell_key("stsb", istar=False)
    cells = {lam: cell_key("stsb", lam=lam, zeta=0.2) for lam in B6_GRID}
    if not any((cells[lam], s) in runs for lam in B6_GRID if lam != -1.0 for s in SEEDS):
        return ["### B6: not run yet (benchmarks/gpu/runs-b6.yaml)", ""]
    lines = ["### B6: STS-B, the paper's lambda grid at zeta = 0.2 - the base run (points)", "",
             *_head("lambda")]
    means: dict[float, float] = {}
    for lam in B6_GRID:
        by_seed = compare(runs, [(cells[lam], base)]).d["stsb"]
        if by_seed:
            means[lam] = sum(by_seed.values()) / len(by_seed)
        lines.append(_row(f"{lam:+g}", by_seed))
    complete = all((c, s) in runs for c in [base, *cells.values()] for s in SEEDS)
    lines.append("")
    negative = {lam: m for lam, m in means.items() if lam < 0}
    positive = {lam: m for lam, m in means.items() if lam > 0}
    if not negative or not positive:
        return [*lines, "Table 2's claim: no lambda of one sign has runs yet", ""]
    best_neg, best_pos = max(negative, key=negative.get), max(positive, key=positive.get)
    # the pair is picked on the means of every lambda: all of them must be there
    text = verdict(compare(runs, [(cells[best_neg], cells[best_pos])]), complete=complete,
                   partial="no verdict before all five seeds of every lambda")
    best = max(means, key=means.get)
    return [*lines, f"Highest mean: lambda = {best:+g}. Table 2's claim, the best negative "
            f"lambda ({best_neg:+g}) - the best positive ({best_pos:+g}), seed-paired: {text}",
            ""]


# the columns of the metric table: (heading, cell, tasks)
CELLS: list[tuple[str, Callable[[str], Key], tuple[str, ...]]] = [
    ("base", lambda t: cell_key(t, istar=False), TASKS),
    ("paper's, padding (B1)", lambda t: cell_key(t, pad=True), TASKS),
    ("paper's", lambda t: cell_key(t), TASKS),
    ("lambda = -0.1", lambda t: cell_key(t, lam=-0.1), TASKS),
    ("lambda = -0.03", lambda t: cell_key(t, lam=-0.03), TASKS),
    ("base at 3e-5 (B2)", lambda t: cell_key(t, lr=3e-5, istar=False), ("mrpc", "stsb")),
    ("paper's at 3e-5 (B2)", lambda t: cell_key(t, lr=3e-5), ("mrpc", "stsb")),
]


def metric_table(runs: dict[tuple[Key, int], list[Copy]]) -> list[str]:
    """The final dev metric of each cell's first copies, seeds 0-4 joined by ' / '."""
    lines = ["### Final dev metric, seeds 0 / 1 / 2 / 3 / 4 (first copies; - not run yet)", "",
             "| task | " + " | ".join(h for h, _, _ in CELLS) + " |",
             "|---|" + "---|" * len(CELLS)]
    for task in TASKS:
        cells = []
        for _, cell, tasks in CELLS:
            vals = [runs.get((cell(task), s)) if task in tasks else None for s in SEEDS]
            cells.append("" if not any(vals) else " / ".join(
                f"{v[0].value:.4f}" if v else "-" for v in vals))
        lines.append(f"| {LABEL[task]} ({_METRIC[task]}) | " + " | ".join(cells) + " |")
    return [*lines, ""]


_METRIC = {"sst2": "accuracy", "mrpc": "accuracy", "cola": "Matthews", "stsb": "Pearson"}


def repeats(runs: dict[tuple[Key, int], list[Copy]]) -> list[str]:
    """Each run that came back more than once: its metric in every copy."""
    lines = ["### Repeated runs (the same settings and seed, later GPU calls)", "",
             "| run | metric per copy (GPU run: value) | largest difference (points) |",
             "|---|---|---|"]
    for copies in sorted(runs.values(), key=lambda cs: cs[0].run.path.name):
        if len(copies) < 2:
            continue
        vals = [c.value for c in copies]
        lines.append(f"| {copies[0].run.path.name} | "
                     + ", ".join(f"{c.gpu_run}: {c.value:.4f}" for c in copies)
                     + f" | {100 * (max(vals) - min(vals)):.2f} |")
    return [*lines, ""]


def main(argv: list[str]) -> int:
    archives = (Path(argv[1]) if len(argv) > 1
                else Path(__file__).resolve().parents[1] / "gpu-runs")
    with tempfile.TemporaryDirectory() as tmp:
        runs = index(unpack(archives, Path(tmp)))
        n_copies = sum(len(c) for c in runs.values())
        print(f"{len(runs)} runs ({n_copies} copies) from {archives}\n")
        print("\n".join(metric_table(runs) + comparisons(runs) + b6(runs) + repeats(runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
