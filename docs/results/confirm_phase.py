"""Print the confirmatory step (``docs/results.md``, "Confirmatory plan (2026-11-28)" and its
amendment of 2026-11-29) from its committed runs, phase by phase, never pooled: the CPU phase
(MiniLM, float32 weights; ``specs/confirm-cpu.yaml`` and ``specs/confirm-entropy-cpu.yaml``,
runs under ``runs/``) and the GPU phase (the GPU bundle's MiniLM, float16-rounded weights;
``benchmarks/gpu/runs-confirm.yaml`` and ``runs-entropy.yaml``, runs as the GPU calls brought
them back, ``docs/gpu-runs-confirm/<n>/`` and ``docs/gpu-runs-entropy/<n>/``, a run that came
back twice read from its first copy), then MPNet-base's GPU runs
(``benchmarks/gpu/runs-mpnet.yaml``, seeds 0-2; ``docs/gpu-runs-mpnet/<n>/``), another model:
never pooled with the phases. RTE's GPU cells, at the learning rate its held-out runs chose
(``runs-confirm-rte.yaml``, once ``make_rte_confirm_spec.py`` has written it; kept in
``docs/gpu-runs-confirm-rte/<n>/``), are reported beside the GPU phase's primary tests, never in
the amendment's family of four.

Each phase's two primary comparisons, named in its specs before any of their runs started:

- I-STAR: Δ = the final dev metric of I-STAR at the paper's best BERT (λ, ζ) with the authors'
  padding minus that of the base run of the same seed, in points (x 100), on the phase's
  tasks (CPU: MRPC and STS-B; GPU: SST-2, MRPC, CoLA and STS-B), seeds 5-9;
- persistent entropy: Δ = the last-30% metric of the entropy loss with selected bars minus that
  of no regularizer, same seed, in points, on CoLA and MRPC, seeds 5-9, 10 epochs.

The primary test (:func:`isotropy.reporting.confirmatory.primary_test`: the exact stratified
sign-flip test of S = the mean over tasks of the task means) runs only once every pair of its
comparison is there: the plan counts every run. Until then the finished pairs are printed,
marked partial, with no p. Holm's family is the amendment's: the four tests of the two phases.
While a test of the family is not complete, a complete test's Holm-adjusted p is the range it
takes over every value the missing p's could have (:func:`holm_range`): its verdict is printed
when the whole range falls on one side of 0.05, and waits otherwise. Beside the verdict, the
one-sided 95% bounds on the mean effect in words, and for I-STAR the paper's own gain on the
same tasks (Table 1, BERT).

Under each comparison, its exploratory counterpart: the same comparison on the same tasks in
the CPU runs made before the plan (B1, phase A, phase B with B5; their protocols differ as each
line says), task means read from the committed runs, for reading the two side by side.

The specs' other cells are compared with the base run beside the primary tests, never in the
family: seed-paired differences, and once a comparison is complete its exact two-sided
sign-flip p, unadjusted. Each run's ``config.json`` is checked before its metric is read:
against the settings its cell names, and every setting against the point its spec expands to
(:func:`check_spec_point`; on the GPU the model by its folder's name, the path being the
machine's); the two runs of a pair must differ in the method only. A CPU run under
``runs/.pending/`` (a sweep still running, ``sync.sh``) is read where ``runs/`` lacks it.

Usage: python confirm_phase.py [--write] [RUNS_DIR [GPU_RUNS_PARENT]]
    (defaults: docs/results/runs beside this file, and docs/). With --write, the text replaces
    docs/results.md's part from its "### CPU phase" heading to the end, and the README's
    paragraph on the step (the count of finished CPU runs, each complete primary test) is
    written between its two marker lines, instead of being printed.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import review_verdicts as rv  # noqa: E402  (a script beside this one, not a package)
from gpu_phase import unpack  # noqa: E402
from review_verdicts import (  # noqa: E402
    LR,
    PAPER,
    PAPER_GAIN,
    Cell,
    Missing,
    check_same_but_method,
    metric,
)

from isotropy.io import write_text_atomic  # noqa: E402
from isotropy.reporting.claim_bounds import bound_words  # noqa: E402
from isotropy.reporting.claim_stats import holm  # noqa: E402
from isotropy.reporting.claim_summary import constant_predictor  # noqa: E402
from isotropy.reporting.claim_values import Values, tail_metric  # noqa: E402
from isotropy.reporting.confirmatory import (  # noqa: E402
    Primary,
    primary_test,
    primary_word,
    sign_flip_p,
)
from isotropy.reporting.packed import real_path  # noqa: E402
from isotropy.reporting.runs import Run, load_run  # noqa: E402

SEEDS = (5, 6, 7, 8, 9)  # fresh: no earlier run of the study used them
FAMILY = 4  # Holm's family (the amendment): the CPU phase's two tests and the GPU phase's two
HERE = Path(__file__).resolve().parent
SPECS = HERE / "specs"
GPU_SPECS = HERE.parents[1] / "benchmarks" / "gpu"
GPU_MODEL = "minilm-fp16"  # the GPU bundle's model folder, whatever path the machine gave it
MPNET_ROOT = "gpu-mpnet"  # MPNet-base on a GPU (the staged model), beside the step
GPU_MODELS = {MPNET_ROOT: "mpnet-fp16"}  # a sweep's model folder where it is not GPU_MODEL
MPNET_SEEDS = (0, 1, 2)  # at least three per cell over all windows (runs.yaml's seed 0 first)
MPNET_TASKS = ("rte", "mrpc", "stsb", "cola")
# settings a run records that its spec point does not decide: where it was written, whether
# it resumed, a token placeholder, and an object the point gives unserialised
NOT_COMPARED = frozenset({"output_dir", "logging_dir", "resume", "hub_token",
                          "accelerator_config"})
ISTAR_ROOT, ENTROPY_ROOT = "confirm-cpu", "confirm-entropy-cpu"
CONFIRMATORY = (ISTAR_ROOT, ENTROPY_ROOT)  # each the name of its spec and of its sweep
ISTAR_TASKS = ("mrpc", "stsb")  # the CPU phase's
ENTROPY_TASKS = ("cola", "mrpc")
RTE_ROOT = "confirm-rte"  # RTE's GPU cells, beside the GPU phase's tests (not in the family)
RTE_PAPER = (-1.0, 0.8)  # the I-STAR paper's best BERT (λ, ζ) on RTE (make_rte_confirm_spec.py)
# the GPU phase: per sweep, its spec and the folder its calls' archives are kept in
GPU_SWEEPS = {ISTAR_ROOT: ("runs-confirm.yaml", "gpu-runs-confirm"),
              ENTROPY_ROOT: ("runs-entropy.yaml", "gpu-runs-entropy"),
              RTE_ROOT: ("runs-confirm-rte.yaml", "gpu-runs-confirm-rte"),
              MPNET_ROOT: ("runs-mpnet.yaml", "gpu-runs-mpnet")}


def gpu_model(root: str) -> str:
    """The model folder's name a GPU sweep's runs record (the path is the machine's)."""
    return GPU_MODELS.get(root, GPU_MODEL)


def on_gpu(cell: Cell) -> Cell:
    """``cell`` with its model as a GPU run records it: a path ending in its sweep's folder."""
    return Cell(cell.root, tuple((k, f"/gpu/{gpu_model(cell.root)}" if k == "model" else v)
                                 for k, v in cell.settings))
LABEL = {**rv.LABEL, "rte": "RTE"}


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


def rte_rate() -> float | None:
    """RTE's learning rate as ``runs-confirm-rte.yaml`` names it (``make_rte_confirm_spec.py``
    writes it from the held-out runs of ``runs-rte-lr.yaml``); ``None`` before it is written."""
    if not (GPU_SPECS / GPU_SWEEPS[RTE_ROOT][0]).is_file():
        return None
    rates = {float(p.settings["learning_rate"]) for p in spec_points(RTE_ROOT, True).values()}
    if len(rates) != 1:
        raise ValueError(f"{GPU_SWEEPS[RTE_ROOT][0]} names {len(rates)} learning rates, not one")
    return rates.pop()


def rte_cell(lam: float | None = None, *, method: str = "istar") -> Cell:
    """One of RTE's GPU cells at its chosen rate: I-STAR with padding at the paper's ζ (λ the
    paper's unless given), ``method`` ``cosreg`` (λ = 1, padding) or ``none`` (the base run)."""
    rate = rte_rate()
    if rate is None:
        raise Missing("RTE's learning rate is not chosen yet")
    lam0, zeta = RTE_PAPER
    reg = {"none": (("regularizer", ["none"]),),
           "cosreg": (("regularizer", ["cosreg"]), ("cosreg_tuning", 1.0),
                      ("include_padding", True)),
           "istar": (("regularizer", ["istar"]), ("tuning", lam0 if lam is None else lam),
                     ("zeta", zeta), ("include_padding", True))}[method]
    return Cell(RTE_ROOT, (*reg, ("learning_rate", rate), ("full_determinism", True),
                           ("model", "minilm")))


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
def spec_points(spec: str, gpu: bool = False) -> dict[str, Any]:
    """The points of a confirmatory spec by run name, as ``isotropy sweep`` expands them: the
    CPU's ``specs/<spec>.yaml``, or with ``gpu`` the GPU's spec of that sweep
    (:data:`GPU_SWEEPS`) with its model placeholder as a path ending in its model folder
    (:func:`gpu_model`); MPNet's with :data:`MPNET_SEEDS`, as ``run.sh --seeds`` runs them."""
    from isotropy.sweeps.points import expand
    from isotropy.sweeps.spec import load_spec

    if not gpu:
        return {p.name: p for p in expand(load_spec(SPECS / f"{spec}.yaml"))}
    text = (GPU_SPECS / GPU_SWEEPS[spec][0]).read_text(encoding="utf-8")
    if spec == MPNET_ROOT:  # its other seeds run as run.sh --seeds writes them into the spec
        text = re.sub(r"(?m)^seeds: .*$", f"seeds: {list(MPNET_SEEDS)}", text)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.yaml"
        path.write_text(text.replace("@MODEL@", f"/gpu/{gpu_model(spec)}"), encoding="utf-8")
        return {p.name: p for p in expand(load_spec(path))}


def _json(value: Any) -> Any:
    """A setting as ``config.json`` records it."""
    if isinstance(value, enum.Enum):
        value = value.value
    return json.loads(json.dumps(value, default=str))


def check_spec_point(run: Run, spec: str, gpu: bool = False) -> dict[str, Any]:
    """``ValueError`` unless every setting the run recorded is the one its spec's point gives
    (:data:`NOT_COMPARED` aside; on the GPU the model by its folder's name): the same schedule,
    data, model and method, not only the settings its cell names. Returns the run's settings
    (``isotropy`` and ``training`` merged)."""
    from isotropy.training.settings import args_from_dict

    path = real_path(Path(run.path))
    config = json.loads((path / "config.json").read_text())
    point = spec_points(spec, gpu).get(path.name)
    if point is None:
        raise ValueError(f"{run.path}: not a run of the {'GPU' if gpu else 'CPU'} spec {spec}")
    wrong = {}
    for section, args in zip(("isotropy", "training"), args_from_dict(point.settings),
                             strict=True):
        saved = config["settings"][section]
        for f in dataclasses.fields(args):
            if f.name in saved and f.name not in NOT_COMPARED:
                want, got = _json(getattr(args, f.name)), saved[f.name]
                if gpu and f.name == "model":
                    want, got = gpu_model(spec), Path(str(got)).name
                elif gpu and f.name == "dataloader_pin_memory":
                    want = True  # Hugging Face's default where CUDA is (this machine has none)
                if not rv._same(got, want):
                    wrong[f.name] = (got, want)
    if wrong:
        raise ValueError(f"{run.path}: settings differ from its spec's point (got, wanted): "
                         f"{wrong}")
    return {**config["settings"]["isotropy"], **config["settings"]["training"]}


Lookup = Callable[[str, Cell, int], tuple[float, Run]]  # (task, cell, seed) -> (metric, run)


def cpu_lookup(runs: Path, check: bool = True) -> Lookup:
    """The CPU runs under ``runs`` (``review_verdicts.metric``), a confirmatory run checked
    against its spec's point unless ``check`` is false (the exploratory runs)."""
    def look(task: str, cell: Cell, seed: int) -> tuple[float, Run]:
        value, run = metric(runs, task, cell, seed)
        if check and cell.root in CONFIRMATORY:
            check_spec_point(run, cell.root)
        return value, run
    return look


class GpuLookup:
    """The GPU's runs: every call's archives of each GPU sweep unpacked once into a
    temporary folder (kept while the object lives), a run that came back twice from its first
    copy (the lowest call number)."""

    def __init__(self, parent: Path) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.runs: dict[str, dict[str, Path]] = {}
        for root, (_, folder) in GPU_SWEEPS.items():
            found: dict[str, Path] = {}
            calls = parent / folder
            unpacked = unpack(calls, Path(self._tmp.name) / root) if calls.is_dir() else []
            for _, run in unpacked:  # call numbers ascending: the first copy stays
                if any((run / f).is_file() for f in ("results.json", "results.json.gz")):
                    found.setdefault(run.name, run)
            self.runs[root] = found

    def __call__(self, task: str, cell: Cell, seed: int) -> tuple[float, Run]:
        name = rv.run_name(task, on_gpu(cell), seed)
        path = self.runs.get(cell.root, {}).get(name)
        if path is None:
            raise Missing(f"GPU {cell.root}/{name}")
        run = load_run(path)
        merged = check_spec_point(run, cell.root, gpu=True)  # the model by its folder's name
        wrong = {k: (merged.get(k), v) for k, v in cell.settings
                 if k != "model" and not rv._same(merged.get(k), v)}
        if wrong:
            raise ValueError(f"{path}: settings differ from its cell's (got, wanted): {wrong}")
        value = run.value(run.main_metric)
        if value is None:
            raise ValueError(f"{path}: no final eval_{run.main_metric}")
        return value, run


def pairs(look: Lookup | Path, c: Comparison, seeds: Sequence[int] = SEEDS) -> Pairs:
    """The comparison's seed-paired differences as far as its runs are there (``look``: how
    runs are found, or the CPU runs' folder; a run with other settings than its cell's and
    its spec point's raises ``ValueError``)."""
    if isinstance(look, Path):
        look = cpu_lookup(look)
    d: dict[str, dict[int, float | None]] = {}
    constant: dict[str, bool] = {}
    for task in c.tasks:
        cell, ref = c.cells(task)
        d[task], cell_runs = {}, []
        for seed in seeds:
            got = []
            for which in (cell, ref):  # both read: a wrong run is refused even alone
                try:
                    value, run = look(task, which, seed)
                except Missing:
                    continue
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


@dataclass(frozen=True)
class Phase:
    """One phase of the step: its name, heading, and the tasks of its two specs."""

    name: str
    heading: str
    istar_tasks: tuple[str, ...]
    entropy_tasks: tuple[str, ...]
    where: str  # where its runs are kept, in words


CPU = Phase("CPU", "CPU phase: MiniLM-L6-H384, float32 weights, fresh seeds 5-9", ISTAR_TASKS,
            ENTROPY_TASKS, "`docs/results/runs/` (`.pending/` while a sweep runs)")
GPU = Phase("GPU", "GPU phase: the GPU bundle's MiniLM, float16-rounded weights, fresh seeds 5-9",
            ("sst2", "mrpc", "cola", "stsb"), ENTROPY_TASKS,
            "`docs/gpu-runs-confirm/`, `docs/gpu-runs-entropy/` and `docs/gpu-runs-confirm-rte/`")
PHASES = (CPU, GPU)


def primary(ph: Phase) -> tuple[Comparison, Comparison]:
    """A phase's two primary comparisons: I-STAR's and persistent entropy's."""
    return (
        Comparison("I-STAR: the paper's (λ, ζ) with padding minus the base run",
                   lambda t: (istar_cell(t), istar_base(t)), ph.istar_tasks, final_metric,
                   "the final dev metric"),
        Comparison("Persistent entropy: selected bars minus no regularizer",
                   lambda t: (entropy_cell(True), entropy_cell(None)), ph.entropy_tasks,
                   last_30, "the dev metric averaged over the last 30% of training"))


def secondary(ph: Phase) -> tuple[Comparison, ...]:
    """A phase's other comparisons, reported beside the family."""
    final, tail = "the final dev metric", "the last-30% dev metric"
    return (
        Comparison("CosReg (padding) minus the base run (C7: no gain)",
                   lambda t: (cosreg_cell(t), istar_base(t)), ph.istar_tasks, final_metric, final),
        Comparison("I-STAR λ = +1 (padding) minus the base run (C6: hurts)",
                   lambda t: (istar_cell(t, 1.0), istar_base(t)), ph.istar_tasks, final_metric,
                   final),
        Comparison("I-STAR λ = −0.3 (padding) minus the base run",
                   lambda t: (istar_cell(t, -0.3), istar_base(t)), ph.istar_tasks,
                   final_metric, final),
        Comparison("Persistent entropy, all bars minus no regularizer (P4: on par)",
                   lambda t: (entropy_cell(False), entropy_cell(None)), ph.entropy_tasks,
                   last_30, tail),
        Comparison("Persistent entropy, selected minus all bars (P3)",
                   lambda t: (entropy_cell(True), entropy_cell(False)), ph.entropy_tasks,
                   last_30, tail))


def mpnet_cell(task: str, lam: float | None = None, *, base: bool = False) -> Cell:
    """MPNet's GPU cells (``runs-mpnet.yaml``): the base run, or I-STAR with padding at the
    paper's ζ, λ the paper's unless given, at 3e-5 with the mean-pooling head."""
    lam0, zeta = RTE_PAPER if task == "rte" else PAPER[task]
    reg = (("regularizer", ["none"]),) if base else (
        ("regularizer", ["istar"]), ("tuning", lam0 if lam is None else lam), ("zeta", zeta),
        ("include_padding", True))
    return Cell(MPNET_ROOT, (*reg, ("learning_rate", 3e-5), ("classifier_pooling", "mean"),
                             ("full_determinism", True), ("model", "mpnet")))


# MPNet's three GPU cells: (row label, title against the base run, task -> cell); the base
# run first
MPNET_CELLS: tuple[tuple[str, str, Callable[[str], Cell]], ...] = (
    ("base run", "", lambda t: mpnet_cell(t, base=True)),
    ("I-STAR, paper's (λ, ζ), padding", "I-STAR, the paper's (λ, ζ), padding", mpnet_cell),
    ("I-STAR λ = −0.1, padding", "I-STAR λ = −0.1, padding", lambda t: mpnet_cell(t, -0.1)))

MPNET_COMPARISONS = tuple(
    Comparison(f"MPNet: {title} minus the base run", lambda t, c=cell: (
        c(t), MPNET_CELLS[0][2](t)), MPNET_TASKS, final_metric, "the final dev metric")
    for _, title, cell in MPNET_CELLS[1:])


def mpnet_section(runs: Path, look: Lookup) -> list[str]:
    """MPNet-base's GPU runs (another model: beside the step, never pooled with it, and with
    too few seeds for the plan's test)."""
    found = 0
    rows = []
    for label, _, cell in MPNET_CELLS:
        for task in MPNET_TASKS:
            values = []
            for seed in MPNET_SEEDS:
                try:
                    values.append(f"{look(task, cell(task), seed)[0]:.4f}")
                    found += 1
                except Missing:
                    values.append("–")
            rows.append(f"| {LABEL[task]} | {label} | " + " | ".join(values) + " |")
    out = ["### MPNet-base on a GPU (`benchmarks/gpu/runs-mpnet.yaml`, beside the step)", "",
           "all-mpnet-base-v2 (12 × 768) with float16-rounded weights, loaded as float32, the "
           "mean-pooling head, 3e-5: another model, so never pooled with the phases above, and "
           "too few seeds for the plan's test, as the plan says. The final dev metric.", ""]
    total = len(MPNET_CELLS) * len(MPNET_TASKS) * len(MPNET_SEEDS)
    if found == 0:
        return [*out, f"No run has come back yet (`docs/gpu-runs-mpnet/`; 0 of {total}).", ""]
    head = "| task | cell | " + " | ".join(f"seed {s}" for s in MPNET_SEEDS) + " |"
    return [*out, f"Runs finished: {found} of {total}.", "", head,
            "|---|---|" + "---|" * len(MPNET_SEEDS), *rows, "",
            *secondary_section(look, MPNET_COMPARISONS, runs, MPNET_SEEDS, tested=False)]


# RTE's five GPU cells: (row label, title against the base run, the cell); the base run first
RTE_CELLS: tuple[tuple[str, str, Callable[[], Cell]], ...] = (
    ("base run", "", lambda: rte_cell(method="none")),
    ("I-STAR, paper's (λ, ζ), padding", "I-STAR, the paper's (λ, ζ), padding", rte_cell),
    ("CosReg λ = 1, padding", "CosReg (padding)", lambda: rte_cell(method="cosreg")),
    ("I-STAR λ = +1, padding", "I-STAR λ = +1 (padding)", lambda: rte_cell(1.0)),
    ("I-STAR λ = −0.3, padding", "I-STAR λ = −0.3 (padding)", lambda: rte_cell(-0.3)))


def rte_comparisons() -> tuple[Comparison, ...]:
    """RTE's GPU cells against its base run (outside the family: the plan's amendment)."""
    (_, _, base), *others = RTE_CELLS
    return tuple(Comparison(f"RTE: {title} minus the base run", lambda t, c=cell: (c(), base()),
                            ("rte",), final_metric, "the final dev metric")
                 for _, title, cell in others)


def rte_section(look: Lookup, runs: Path) -> list[str]:
    """RTE's GPU cells at the rate its held-out runs chose, beside the family: the rate, with
    the line of the spec's header that ``make_rte_confirm_spec.py`` wrote its choice on."""
    head = ["#### RTE at its chosen learning rate (`runs-confirm-rte.yaml`, not in the family)",
            ""]
    rate = rte_rate()
    if rate is None:
        return [*head, "Its learning rate is not chosen yet: `runs-rte-lr.yaml`'s held-out runs "
                "come first, then `benchmarks/gpu/make_rte_confirm_spec.py` writes the spec "
                "(`docs/gpu.md`, \"What the next GPU calls run\", item 3).", ""]
    spec = (GPU_SPECS / GPU_SWEEPS[RTE_ROOT][0]).read_text(encoding="utf-8")
    header = " ".join(line.lstrip("# ").strip() for line in spec.splitlines()
                      if line.startswith("#"))
    chosen = re.search(r"Mean held-out accuracy per rate: [^;]*; RTE's rate: [^.]*\.", header)
    why = (f" The spec's header: \"{chosen.group(0)}\"" if chosen else
           " The spec's header does not say how it was chosen.")
    return [*head, f"Learning rate {rate:g}, as the spec names it.{why}", "",
            *secondary_section(look, rte_comparisons(), runs)]


PRIMARY, SECONDARY = primary(CPU), secondary(CPU)
PAPER_EFFECT = {PRIMARY[0].title: PAPER_GAIN}  # the paper's own Δ per task, where it gives one


def phase_b(select: bool | None) -> Cell:
    """Phase B's cell (3 epochs, seeds 0-4 with B5; :func:`_entropy`)."""
    return _entropy("entropy", select, ("num_train_epochs", 3.0))


@dataclass(frozen=True)
class Counterpart:
    """The exploratory runs that made a comparison before the plan, on the same tasks."""

    what: str  # which runs, and how their protocol differs
    comparison: Comparison
    seeds: tuple[int, ...]


def _old(title: str, cells: Callable[[str], tuple[Cell, Cell]], read: Read) -> Comparison:
    return Comparison(title, cells, (), read, "")  # its tasks: the comparison's, at use


COUNTERPART = {
    PRIMARY[0].title: Counterpart(
        "B1 (the review phase's paper setting with padding against phase A's base run, seeds "
        "0-2, CPU, without deterministic kernels)",
        _old("B1", lambda t: (rv.istar(t, "review", pad=True), rv.base(t, "istar")),
             final_metric), (0, 1, 2)),
    PRIMARY[1].title: Counterpart(
        "phase B with B5 (3 epochs instead of 10, seeds 0-4, CPU)",
        _old("P2", lambda t: (phase_b(True), phase_b(None)), last_30), (0, 1, 2, 3, 4)),
    SECONDARY[0].title: Counterpart(
        "phase A's CosReg, without padding, seeds 0-2, CPU",
        _old("C7", lambda t: (rv.cosreg(t), rv.base(t, "istar")), final_metric), (0, 1, 2)),
    SECONDARY[1].title: Counterpart(
        "phase A's λ = +1, without padding, seeds 0-2, CPU",
        _old("C6", lambda t: (rv.istar(t, "istar", 1.0), rv.base(t, "istar")), final_metric),
        (0, 1, 2)),
    SECONDARY[2].title: Counterpart(
        "phase A's λ = −0.3, without padding, seeds 0-2, CPU",
        _old("-0.3", lambda t: (rv.istar(t, "istar", -0.3), rv.base(t, "istar")),
             final_metric), (0, 1, 2)),
    SECONDARY[3].title: Counterpart(
        "phase B with B5 (3 epochs, seeds 0-4, CPU)",
        _old("P4", lambda t: (phase_b(False), phase_b(None)), last_30), (0, 1, 2, 3, 4)),
    SECONDARY[4].title: Counterpart(
        "phase B with B5 (3 epochs, seeds 0-4, CPU)",
        _old("P3", lambda t: (phase_b(True), phase_b(False)), last_30), (0, 1, 2, 3, 4)),
}


def counterpart_pairs(runs: Path, c: Comparison) -> Pairs | None:
    """The exploratory counterpart's pairs on ``c``'s tasks, read from the committed CPU runs;
    ``None`` where it has none (RTE's cells: no earlier run at a rate chosen this way)."""
    old = COUNTERPART.get(c.title)
    if old is None:
        return None
    same = dataclasses.replace(old.comparison, tasks=c.tasks)
    return pairs(cpu_lookup(runs, check=False), same, old.seeds)


def mean_of_task_means(groups: Sequence[Sequence[float]]) -> float:
    """S: the mean over tasks of each task's mean Δ."""
    return sum(sum(g) / len(g) for g in groups) / len(groups)


def counterpart_text(runs: Path, c: Comparison) -> str:
    """The exploratory counterpart's task means (points) on ``c``'s tasks and their mean over
    the tasks (:func:`counterpart_pairs`); said so where its runs are not there, and where it
    has none."""
    p = counterpart_pairs(runs, c)
    if p is None:
        return "No exploratory counterpart."
    old = COUNTERPART[c.title]
    groups = p.groups()
    if not p.complete():
        there, total = p.count()
        return f"Exploratory counterpart, {old.what}: {there} of {total} pairs committed."
    means = ", ".join(f"{LABEL[t]} {sum(g) / len(g):+.2f}" for t, g in zip(p.d, groups,
                                                                           strict=True))
    return (f"Exploratory counterpart (seen before the plan), {old.what}: task means {means} "
            f"points; S = {mean_of_task_means(groups):+.2f}.")


def _paper(c: Comparison) -> float | None:
    gain = PAPER_EFFECT.get(c.title)
    return None if gain is None else sum(gain[t] for t in c.tasks) / len(c.tasks)


def _test_lines(t: Primary, total: int, low: float, high: float) -> list[str]:
    adjusted = (f"{low:.3g}" if low == high else
                f"between {low:.3g} and {high:.3g} until the family's other tests are complete")
    bounds = ("no bounds (a task without a spread)" if t.lower is None else
              f"one-sided 95% bounds {t.lower:+.2f} and {t.upper:+.2f}: "
              f"{bound_words(t.lower, t.upper)}")
    paper = "" if t.paper is None else (
        f"; the paper's gain on these tasks, {t.paper:+.2f}, is "
        + ("excluded" if t.upper is not None and t.upper < t.paper else "not excluded"))
    return [f"All {total} pairs: S = {t.statistic:+.2f} points, exact stratified sign-flip "
            f"two-sided p = {t.p:.4g}, Holm-adjusted (the amendment's family of four) "
            f"{adjusted}; {bounds}{paper}. **{primary_word(t, low, high)}**", ""]


def _comparison_head(c: Comparison, p: Pairs, runs: Path, seeds: Sequence[int] = SEEDS
                     ) -> list[str]:
    return [f"##### {c.title} (Δ in points, {c.what})", "", *table(p, seeds), "",
            counterpart_text(runs, c), ""]


def secondary_section(look: Lookup, comparisons: Sequence[Comparison], runs: Path,
                      seeds: Sequence[int] = SEEDS, tested: bool = True) -> list[str]:
    """Each comparison's pairs, and once complete its exact sign-flip p (unadjusted), unless
    not ``tested`` (MPNet: too few seeds for the plan's test): then S alone."""
    out = []
    for c in comparisons:
        p = pairs(look, c, seeds)
        there, total = p.count()
        out += _comparison_head(c, p, runs, seeds)
        if p.complete() and not tested:
            groups = p.groups()
            s = sum(sum(g) / len(g) for g in groups) / len(groups)
            out += [f"All {total} pairs: S = {s:+.2f} points (the mean of the task means); no "
                    "test: too few seeds for the plan's.", ""]
        elif p.complete():
            s, _, _, two = sign_flip_p(p.groups())
            out += [f"All {total} pairs: S = {s:+.2f} points, exact stratified sign-flip "
                    f"two-sided p = {two:.4g} (unadjusted, not in the plan's family).", ""]
        else:
            out += [f"Partial: {there} of {total} pairs.", ""]
    return out


GROWTH_ROUTES = (("from step 0 (evaluation set)", Values().growth_from_start),
                 ("from the first training log", Values().growth))


def growth_section(look: Lookup, ph: Phase, runs: Path, seeds: Sequence[int] = SEEDS
                   ) -> list[str]:
    """P1 on the entropy spec's runs without a regularizer: the growth of the top-1 share of
    the [CLS] spectrum, raw and centred, read from the pre-trained model (the evaluation set,
    last 30% of evaluations minus step 0; the addendum of 2026-11-30) and, as the exploratory
    runs read it, from the first training log; per seed, and once every run is there the exact
    two-sided sign-flip p of the mean growth (unadjusted, not in the family)."""
    out = ["##### P1: growth of the top-1 [CLS] share without a regularizer (last 30% minus "
           "the start)", "",
           "| task | spectrum | start | " + " | ".join(f"seed {s}" for s in seeds)
           + " | task mean (runs) |", "|---|---|---|" + "---|" * (len(seeds) + 1)]
    found: dict[tuple[str, str], list[list[float]]] = {}
    total = 0
    for task in ph.entropy_tasks:
        got: dict[int, Run] = {}
        for seed in seeds:
            try:
                got[seed] = look(task, entropy_cell(None), seed)[1]
            except Missing:
                continue
        total += len(seeds)
        for kind in ("raw", "centred"):
            for route, read in GROWTH_ROUTES:
                values = {s: read(r, kind) for s, r in got.items()}
                there = [v for v in values.values() if v is not None]
                found.setdefault((kind, route), []).append(there)
                mean = f"{sum(there) / len(there):+.3f} ({len(there)})" if there else "– (0)"
                out.append(f"| {LABEL[task]} | {kind} | {route} | " + " | ".join(
                    "–" if values.get(s) is None else f"{values[s]:+.3f}" for s in seeds)
                    + f" | {mean} |")
    out.append("")
    for (kind, route), groups in found.items():
        n = sum(map(len, groups))
        if n < total:
            out.append(f"- {kind.capitalize()}, {route}: {n} of {total} runs.")
            continue
        s, _, _, two = sign_flip_p(groups)
        up = sum(v > 0 for g in groups for v in g)
        out.append(f"- {kind.capitalize()}, {route}: grows in {up} of {n} runs; mean of the "
                   f"task means {s:+.3f}, exact stratified sign-flip two-sided p = {two:.4g} "
                   "(unadjusted, not in the family).")
    return [*out, "", growth_counterpart(runs, ph.entropy_tasks), ""]


def growth_counterpart(runs: Path, tasks: Sequence[str]) -> str:
    """P1's growth from the first training log in phase B's runs without a regularizer (3
    epochs, seeds 0-4 with B5, no evaluation at step 0): task means, raw and centred."""
    look = cpu_lookup(runs, check=False)
    parts = []
    for kind in ("raw", "centred"):
        means = []
        for task in tasks:
            try:
                g = [Values().growth(look(task, phase_b(None), seed)[1], kind)
                     for seed in range(5)]
            except Missing:
                return "Exploratory counterpart (phase B with B5): its runs are not committed."
            there = [x for x in g if x is not None]
            means.append(f"{LABEL[task]} {sum(there) / len(there):+.3f}" if there else
                         f"{LABEL[task]} –")
        parts.append(f"{kind} {', '.join(means)}")
    return ("Exploratory counterpart (seen before the plan), phase B with B5 (3 epochs, seeds "
            "0-4, CPU, not evaluated at step 0), growth from the first training log, task "
            f"means: {'; '.join(parts)}.")


def cells(ph: Phase) -> tuple[tuple[str, str, Callable[[str], Cell], tuple[str, ...], Read], ...]:
    """Every cell of a phase's specs: (sweep, label, task -> cell, tasks, value read); on the
    GPU, RTE's once its rate is chosen."""
    rte = () if ph is not GPU or rte_rate() is None else tuple(
        (RTE_ROOT, label, lambda t, c=cell: c(), ("rte",), final_metric)
        for label, _, cell in RTE_CELLS)
    return (
        *((ISTAR_ROOT, label, cell, ph.istar_tasks, final_metric) for label, cell in (
            ("base run", istar_base), ("I-STAR, paper's (λ, ζ), padding", istar_cell),
            ("CosReg λ = 1, padding", cosreg_cell),
            ("I-STAR λ = +1, padding", lambda t: istar_cell(t, 1.0)),
            ("I-STAR λ = −0.3, padding", lambda t: istar_cell(t, -0.3)))),
        *((ENTROPY_ROOT, label, lambda t, s=select: entropy_cell(s), ph.entropy_tasks, last_30)
          for label, select in (("no regularizer", None), ("entropy, selected bars", True),
                                ("entropy, all bars", False))),
        *rte)


CELLS = cells(CPU)


def runs_section(look: Lookup | Path, ph: Phase = CPU, seeds: Sequence[int] = SEEDS
                 ) -> tuple[list[str], int]:
    """Each run's value (I-STAR's spec: the final dev metric; the entropy spec: the last-30%
    metric), per cell and seed, and how many runs of each spec are there; and that count."""
    if isinstance(look, Path):
        look = cpu_lookup(look)

    def name(spec: str) -> str:  # a GPU sweep by its spec's file
        return GPU_SWEEPS[spec][0] if ph is GPU else spec

    out = ["| sweep | task | cell | " + " | ".join(f"seed {s}" for s in seeds) + " |",
           "|---|---|---|" + "---|" * len(seeds)]
    done: dict[str, list[int]] = {}
    uncounted = []
    for spec, label, cell, tasks, read in cells(ph):
        for task in tasks:
            values = []
            for seed in seeds:
                try:
                    value, run = look(task, cell(task), seed)
                except Missing:
                    values.append("–")
                    continue
                values.append(f"{read(value, run):.4f}")
                if run.uncounted_evaluations:
                    steps = ", ".join(f"{t:g}" for t in run.uncounted_evaluations)
                    uncounted.append(f"{Path(run.path).name} (step {steps})")
            n = done.setdefault(spec, [0, 0])
            n[0] += sum(v != "–" for v in values)
            n[1] += len(values)
            out.append(f"| {name(spec)} | {LABEL[task]} | {label} | " + " | ".join(values)
                       + " |")
    counts = "; ".join(f"`{name(spec)}`: {a} of {b}" for spec, (a, b) in done.items())
    if uncounted:
        out += ["", "Evaluations not counted (a resume's evaluation at its checkpoint's step, "
                "which an uninterrupted run does not make; the addendum of 2026-11-30): "
                + "; ".join(uncounted) + "."]
    return [f"Runs finished: {counts}.", "", *out], sum(a for a, _ in done.values())


@dataclass
class Family:
    """The amendment's family: each phase's primary comparisons with their pairs (``found``,
    by (phase, title)), the complete ones' tests and their Holm-adjusted ranges."""

    found: dict[tuple[str, str], tuple[Comparison, Pairs]]
    tests: dict[tuple[str, str], Primary]
    ranges: dict[tuple[str, str], tuple[float, float]]


def family(looks: dict[str, Lookup | Path]) -> Family:
    """The primary tests of every phase (``looks``: phase name -> its runs)."""
    found = {(ph.name, c.title): (c, pairs(looks[ph.name], c)) for ph in PHASES
             for c in primary(ph)}
    tests = {key: primary_test(c.title, p.groups(), _paper(c))
             for key, (c, p) in found.items() if p.complete()}
    ranges = dict(zip(tests, holm_range([t.p for t in tests.values()], FAMILY - len(tests)),
                      strict=True))
    return Family(found, tests, ranges)


def _looks(runs: Path, gpu_parent: Path | None) -> dict[str, Lookup | Path]:
    return {CPU.name: cpu_lookup(runs),
            GPU.name: GpuLookup(HERE.parent if gpu_parent is None else gpu_parent)}


def report(runs: Path, gpu_parent: Path | None = None, fam: Family | None = None) -> list[str]:
    """Both phases: the runs, the primary tests in one Holm family (``fam``, where the caller
    has it already: :func:`family` of the same runs), the other comparisons."""
    looks = _looks(runs, gpu_parent)
    gpu = looks[GPU.name]
    fam = family(looks) if fam is None else fam
    found, tests, ranges = fam.found, fam.tests, fam.ranges
    out = []
    for ph in PHASES:
        table_lines, n = runs_section(looks[ph.name], ph)
        out += [f"### {ph.heading}", ""]
        if n == 0 and ph is not CPU:
            out += [f"No run of this phase has come back yet ({ph.where}): its two tests count "
                    "as missing in the family.", ""]
            continue
        out += ["#### The runs", "", *table_lines, "",
                "#### Primary tests (in the amendment's family of four)", ""]
        for c in primary(ph):
            _, p = found[ph.name, c.title]
            there, total = p.count()
            out += _comparison_head(c, p, runs)
            t = tests.get((ph.name, c.title))
            if t is None:
                out += [f"Partial: {there} of {total} pairs. No test before all {total} are "
                        "there (the plan counts every run).", ""]
            else:
                out += _test_lines(t, total, *ranges[ph.name, c.title])
        out += ["#### Beside them (not in the family)", "",
                *secondary_section(looks[ph.name], secondary(ph), runs),
                *growth_section(looks[ph.name], ph, runs),
                *(rte_section(looks[ph.name], runs) if ph is GPU else [])]
    return [*out, *mpnet_section(runs, gpu)]


SECTION = "### CPU phase: MiniLM-L6-H384"  # where docs/results.md's printed part begins
# the README's findings paragraph on the step, between these two lines, is written by --write
README_START = "<!-- the confirmatory step: written by docs/results/confirm_phase.py --write -->"
README_END = "<!-- end of the confirmatory step -->"
README_WIDTH = 100
SHORT = {"I-STAR": "I-STAR (the paper's (λ, ζ) with padding minus the base run",
         "Persistent entropy": "persistent entropy (selected bars minus no regularizer"}


def _test_sentence(phase: str, c: Comparison, t: Primary, low: float, high: float,
                   before: float | None = None) -> str:
    """One complete primary test, for the README: S, p, the verdict and the gain bound; then
    S of its exploratory counterpart (``before``), where it has one."""
    method = SHORT[c.title.split(":")[0]]
    tasks = " and ".join(LABEL[x] for x in c.tasks)
    gain = "" if t.upper is None else "; " + bound_words(t.lower, t.upper).split(";")[0]
    paper = "" if t.paper is None else f"; the paper's gain on these tasks: {t.paper:+.2f}"
    old = "" if before is None else (
        f" The exploratory runs of the same comparison (seeds "
        f"{min(COUNTERPART[c.title].seeds)}-{max(COUNTERPART[c.title].seeds)}) gave "
        f"S = {before:+.2f}.")
    return (f"The {phase} phase's {method}, {tasks}): S = {t.statistic:+.2f} points, exact "
            f"two-sided p = {t.p:.3g}, {primary_word(t, low, high)}{gain}{paper}.{old}")


def readme_paragraph(fam: Family, done: int, total: int, runs: Path | None = None) -> str:
    """The README's findings paragraph on the step: the count of CPU runs, then each complete
    primary test in a sentence (:func:`_test_sentence`; with ``runs``, the committed CPU runs,
    its exploratory counterpart's S beside it), wrapped as the README is."""
    import textwrap

    def before(c: Comparison) -> float | None:
        p = None if runs is None else counterpart_pairs(runs, c)
        return mean_of_task_means(p.groups()) if p is not None and p.complete() else None

    sentences = [_test_sentence(key[0], fam.found[key][0], t, *fam.ranges[key],
                                before(fam.found[key][0]))
                 for key, t in fam.tests.items()]
    if not sentences:
        sentences = ["No primary test is complete yet, so no verdict."]
    text = ("Confirmatory runs under a plan frozen before they started and amended before any "
            "comparison was complete (fresh seeds 5-9, the authors' padding, the entropy paper's "
            f"10 epochs) are under way: {done} of {total} CPU runs so far. "
            + " ".join(sentences)
            + " [The runs](docs/results.md#the-confirmatory-step-runs-as-they-finish).")
    return textwrap.fill(text, width=README_WIDTH, break_on_hyphens=False,
                         break_long_words=False)


def cpu_runs_done(text: str) -> tuple[int, int]:
    """(finished, all) CPU runs of the confirmatory specs, from :func:`report`'s text."""
    counts = re.findall(r"`confirm-[a-z-]+`: (\d+) of (\d+)", text.split("### GPU phase")[0])
    return sum(int(a) for a, _ in counts), sum(int(b) for _, b in counts)


def readme_part(text: str) -> tuple[int, int]:
    """Where the paragraph of :func:`readme_paragraph` lies in the README's ``text`` (the lines
    between :data:`README_START` and :data:`README_END`); ``ValueError`` without them."""
    start, end = text.find(README_START + "\n"), text.find("\n" + README_END)
    if start < 0 or end < start:
        raise ValueError(f"no lines '{README_START}' ... '{README_END}'")
    return start + len(README_START) + 1, end


def write_docs(text: str, results_md: Path, readme: Path, paragraph: str) -> None:
    """Put :func:`report`'s ``text`` in place in ``results_md`` (from :data:`SECTION` to the
    end) and :func:`readme_paragraph`'s ``paragraph`` in ``readme`` (:func:`readme_part`); neither
    file is written unless both have their places, and each is written whole (renamed into
    place)."""
    doc = results_md.read_text(encoding="utf-8")
    if SECTION not in doc:
        raise ValueError(f"{results_md}: no line starting '{SECTION}'")
    head = readme.read_text(encoding="utf-8")
    try:
        a, b = readme_part(head)
    except ValueError as err:
        raise ValueError(f"{readme}: {err}") from None
    # each written whole (a temporary file renamed into place), the README once results.md is
    write_text_atomic(results_md, doc[:doc.index(SECTION)] + text + "\n")
    write_text_atomic(readme, head[:a] + paragraph + head[b:])


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    write = "--write" in args
    args = [a for a in args if a != "--write"]
    runs = Path(args[0]) if args else HERE / "runs"
    gpu_parent = Path(args[1]) if len(args) > 1 else None
    fam = family(_looks(runs, gpu_parent))
    text = "\n".join(report(runs, gpu_parent, fam)).rstrip()
    if write:
        paragraph = readme_paragraph(fam, *cpu_runs_done(text), runs)
        write_docs(text, HERE.parent / "results.md", HERE.parents[1] / "README.md", paragraph)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
