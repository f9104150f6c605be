"""Write ``specs/dose-confirm.yaml``, the runs of B3's confirmation, from the screen of the
committed B3 runs (``docs/results.md``, "Review phase", B3): for each candidate lambda (task
means of d above 0 on at least 3 of the 4 tasks over seeds 0-2), that lambda on those tasks
and the base run on them, at fresh seeds 3-5. Refuses while a screening run is missing, when
no lambda is a candidate (then B3 has nothing to confirm), and to replace a spec already
written with another (the confirmation's runs are those named before they started).

Usage: python make_confirm_spec.py [RUNS_DIR] [OUT_YAML]
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import review_verdicts as rv  # noqa: E402  (a script beside this one, not a package)


def main(argv: list[str]) -> int:
    runs = Path(argv[1]) if len(argv) > 1 else HERE / "runs"
    out = Path(argv[2]) if len(argv) > 2 else HERE / "specs" / "dose-confirm.yaml"
    try:
        found = rv.candidates(runs)
    except rv.Missing as gone:
        print(f"make_confirm_spec.py: B3's screen is not complete (missing: {gone})",
              file=sys.stderr)
        return 1
    if not found:
        print("make_confirm_spec.py: no lambda is a candidate; B3 has nothing to confirm",
              file=sys.stderr)
        return 1
    text = rv.confirmation_spec(found)
    if out.is_file() and out.read_text(encoding="utf-8") != text:
        print(f"make_confirm_spec.py: {out} exists and names other runs; B3's screen now "
              f"gives {found}. Not replaced.", file=sys.stderr)
        return 1
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
    for lam, tasks in found.items():
        print(f"lambda = {lam:g}: " + ", ".join(rv.LABEL[t] for t in tasks))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
