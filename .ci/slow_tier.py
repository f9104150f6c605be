"""Add the tests that took longer than a limit in a JUnit XML report to tests/slow_by_time.txt.

    python .ci/slow_tier.py ~/.cache/isotropy-ci/last-ci/main.xml --over 10 [--keep NODEID ...]
        [--skip-under PATH ...] [--skip-marked floor]

The XML is the per-test report CI keeps (``make TEST_REPORT=DIR test``). Lines already in the
file stay; a test named by ``--keep``, or under a folder named by ``--skip-under``, is never
added (an end-to-end test kept in ``make test`` on purpose; the measures' formula tests). A
test carrying a marker named by ``--skip-marked`` (``floor``: ``make test`` runs those whether
slow or not) is never listed: not added, and dropped where an older run listed it (the JUnit
XML carries no markers, so pytest collects them). The file is rewritten sorted, each node id
with the seconds measured.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIER = ROOT / "tests" / "slow_by_time.txt"


def node_id(classname: str, name: str) -> str | None:
    """``tests.cli.test_cli`` + ``test_x`` -> ``tests/cli/test_cli.py::test_x`` (a class-based
    test keeps its class: ``tests/a/test_b.py::TestC::test_x``); ``None`` when no file of
    the repository matches (a doctest of src/)."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = Path(*parts[:cut]).with_suffix(".py")
        if (ROOT / path).is_file():
            return "::".join([path.as_posix(), *parts[cut:], name])
    return None


def marked(marker: str) -> set[str]:
    """The node ids of the tests carrying ``marker``, as pytest collects them."""
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                          "-p", "no:cacheprovider", "-m", marker], cwd=ROOT,
                         capture_output=True, text=True, check=False,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if res.returncode != 0:  # 5: no test carries the marker
        raise SystemExit(f"collecting the tests marked {marker!r} failed (pytest exit "
                         f"{res.returncode}):\n{res.stdout[-3000:]}{res.stderr[-3000:]}")
    ids = {line.strip() for line in res.stdout.splitlines() if "::" in line}
    # a parametrized test is listed per case; slow_by_time.txt names it either way
    return ids | {node.split("[", 1)[0] for node in ids}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--over", type=float, required=True, help="seconds")
    parser.add_argument("--keep", action="append", default=[], help="a node id never added")
    parser.add_argument("--skip-under", action="append", default=[], metavar="PATH",
                        help="a folder whose tests are never added")
    parser.add_argument("--skip-marked", action="append", default=[], metavar="MARKER",
                        help="a marker whose tests are never added")
    args = parser.parse_args()
    skipped = set().union(*(marked(m) for m in args.skip_marked))
    lines = TIER.read_text(encoding="utf-8").splitlines()
    header = [line for line in lines if line.startswith("#")]
    entries = {line.split("#", 1)[0].strip(): line for line in lines
               if line.strip() and not line.startswith("#")}
    entries = {node: line for node, line in entries.items() if node not in skipped}
    for case in ET.parse(args.report).getroot().iter("testcase"):
        seconds = float(case.get("time", 0))
        node = node_id(case.get("classname", ""), case.get("name", ""))
        if (node is None or seconds <= args.over or node in entries or node in args.keep
                or node.startswith(tuple(args.skip_under)) or node in skipped
                or case.find("skipped") is not None):
            continue
        entries[node] = f"{node}  # {seconds:.0f} s"
    missing = [node for node in args.keep if node in entries]
    if missing:
        raise SystemExit(f"--keep names tests already in {TIER.name}: {missing}")
    text = "\n".join([*header, *(entries[k] for k in sorted(entries))]) + "\n"
    TIER.write_text(text, encoding="utf-8")
    print(f"{TIER.relative_to(ROOT)}: {len(entries)} tests")


if __name__ == "__main__":
    main()
