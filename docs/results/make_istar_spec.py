"""Write ``specs/istar.yaml`` (phase A) and ``specs/zeta.yaml`` (phase C) from the learning
rates picked on ``istar-lr``.

Reads ``picks.csv`` of ``isotropy report <istar-lr root> --pick-best-over learning_rate``
(the rate of higher dev main metric on seed 0 of the run without a regularizer, per task)
and writes one point per task and method, every method at its task's rate:

- no regularizer; CosReg lambda = 1;
- I-STAR at the I-STAR paper's best BERT setting for the task (its Table 2);
- I-STAR lambda = +1 and a milder lambda = -0.3, at that setting's zeta.

Phase C: I-STAR lambda = -1 at zeta in {0, 0.2, ..., 1} on CoLA (the I-STAR paper's Fig. 7),
in phase A's output root, so that its point at CoLA's zeta 0.8 is phase A's run.

An existing spec that says otherwise is not replaced: nothing is written then.

Usage: python make_istar_spec.py PICKS_CSV [OUT_YAML]
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

# I-STAR paper, Table 2, BERT row: (lambda, zeta) of the best I-STAR run per task.
PAPER_BEST = {"sst2": (-5, 0.2), "rte": (-1, 0.8), "mrpc": (-1, 0.6), "cola": (-1, 0.8),
              "stsb": (-1, 0.2)}
TASK_EXTRA = {"sst2": ", max_train_samples: 8000"}


def main(picks_csv: str, out: str) -> None:
    with open(picks_csv, newline="", encoding="utf-8") as f:
        picks = {row["task"]: row for row in csv.DictReader(f)}
    missing = sorted(set(PAPER_BEST) - set(picks))
    if missing:
        raise SystemExit(f"{picks_csv}: no pick for {', '.join(missing)}")
    lines = []
    for task, (lam, zeta) in PAPER_BEST.items():
        value = picks[task]["picked"]
        if not value.startswith("learning_rate="):
            raise SystemExit(f"{picks_csv}: unexpected pick {value!r} for {task}")
        lr = float(value.split("=", 1)[1])
        common = f"task: {task}, learning_rate: {lr:.1e}{TASK_EXTRA.get(task, '')}"
        lines += [
            f"  # {task}: learning rate {lr:g} (seed-0 dev {picks[task]['metric']} "
            f"{float(picks[task]['mean']):.4f}); paper's best I-STAR lambda {lam}, zeta {zeta}",
            f"  - {{{common}, regularizer: none}}",
            f"  - {{{common}, regularizer: cosreg, cosreg_tuning: 1}}",
            f"  - {{{common}, regularizer: istar, tuning: {lam}, zeta: {zeta}}}",
            f"  - {{{common}, regularizer: istar, tuning: 1, zeta: {zeta}}}",
            f"  - {{{common}, regularizer: istar, tuning: -0.3, zeta: {zeta}}}",
        ]
    base = Path(__file__).with_name("specs") / "istar-lr.yaml"
    head = base.read_text(encoding="utf-8").split("\noutput_root:")[1].split("\npoints:")[0]
    head = head.replace("/istar-lr", "/istar").replace("  regularizer: none\n", "")
    text = ("# Phase A: every method of each task at the task's learning rate from istar-lr.yaml\n"
            "# (written by make_istar_spec.py from that sweep's picks; see istar-lr.yaml for the\n"
            "# fixed settings). 25 cells x 3 seeds, seed-major.\n"
            f"output_root:{head}\npoints:\n" + "\n".join(lines)
            + "\nseeds: [0, 1, 2]\norder: seed-major\n")
    lr = float(picks["cola"]["picked"].split("=", 1)[1])
    zetas = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    zeta_text = ("# Phase C: I-STAR lambda = -1, zeta in {0, 0.2, ..., 1} on CoLA at its "
                 "phase-A learning\n"
                 "# rate (written by make_istar_spec.py), in phase A's output root: the "
                 "zeta = 0.8 point\n"
                 "# is phase A's run. 6 cells x 3 seeds, seed-major.\n"
                 f"output_root:{head}\npoints:\n"
                 + "\n".join(f"  - {{task: cola, learning_rate: {lr:.1e}, regularizer: istar, "
                             f"tuning: -1, zeta: {z}}}" for z in zetas)
                 + "\nseeds: [0, 1, 2]\norder: seed-major\n")
    written = {Path(out): text, Path(out).with_name("zeta.yaml"): zeta_text}
    for path, new in written.items():  # both, or neither
        if path.exists() and (not path.is_file() or path.read_text(encoding="utf-8") != new):
            raise SystemExit(f"make_istar_spec.py: {path} exists and says otherwise: not "
                             "replaced (remove it to write it again)")
    for path, new in written.items():
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(new, encoding="utf-8")
        tmp.replace(path)
        print(f"wrote {path}")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2] if len(sys.argv) == 3
         else str(Path(__file__).with_name("specs") / "istar.yaml"))
