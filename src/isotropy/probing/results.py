"""What a probe writes: plain-text tables for the terminal, and ``<name>.json`` +
``<name>.csv`` in an output directory (atomically)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from isotropy.io import write_csv_atomic, write_json_atomic

__all__ = ["find_row", "text_table", "write_json_and_csv"]


def text_table(rows: Sequence[Mapping[str, Any]],
               columns: Sequence[tuple[str, str, int, str]]) -> list[str]:
    """Lines of a plain-text table: a header, a rule, then one line per row; ``columns`` are
    ``(key, header, width, format)``, a missing or ``None`` value shows as ``-``.

    >>> text_table([{"a": 0.5}, {"a": None}], [("a", "A", 5, ".2f")])
    ['    A', '-----', ' 0.50', '    -']
    """
    head = " ".join(h.rjust(w) for _, h, w, _ in columns)
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(" ".join(("-" if (v := r.get(key)) is None else format(v, fmt)).rjust(w)
                              for key, _, w, fmt in columns))
    return lines


def find_row(rows: Sequence[dict[str, Any]], layer: int | str, cloud: str) -> dict[str, Any]:
    """The row of one layer and cloud; ``KeyError`` when there is none.

    >>> find_row([{"layer": 1, "cloud": "cls", "x": 2}], 1, "cls")["x"]
    2
    """
    for r in rows:
        if r["layer"] == layer and r["cloud"] == cloud:
            return r
    raise KeyError(f"no row for layer {layer!r}, cloud {cloud!r}")


def mark_twonn_reliability(rows: Sequence[dict[str, Any]]) -> None:
    """Set each row's ``twonn_reliable``: whether its TwoNN estimate rests on at least
    :data:`~isotropy.measures.twonn.RELIABLE_POINTS` (100) points (``n_sampled`` where the
    estimate used a sample, else ``n_points``); ``None`` where there is no estimate.

    >>> rows = [{"n_points": 10, "twonn": 3.1}, {"n_points": 500, "twonn": 9.0},
    ...         {"n_points": 5, "twonn": None}]
    >>> mark_twonn_reliability(rows); [r["twonn_reliable"] for r in rows]
    [False, True, None]
    """
    from isotropy.measures.twonn import RELIABLE_POINTS

    for r in rows:
        n = r.get("n_sampled", r.get("n_points"))
        r["twonn_reliable"] = (None if r.get("twonn") is None or n is None
                               else bool(n >= RELIABLE_POINTS))


def twonn_footnote(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The table's note on the TwoNN values that :func:`mark_twonn_reliability` found
    unreliable (none: no line)."""
    from isotropy.measures.twonn import RELIABLE_POINTS

    bad = [r for r in rows if r.get("twonn_reliable") is False]
    if not bad:
        return []
    least = min(r.get("n_sampled", r.get("n_points")) for r in bad)
    return [f"TwoNN is unreliable in {len(bad)} row(s): fewer than {RELIABLE_POINTS} points "
            f"(as few as {least}); its spread is about 1.3/sqrt(N) of the dimension "
            f"(twonn_reliable false in the files)"]


def write_json_and_csv(output_dir: str | os.PathLike[str], stem: str, payload: dict[str, Any],
                       rows: Sequence[Mapping[str, Any]]) -> dict[str, Path]:
    """Write ``<stem>.json`` (``payload``) and ``<stem>.csv`` (``rows``) atomically into
    ``output_dir`` (created); returns their paths under ``json`` and ``csv``."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    return {"json": write_json_atomic(out / f"{stem}.json", payload),
            "csv": write_csv_atomic(out / f"{stem}.csv", list(rows))}
