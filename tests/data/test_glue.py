"""Local GLUE / SST-5 / SQuAD loaders: the real files (skipped if absent) and format quirks."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from isotropy.data import glue
from isotropy.data.glue import (
    TASKS,
    default_glue_dir,
    get_task,
    load_split,
    require_split,
    split_path,
    task_names,
)


def _real_dir() -> Path | None:
    env = os.environ.get("GLUE_DIR")
    if env:
        return Path(env) if Path(env).is_dir() else None
    candidate = Path(__file__).resolve().parents[2].parent / "shared" / "glue_data"
    return candidate if candidate.is_dir() else None


REAL = _real_dir()
needs_real = pytest.mark.skipif(
    REAL is None,
    reason="local GLUE copy not found: set GLUE_DIR or put it at <repo>/../shared/glue_data",
)


def _real_split(task: str, split: str) -> list[glue.Example]:
    try:
        return load_split(task, split, REAL)
    except FileNotFoundError as err:
        pytest.skip(f"{task} {split} is not in the local GLUE copy: {err}")


# --------------------------------------------------------------------------- real files


@needs_real
@pytest.mark.parametrize(
    ("task", "split", "rows"),
    [
        ("SST-2", "train", 67_349),
        ("SST-2", "dev", 872),
        ("CoLA", "train", 8_551),
        ("CoLA", "dev", 1_043),
        ("MRPC", "train", 3_668),
        ("MRPC", "dev", 408),
        ("RTE", "train", 2_490),
        ("RTE", "dev", 277),
        ("STS-B", "train", 5_749),
        ("STS-B", "dev", 1_500),
        ("QNLI", "dev", 5_463),
        ("SST-5", "train", 8_544),
        ("SST-5", "dev", 1_101),
        ("SST-5", "test", 2_210),
        ("SQuAD", "dev", 10_570),
    ],
)
def test_real_row_counts(task: str, split: str, rows: int) -> None:
    examples = _real_split(task, split)
    assert len(examples) == rows
    spec = get_task(task)
    for e in examples[:50]:
        assert e.text_a
        assert (e.text_b is not None) == spec.is_pair


@needs_real
def test_real_label_distributions() -> None:
    assert Counter(e.label for e in _real_split("cola", "train")) == {1: 6023, 0: 2528}
    assert Counter(e.label for e in _real_split("sst2", "train")) == {1: 37569, 0: 29780}
    assert Counter(e.label for e in _real_split("mrpc", "train")) == {1: 2474, 0: 1194}
    rte = Counter(e.label for e in _real_split("rte", "train"))
    assert rte == {0: 1249, 1: 1241}  # entailment, not_entailment
    assert sorted(Counter(e.label for e in _real_split("qnli", "dev")).values()) == [2702, 2761]
    scores = [e.label for e in _real_split("stsb", "dev")]
    assert all(isinstance(s, float) and 0.0 <= s <= 5.0 for s in scores)
    assert set(e.label for e in _real_split("sst5", "train")) == {0, 1, 2, 3, 4}


@needs_real
def test_real_quirks() -> None:
    mrpc = _real_split("mrpc", "train")
    assert mrpc[0].text_a.startswith("Amrozi accused his brother")
    assert '" the witness "' in mrpc[0].text_a  # bare quotes survive (QUOTE_NONE)
    sst2 = _real_split("sst2", "dev")
    assert sst2[0].text_a == "it 's a charming and often affecting journey . "
    assert sst2[0].label == 1
    cola = _real_split("cola", "dev")
    assert cola[0].text_a == "The sailors rode the breeze clear of the rocks."
    squad = _real_split("squad", "dev")
    first = squad[0]
    assert first.text_a == "Which NFL team represented the AFC at Super Bowl 50?"
    assert first.label is None
    assert first.answers[0].text == "Denver Broncos"
    assert first.text_b[first.answers[0].start:].startswith("Denver Broncos")


@needs_real
@pytest.mark.parametrize(("task", "split"), [("qnli", "train"), ("squad", "train")])
def test_real_missing_split_names_path(task: str, split: str) -> None:
    path = split_path(task, split, REAL)
    if path.exists():
        pytest.skip(f"{path} exists in this copy")
    with pytest.raises(FileNotFoundError) as info:
        load_split(task, split, REAL)
    msg = str(info.value)
    assert str(path) in msg
    assert "SOURCES.md" in msg


# --------------------------------------------------------------------------- fixtures


def _write(root: Path, rel: str, text: str) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(text.encode("utf-8"))
    return p


def test_mrpc_bom_header_and_bare_quotes(tmp_path: Path) -> None:
    _write(tmp_path, "MRPC/train.tsv",
           "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
           '1\t1\t2\the called " the witness " , then left .\t" The witness " left .\n'
           "0\t3\t4\tone\ttwo\n")
    ex = load_split("MRPC", "train", tmp_path)
    assert len(ex) == 2
    assert ex[0].text_a == 'he called " the witness " , then left .'
    assert ex[0].text_b == '" The witness " left .'
    assert [e.label for e in ex] == [1, 0]


def test_quote_at_field_start_is_not_a_csv_quote(tmp_path: Path) -> None:
    # A quoting reader would merge these two lines into one field.
    _write(tmp_path, "RTE/dev.tsv",
           "index\tsentence1\tsentence2\tlabel\n"
           '0\t"Quoted start\tplain\tentailment\n'
           '1\tend quote"\t"x\tnot_entailment\n')
    ex = load_split("rte", "dev", tmp_path)
    assert [(e.text_a, e.text_b, e.label) for e in ex] == [
        ('"Quoted start', "plain", 0),
        ('end quote"', '"x', 1),
    ]


def test_cola_headerless_and_test_with_header(tmp_path: Path) -> None:
    _write(tmp_path, "CoLA/dev.tsv", "gj04\t1\t\tGood sentence.\ngj04\t0\t*\tBad sentence")
    _write(tmp_path, "CoLA/test.tsv", "index\tsentence\n0\tA test sentence.\n")
    dev = load_split("cola", "dev", tmp_path)
    assert [(e.text_a, e.label) for e in dev] == [("Good sentence.", 1), ("Bad sentence", 0)]
    test = load_split("cola", "test", tmp_path)
    assert [(e.text_a, e.label, e.guid) for e in test] == [("A test sentence.", None, "test-0")]


def test_stsb_float_labels_and_sst2_trailing_space(tmp_path: Path) -> None:
    _write(tmp_path, "STS-B/dev.tsv",
           "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
           "\tscore\n0\tg\tf\t2012\t0\tnone\tnone\tA man.\tA person.\t4.750\n")
    _write(tmp_path, "SST-2/dev.tsv", "sentence\tlabel\nfine film \t1\n")
    st = load_split("STS-B", "validation", tmp_path)
    assert st[0].label == pytest.approx(4.75)
    assert (st[0].text_a, st[0].text_b) == ("A man.", "A person.")
    assert load_split("sst2", "dev", tmp_path)[0].text_a == "fine film "


def test_sst5_format(tmp_path: Path) -> None:
    _write(tmp_path, "SST-5/sst_dev.txt", "__label__1\tawful .\n__label__5\tgreat !\n\n")
    ex = load_split("sst5", "dev", tmp_path)
    assert [(e.text_a, e.label) for e in ex] == [("awful .", 0), ("great !", 4)]
    _write(tmp_path, "SST-5/sst_test.txt", "__label__7\tbad label\n")
    with pytest.raises(ValueError, match="sst_test.txt:1"):
        load_split("sst5", "test", tmp_path)
    _write(tmp_path, "SST-5/sst_train.txt", "no tab here\n")
    with pytest.raises(ValueError, match="__label__N"):
        load_split("sst5", "train", tmp_path)


def test_squad_json(tmp_path: Path) -> None:
    doc = {"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": "Paris is the capital of France.",
         "qas": [{"id": "q1", "question": "Capital of France?",
                  "answers": [{"text": "Paris", "answer_start": 0}]}]}]}]}
    _write(tmp_path, "SQuAD/dev-v1.1.json", json.dumps(doc))
    (ex,) = load_split("squad", "dev", tmp_path)
    assert (ex.guid, ex.text_a, ex.text_b, ex.label) == (
        "q1", "Capital of France?", "Paris is the capital of France.", None)
    assert ex.answers == (glue.Answer("Paris", 0),)
    _write(tmp_path, "SQuAD/train-v1.1.json", "{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_split("squad", "train", tmp_path)


def test_bad_rows_and_labels(tmp_path: Path) -> None:
    _write(tmp_path, "RTE/train.tsv", "index\tsentence1\tsentence2\tlabel\n0\tonly two\n")
    with pytest.raises(ValueError, match=r"train.tsv:2: expected at least 4"):
        load_split("rte", "train", tmp_path)
    _write(tmp_path, "RTE/dev.tsv", "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tmaybe\n")
    with pytest.raises(ValueError, match="label 'maybe' is not one of"):
        load_split("rte", "dev", tmp_path)
    _write(tmp_path, "QNLI/dev.tsv", "index\tquestion\tlabel\n0\tq\tentailment\n")
    with pytest.raises(ValueError, match="no column 'sentence'"):
        load_split("qnli", "dev", tmp_path)
    # a tab inside SST-2's sentence: the label column would read "the rest" silently
    _write(tmp_path, "SST-2/train.tsv", "sentence\tlabel\ngood\t1\nthe movie\t1\textra\n")
    with pytest.raises(ValueError, match=r"train.tsv:3: 3 tab-separated fields where the "
                                         r"header has 2: a tab inside a text"):
        load_split("sst2", "train", tmp_path)


def test_qqp_skips_malformed_rows_with_warning(tmp_path: Path) -> None:
    _write(tmp_path, "QQP/dev.tsv",
           "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
           "0\t1\t2\tHow?\tWhy?\t0\n1\t3\t4\tbroken\n2\t5\t6\tA?\tB?\t1\n"
           "3\t7\t8\tC?\tD\t?\t1\n")
    with pytest.warns(UserWarning, match="skipped 2 malformed"):
        ex = load_split("qqp", "dev", tmp_path)
    assert [e.label for e in ex] == [0, 1]


def test_unlabelled_test_split(tmp_path: Path) -> None:
    _write(tmp_path, "QNLI/test.tsv", "index\tquestion\tsentence\n0\tq?\ts.\n")
    (ex,) = load_split("qnli", "test", tmp_path)
    assert (ex.text_a, ex.text_b, ex.label) == ("q?", "s.", None)


def test_missing_files_and_dirs(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "QQP" / "train.tsv")):
        load_split("qqp", "train", tmp_path)
    with pytest.raises(FileNotFoundError, match="SST-2 dev split not found"):
        require_split("sst2", "dev", tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_split("sst2", "dev", tmp_path / "nope")
    (tmp_path / "afile").write_text("x", encoding="utf-8")
    with pytest.raises(FileNotFoundError, match="afile is a file, not a directory"):
        load_split("sst2", "dev", tmp_path / "afile")


def test_default_glue_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GLUE_DIR", str(tmp_path))
    assert default_glue_dir() == tmp_path
    _write(tmp_path, "SST-2/dev.tsv", "sentence\tlabel\nok\t1\n")
    assert len(load_split("sst2", "dev")) == 1
    monkeypatch.delenv("GLUE_DIR")
    d = default_glue_dir()
    assert d is None or d.name == "glue_data"


def test_registry() -> None:
    assert task_names() == ["sst2", "qnli", "rte", "mrpc", "qqp", "cola", "stsb", "sst5", "squad"]
    assert get_task("sst-2") is TASKS["sst2"] and get_task("STS_B") is TASKS["stsb"]
    assert get_task("sst2").num_labels == 2 and get_task("SST-5").num_labels == 5
    assert get_task("stsb").num_labels == 1 and get_task("stsb").kind == "regression"
    assert get_task("squad").kind == "span" and get_task("squad").num_labels == 0
    assert get_task("mrpc").metrics == ("accuracy", "f1")
    assert hash(get_task("mrpc")) == hash(get_task("MRPC"))
    assert "f1" in get_task("qqp").metrics and "accuracy" in get_task("qqp").metrics
    assert get_task("cola").main_metric == "matthews_correlation"
    assert get_task("stsb").main_metric == "pearson"
    assert set(get_task("squad").metrics) == {"f1", "exact_match"}
    assert get_task("rte").label_list == ("entailment", "not_entailment")
    with pytest.raises(ValueError, match="unknown task 'mnli'"):
        get_task("mnli")
    with pytest.raises(ValueError, match="unknown split"):
        split_path("sst2", "holdout", "/tmp")
    with pytest.raises(ValueError, match="no 'test' split"):
        split_path("squad", "test", "/tmp")


# --------------------------------------------------------------------------- malformed input

_STSB_HEADER = ("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1"
                "\tsentence2\tscore\n")


@pytest.mark.parametrize("score", ["nan", "NaN", "inf", "-inf", "Infinity"])
def test_stsb_non_finite_score_names_file_and_line(tmp_path: Path, score: str) -> None:
    path = _write(tmp_path, "STS-B/dev.tsv",
                  _STSB_HEADER
                  + "0\tg\tf\t2012\t0\tnone\tnone\tA man.\tA person.\t4.0\n"
                  + f"1\tg\tf\t2012\t1\tnone\tnone\tA dog.\tA cat.\t{score}\n")
    with pytest.raises(ValueError, match="not a finite number") as info:
        load_split("stsb", "dev", tmp_path)
    assert f"{path}:3:" in str(info.value)  # header is line 1


@pytest.mark.parametrize("score", ["70", "5.01", "-0.5", "100.0"])
def test_stsb_score_outside_0_to_5_names_file_and_line(tmp_path: Path, score: str) -> None:
    """A score of 70 (a wrong column or a 0-100 rescaling) would train silently."""
    path = _write(tmp_path, "STS-B/dev.tsv",
                  _STSB_HEADER
                  + "0\tg\tf\t2012\t0\tnone\tnone\tA man.\tA person.\t5.000\n"
                  + f"1\tg\tf\t2012\t1\tnone\tnone\tA dog.\tA cat.\t{score}\n")
    with pytest.raises(ValueError, match=f"score {float(score)} is outside STS-B's range 0 "
                                         "to 5") as info:
        load_split("stsb", "dev", tmp_path)
    assert f"{path}:3:" in str(info.value)


def test_hub_stsb_score_outside_its_range() -> None:
    from isotropy.data.hub import examples_from_columns

    columns = {"sentence1": ["a"], "sentence2": ["b"], "label": [70.0], "idx": [0]}
    with pytest.raises(ValueError, match="outside STS-B's range 0 to 5"):
        examples_from_columns("stsb", "train", columns)


@pytest.mark.parametrize(
    ("rel", "task", "lines", "bad_line"),
    [
        ("SST-2/dev.tsv", "sst2", ["sentence\tlabel", "fine\t1", "caf\xe9 \t0"], 3),
        ("CoLA/dev.tsv", "cola", ["gj04\t1\t\tGood.", "gj04\t0\t*\tna\xefve"], 2),
        ("SST-5/sst_dev.txt", "sst5", ["__label__1\tok", "__label__2\tcaf\xe9"], 2),
        ("SQuAD/dev-v1.1.json", "squad", ['{"data":', '["caf\xe9"]}'], 2),
    ],
)
def test_non_utf8_file_names_file_and_line(tmp_path: Path, rel: str, task: str,
                                           lines: list[str], bad_line: int) -> None:
    path = tmp_path / rel
    path.parent.mkdir(parents=True)
    path.write_bytes("\n".join(lines).encode("latin-1"))  # é / ï as one byte: not UTF-8
    with pytest.raises(ValueError, match="not valid UTF-8") as info:
        load_split(task, "dev", tmp_path)
    assert str(info.value).startswith(f"{path}:{bad_line}: ")


def test_utf8_error_line_and_byte(tmp_path: Path) -> None:
    from isotropy.io import read_text_utf8

    p = tmp_path / "t.txt"
    p.write_bytes(b"\xef\xbb\xbfab\n\xc3\xa9x\ncd\xff\n")  # BOM, valid 2-byte char, bad 0xff
    with pytest.raises(ValueError, match=r"t\.txt:3: not valid UTF-8 \(byte 0xff, byte 3 of"):
        read_text_utf8(p)
    p.write_bytes(b"\xef\xbb\xbfab\r\n\xc3\xa9x\n")
    assert read_text_utf8(p) == "ab\r\n\xe9x\n"


def _squad_doc() -> dict:
    return {"version": "1.1", "data": [
        {"title": "a", "paragraphs": [{"context": "Paris is big.", "qas": [
            {"id": "q0", "question": "Big?", "answers": [{"text": "big", "answer_start": 9}]},
        ]}]},
        {"title": "b", "paragraphs": [
            {"context": "Rome is old.", "qas": [
                {"id": "q1", "question": "Old?", "answers": [{"text": "old", "answer_start": 8}]},
                {"id": "q2", "question": "Rome?", "answers": [{"text": "Rome", "answer_start": 0}]},
            ]},
        ]},
    ]}


def _del(doc: dict, path: list, key: str) -> dict:
    node = doc
    for step in path:
        node = node[step]
    del node[key]
    return doc


def _set(doc: dict, path: list, key: str, value: object) -> dict:
    node = doc
    for step in path:
        node = node[step]
    node[key] = value
    return doc


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: _del(d, ["data", 1, "paragraphs", 0, "qas", 1], "answers"),
         "data[1].paragraphs[0].qas[1].answers is missing"),
        (lambda d: _del(d, ["data", 1, "paragraphs", 0], "context"),
         "data[1].paragraphs[0].context is missing"),
        (lambda d: _del(d, ["data", 0], "paragraphs"), "data[0].paragraphs is missing"),
        (lambda d: _del(d, ["data", 1, "paragraphs", 0, "qas", 0], "question"),
         "data[1].paragraphs[0].qas[0].question is missing"),
        (lambda d: _del(d, ["data", 0, "paragraphs", 0, "qas", 0, "answers", 0], "text"),
         "data[0].paragraphs[0].qas[0].answers[0].text is missing"),
        (lambda d: _del(d, [], "data"), "data is missing"),
        (lambda d: _set(d, ["data", 1, "paragraphs", 0, "qas", 1], "answers", "Rome"),
         'data[1].paragraphs[0].qas[1].answers must be a list, got "Rome"'),
        (lambda d: _set(d, ["data", 0, "paragraphs", 0, "qas", 0, "answers", 0],
                        "answer_start", "9"),
         'data[0].paragraphs[0].qas[0].answers[0].answer_start must be an integer, got "9"'),
        (lambda d: _set(d, ["data", 0, "paragraphs", 0, "qas", 0, "answers", 0],
                        "answer_start", True),
         "data[0].paragraphs[0].qas[0].answers[0].answer_start must be an integer, got true"),
        (lambda d: _set(d, ["data", 0, "paragraphs", 0, "qas", 0, "answers", 0],
                        "answer_start", 99),
         "data[0].paragraphs[0].qas[0].answers[0].answer_start = 99 lies outside the context "
         "(0..13)"),
        (lambda d: _set(d, ["data", 0, "paragraphs", 0], "context", None),
         "data[0].paragraphs[0].context must be a string, got null"),
        (lambda d: _set(d, ["data", 1, "paragraphs"], 0, ["not", "an", "object"]),
         'data[1].paragraphs[0] must be an object, got ["not", "an", "object"]'),
        (lambda d: _set(d, ["data", 1, "paragraphs", 0, "qas", 0], "id", 1.5),
         "data[1].paragraphs[0].qas[0].id must be a string or an integer, got 1.5"),
    ],
)
def test_squad_schema_errors_name_json_path(tmp_path: Path, edit, message: str) -> None:
    good = _write(tmp_path, "SQuAD/dev-v1.1.json", json.dumps(_squad_doc()))
    assert [e.guid for e in load_split("squad", "dev", tmp_path)] == ["q0", "q1", "q2"]
    bad = _write(tmp_path, "SQuAD/dev-v1.1.json", json.dumps(edit(_squad_doc())))
    assert bad == good
    with pytest.raises(ValueError) as info:
        load_split("squad", "dev", tmp_path)
    assert str(info.value) == f"{bad}: {message}"


def test_squad_not_an_object_and_json_error_line(tmp_path: Path) -> None:
    _write(tmp_path, "SQuAD/dev-v1.1.json", "[1, 2]")
    with pytest.raises(ValueError, match="expected a SQuAD JSON object"):
        load_split("squad", "dev", tmp_path)
    path = _write(tmp_path, "SQuAD/dev-v1.1.json", '{"data": [\n{"title": "x",,}\n]}')
    with pytest.raises(ValueError, match="not valid JSON") as info:
        load_split("squad", "dev", tmp_path)
    assert str(info.value).startswith(f"{path}:2:")
