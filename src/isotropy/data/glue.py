"""Loaders for a local GLUE directory in the classic ``glue_data/`` layout, plus SST-5 and SQuAD.

Layout (relative to the data directory)::

    SST-2/{train,dev,test}.tsv       QNLI/...   RTE/...   MRPC/...   QQP/...   STS-B/...
    CoLA/{train,dev}.tsv (no header)  CoLA/test.tsv (header "index<TAB>sentence")
    SST-5/sst_{train,dev,test}.txt   lines "__label__N<TAB>sentence", N = 1..5
    SQuAD/{train,dev}-v1.1.json      the official SQuAD v1.1 JSON

GLUE TSVs are read with quoting off (``csv.QUOTE_NONE``): QNLI, MRPC and RTE contain bare
``"`` characters that a quoting reader would swallow. A UTF-8 BOM (MRPC header) is dropped.
Texts are kept verbatim (SST-2 keeps its trailing space before the tab).

Every loader returns a list of :class:`Example`. Labels are indices into the task's
``label_list`` for classification, finite floats for STS-B, and ``None`` for unlabelled test
splits and for SQuAD (whose gold spans are in ``Example.answers``).

Malformed input raises ``ValueError`` naming the file and where in it: ``path:line`` for text
files (bytes that are not UTF-8, too few fields, a label outside the task's label set, a score
that is not a finite number) and ``path: data[3].paragraphs[0].qas[2].answers`` (the JSON
path) for a SQuAD field that is missing or of the wrong type.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from isotropy.io import not_found, read_text_utf8

__all__ = [
    "Answer",
    "Example",
    "TaskSpec",
    "TASKS",
    "SPLITS",
    "check_score",
    "default_glue_dir",
    "get_task",
    "load_split",
    "require_split",
    "split_path",
    "task_names",
]

SPLITS = ("train", "dev", "test")
_SPLIT_ALIASES = {"train": "train", "dev": "dev", "validation": "dev", "val": "dev", "test": "test"}


@dataclass(frozen=True)
class Answer:
    """A gold answer span of a SQuAD question: its text and character offset in the context."""

    text: str
    start: int


@dataclass(frozen=True)
class Example:
    """One example: a sentence (``text_b=None``) or a sentence pair, and its label.

    For SQuAD, ``text_a`` is the question, ``text_b`` the context paragraph, ``label`` is
    ``None`` and ``answers`` holds the gold spans.
    """

    guid: str
    text_a: str
    text_b: str | None
    label: int | float | None
    answers: tuple[Answer, ...] = ()


@dataclass(frozen=True)
class TaskSpec:
    """What a fine-tuning harness needs to know about a task.

    ``kind``: ``"classification"``, ``"regression"`` (STS-B) or ``"span"`` (SQuAD).
    ``metrics``: metric names, the first being the main one (GLUE convention: accuracy, plus
    F1 for MRPC/QQP; Matthews correlation for CoLA; Pearson for STS-B; F1/EM for SQuAD).
    ``hub``: the Hugging Face ``datasets`` (path, config) with the same data, for machines
    that can reach the hub.
    """

    name: str
    display_name: str
    directory: str
    kind: Literal["classification", "regression", "span"]
    label_list: tuple[str, ...]
    metrics: tuple[str, ...]
    files: dict[str, str] = field(compare=False)
    hub: tuple[str, str | None]
    columns: tuple[str, str | None, str | None] = ("", None, None)
    is_pair: bool = False
    skip_malformed: bool = False
    score_range: tuple[float, float] | None = None  # a regression task's scores, inclusive

    @property
    def num_labels(self) -> int:
        """Number of output units: classes for classification, 1 for regression, 0 for spans."""
        if self.kind == "classification":
            return len(self.label_list)
        return 1 if self.kind == "regression" else 0

    @property
    def main_metric(self) -> str:
        return self.metrics[0]


_BINARY = ("0", "1")
_NLI = ("entailment", "not_entailment")
_GLUE_FILES = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}

TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in [
        TaskSpec("sst2", "SST-2", "SST-2", "classification", _BINARY, ("accuracy",),
                 _GLUE_FILES, ("glue", "sst2"), ("sentence", None, "label")),
        TaskSpec("qnli", "QNLI", "QNLI", "classification", _NLI, ("accuracy",),
                 _GLUE_FILES, ("glue", "qnli"), ("question", "sentence", "label"), True),
        TaskSpec("rte", "RTE", "RTE", "classification", _NLI, ("accuracy",),
                 _GLUE_FILES, ("glue", "rte"), ("sentence1", "sentence2", "label"), True),
        TaskSpec("mrpc", "MRPC", "MRPC", "classification", _BINARY, ("accuracy", "f1"),
                 _GLUE_FILES, ("glue", "mrpc"), ("#1 String", "#2 String", "Quality"), True),
        TaskSpec("qqp", "QQP", "QQP", "classification", _BINARY, ("accuracy", "f1"),
                 _GLUE_FILES, ("glue", "qqp"), ("question1", "question2", "is_duplicate"),
                 True, skip_malformed=True),
        TaskSpec("cola", "CoLA", "CoLA", "classification", _BINARY, ("matthews_correlation",),
                 _GLUE_FILES, ("glue", "cola"), ("sentence", None, "label")),
        TaskSpec("stsb", "STS-B", "STS-B", "regression", (), ("pearson", "spearman"),
                 _GLUE_FILES, ("glue", "stsb"), ("sentence1", "sentence2", "score"), True,
                 score_range=(0.0, 5.0)),
        TaskSpec("sst5", "SST-5", "SST-5", "classification",
                 ("very negative", "negative", "neutral", "positive", "very positive"),
                 ("accuracy",),
                 {"train": "sst_train.txt", "dev": "sst_dev.txt", "test": "sst_test.txt"},
                 ("SetFit/sst5", None)),
        TaskSpec("squad", "SQuAD v1.1", "SQuAD", "span", (), ("f1", "exact_match"),
                 {"train": "train-v1.1.json", "dev": "dev-v1.1.json"}, ("squad", None),
                 is_pair=True),
    ]
}

# Splits the shared offline copy lacks (see its SOURCES.md); named in "file not found" errors.
_KNOWN_ABSENT = {("qnli", "train"), ("qqp", "train"), ("qqp", "dev"), ("squad", "train")}


def _norm(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


_ALIASES = {_norm(t.name): t.name for t in TASKS.values()}
_ALIASES.update({_norm(t.display_name): t.name for t in TASKS.values()})
_ALIASES.update({"squadv1": "squad", "squad1": "squad", "stsbenchmark": "stsb"})


def task_names() -> list[str]:
    """Canonical task names, e.g. ``['sst2', 'qnli', ...]``."""
    return list(TASKS)


def get_task(name: str) -> TaskSpec:
    """The :class:`TaskSpec` of a task; case, dashes and underscores are ignored.

    >>> get_task("SST-2").num_labels, get_task("sts_b").kind, get_task("CoLA").main_metric
    (2, 'regression', 'matthews_correlation')
    """
    key = _ALIASES.get(_norm(str(name)))
    if key is None:
        known = ", ".join(t.display_name for t in TASKS.values())
        raise ValueError(f"unknown task {name!r}; known tasks: {known}")
    return TASKS[key]


def _norm_split(split: str) -> str:
    s = _SPLIT_ALIASES.get(str(split).lower())
    if s is None:
        raise ValueError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    return s


def default_glue_dir() -> Path | None:
    """``$GLUE_DIR`` if set, else ``<repo>/../shared/glue_data`` if it exists, else ``None``."""
    env = os.environ.get("GLUE_DIR")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[3]
    candidate = repo.parent / "shared" / "glue_data"
    return candidate if candidate.is_dir() else None


def _resolve_dir(data_dir: str | os.PathLike[str] | None) -> Path:
    if data_dir is None:
        d = default_glue_dir()
        if d is None:
            raise FileNotFoundError(
                "no GLUE data directory: pass one (isotropy train --data_dir DIR, isotropy "
                "measure --data-dir DIR) or set GLUE_DIR to a folder in the classic glue_data/ "
                "layout"
            )
        data_dir = d
    path = Path(data_dir)
    if (why := not_found(path, "directory")) is not None:
        raise FileNotFoundError(f"GLUE data directory {path} {why}")
    return path


def split_path(task: str, split: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where a split's file is expected (it need not exist)."""
    spec = get_task(task)
    s = _norm_split(split)
    if s not in spec.files:
        raise ValueError(
            f"{spec.display_name} has no {s!r} split; available: {', '.join(spec.files)}"
        )
    return _resolve_dir(data_dir) / spec.directory / spec.files[s]


def _missing(spec: TaskSpec, split: str, path: Path) -> FileNotFoundError:
    msg = f"{spec.display_name} {split} split not found: expected {path}"
    if (spec.name, split) in _KNOWN_ABSENT:
        hub_path, hub_cfg = spec.hub
        hub = f"{hub_path}/{hub_cfg}" if hub_cfg else hub_path
        msg += (
            ". The project's offline glue_data copy lacks this file (too large for its source; "
            f"see its SOURCES.md): put the file at that path, or use the Hugging Face dataset "
            f"'{hub}' on a machine that can reach the hub"
        )
    return FileNotFoundError(msg)


def _read_tsv(path: Path) -> list[list[str]]:
    """Rows of a tab-separated UTF-8 file, quoting off (one row per line)."""
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    text = read_text_utf8(path)
    return list(csv.reader(io.StringIO(text, newline=""), delimiter="\t",
                           quoting=csv.QUOTE_NONE))


def check_score(spec: TaskSpec, score: float, where: str) -> float:
    """``score`` if it lies in the task's range (STS-B: 0 to 5), else ``ValueError``: a score
    of 70 is a wrong file or column, and would train silently.

    >>> check_score(get_task("stsb"), 70.0, "dev.tsv:2")
    Traceback (most recent call last):
    ...
    ValueError: dev.tsv:2: score 70.0 is outside STS-B's range 0 to 5
    """
    if spec.score_range is not None:
        lo, hi = spec.score_range
        if not lo <= score <= hi:
            raise ValueError(f"{where}: score {score} is outside {spec.display_name}'s range "
                             f"{lo:g} to {hi:g}")
    return score


def _label(spec: TaskSpec, raw: str, where: str) -> int | float:
    raw = raw.strip()
    if spec.kind == "regression":
        try:
            score = float(raw)
        except ValueError as err:
            raise ValueError(f"{where}: score {raw!r} is not a number") from err
        if not math.isfinite(score):
            raise ValueError(f"{where}: score {raw!r} is not a finite number")
        return check_score(spec, score, where)
    try:
        return spec.label_list.index(raw)
    except ValueError as err:
        raise ValueError(
            f"{where}: label {raw!r} is not one of {list(spec.label_list)}"
        ) from err


def _load_glue_tsv(spec: TaskSpec, path: Path, split: str) -> list[Example]:
    rows = _read_tsv(path)
    if not rows:
        return []
    a_col, b_col, y_col = spec.columns
    if spec.name == "cola" and rows[0][:1] != ["index"]:
        # CoLA train/dev: no header; columns are source, label, marker, sentence.
        header = {"source": 0, "label": 1, "marker": 2, "sentence": 3}
        body, first_line = rows, 1
    else:
        header = {name.strip(): i for i, name in enumerate(rows[0])}
        body, first_line = rows[1:], 2
    for col in (a_col, b_col):
        if col is not None and col not in header:
            raise ValueError(
                f"{path}: header has no column {col!r} (found {list(header)}); "
                f"is this a {spec.display_name} file?"
            )
    has_label = y_col in header
    id_col = header.get("index", header.get("id"))
    need = max(header[c] for c in (a_col, b_col, y_col) if c is not None and c in header)
    width = len(header)  # more fields than the header: a tab inside a text shifted them
    out: list[Example] = []
    skipped = 0
    for k, row in enumerate(body):
        line = first_line + k
        if len(row) <= need or len(row) > width:
            if spec.skip_malformed:
                skipped += 1
                continue
            if len(row) > width:
                raise ValueError(
                    f"{path}:{line}: {len(row)} tab-separated fields where the header has "
                    f"{width}: a tab inside a text would shift the columns; remove it"
                )
            raise ValueError(
                f"{path}:{line}: expected at least {need + 1} tab-separated fields, "
                f"got {len(row)}"
            )
        label = _label(spec, row[header[y_col]], f"{path}:{line}") if has_label else None
        guid = f"{split}-{row[id_col] if id_col is not None else k}"
        out.append(
            Example(
                guid=guid,
                text_a=row[header[a_col]],
                text_b=row[header[b_col]] if b_col is not None else None,
                label=label,
            )
        )
    if skipped:
        warnings.warn(f"{path}: skipped {skipped} malformed row(s)", stacklevel=3)
    return out


def _load_sst5(spec: TaskSpec, path: Path, split: str) -> list[Example]:
    out: list[Example] = []
    with io.StringIO(read_text_utf8(path)) as f:
        for line_no, line in enumerate(f, start=1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            tag, sep, text = line.partition("\t")
            if not sep or not tag.startswith("__label__"):
                raise ValueError(
                    f"{path}:{line_no}: expected '__label__N<TAB>sentence', got {line[:60]!r}"
                )
            n = tag[len("__label__"):]
            if n not in {"1", "2", "3", "4", "5"}:
                raise ValueError(f"{path}:{line_no}: label {tag!r} is not __label__1..5")
            out.append(Example(guid=f"{split}-{len(out)}", text_a=text, text_b=None,
                               label=int(n) - 1))
    return out


_JSON_KINDS = {dict: "an object", list: "a list", str: "a string", int: "an integer"}


def _expect(file: Path, value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    """``value`` if it has the JSON type ``kind``, else ``ValueError`` naming file and path."""
    if isinstance(value, bool) or not isinstance(value, kind):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        wanted = " or ".join(_JSON_KINDS[k] for k in kinds)
        got = json.dumps(value)
        got = got if len(got) <= 40 else got[:37] + "..."
        raise ValueError(f"{file}: {where} must be {wanted}, got {got}")
    return value


def _field(file: Path, obj: dict[str, Any], key: str, kind: type | tuple[type, ...],
           where: str) -> Any:
    """``obj[key]`` checked by :func:`_expect`; a missing key names its JSON path."""
    path = f"{where}.{key}" if where else key
    if key not in obj:
        raise ValueError(f"{file}: {path} is missing")
    return _expect(file, obj[key], kind, path)


def _items(
    file: Path, obj: dict[str, Any], key: str, where: str
) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(path, item)`` for the objects of the list ``obj[key]``."""
    path = f"{where}.{key}" if where else key
    for i, item in enumerate(_field(file, obj, key, list, where)):
        yield f"{path}[{i}]", _expect(file, item, dict, f"{path}[{i}]")


def _squad_answer(file: Path, answer: dict[str, Any], where: str, context: str) -> Answer:
    start = _field(file, answer, "answer_start", int, where)
    if not 0 <= start <= len(context):
        raise ValueError(
            f"{file}: {where}.answer_start = {start} lies outside the context "
            f"(0..{len(context)})"
        )
    return Answer(text=_field(file, answer, "text", str, where), start=start)


def _load_squad(spec: TaskSpec, path: Path, split: str) -> list[Example]:
    try:
        doc = json.loads(read_text_utf8(path))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}:{err.lineno}: not valid JSON ({err})") from err
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a SQuAD JSON object with a 'data' list")
    out: list[Example] = []
    for where_a, article in _items(path, doc, "data", ""):
        for where_p, para in _items(path, article, "paragraphs", where_a):
            context = _field(path, para, "context", str, where_p)
            for where_q, qa in _items(path, para, "qas", where_p):
                answers = tuple(
                    _squad_answer(path, a, where, context)
                    for where, a in _items(path, qa, "answers", where_q)
                )
                qid = _field(path, qa, "id", (str, int), where_q)
                question = _field(path, qa, "question", str, where_q)
                out.append(Example(guid=str(qid), text_a=question, text_b=context,
                                   label=None, answers=answers))
    return out


def require_split(
    task: str, split: str = "dev", data_dir: str | os.PathLike[str] | None = None
) -> Path:
    """The path of a split's file; ``FileNotFoundError`` naming the expected path if absent."""
    spec = get_task(task)
    s = _norm_split(split)
    path = split_path(spec.name, s, data_dir)
    if not path.is_file():
        raise _missing(spec, s, path)
    return path


def load_split(
    task: str, split: str = "dev", data_dir: str | os.PathLike[str] | None = None
) -> list[Example]:
    """Load one split of a task from a local GLUE directory.

    ``data_dir`` defaults to :func:`default_glue_dir`. Raises ``ValueError`` for an unknown
    task or split and ``FileNotFoundError`` naming the expected path of a missing file.
    """
    spec = get_task(task)
    s = _norm_split(split)
    path = require_split(spec.name, s, data_dir)
    if spec.name == "sst5":
        return _load_sst5(spec, path, s)
    if spec.name == "squad":
        return _load_squad(spec, path, s)
    return _load_glue_tsv(spec, path, s)
