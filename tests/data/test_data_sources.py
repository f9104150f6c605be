"""``--data_source local|hub``: hub rows become the local loader's Examples.

The hub cannot be reached here: ``datasets.load_dataset`` is replaced by stand-ins, a
``DatasetDict`` built with ``Dataset.from_dict`` in each hub dataset's column layout (column
names, ``ClassLabel`` names, dtypes as on the hub's dataset cards), holding the same rows as
tiny local files in the ``glue_data/`` layout. The local loader's Examples are the expected
values. The unreachable-hub error is checked against the real ``datasets.load_dataset``.
"""

from __future__ import annotations

import json
import random
import sys
import zlib

import datasets
import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Sequence, Value

from isotropy.data.glue import get_task, load_split
from isotropy.data.hub import HubUnavailableError, examples_from_columns
from isotropy.data.sources import load_splits, load_task_data
from isotropy.training.config import IsotropyArguments

WORDS = ["good", "bad", "film", "plot", "the", "a", "is", "not", "very", "\"quoted\"", "it's"]
SIZES = {"train": 7, "dev": 5, "test": 4}

# Label classes of the GLUE configs on the hub (nyu-mll/glue dataset card), in index order.
HUB_NAMES = {
    "sst2": ["negative", "positive"], "qnli": ["entailment", "not_entailment"],
    "rte": ["entailment", "not_entailment"], "mrpc": ["not_equivalent", "equivalent"],
    "qqp": ["not_duplicate", "duplicate"], "cola": ["unacceptable", "acceptable"],
}
GLUE_COLUMNS = {  # text_a, text_b on the hub
    "sst2": ("sentence", None), "qnli": ("question", "sentence"),
    "rte": ("sentence1", "sentence2"), "mrpc": ("sentence1", "sentence2"),
    "qqp": ("question1", "question2"), "cola": ("sentence", None),
    "stsb": ("sentence1", "sentence2"),
}
HUB_SPLIT = {"train": "train", "dev": "validation", "test": "test"}


def _text(rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(2, 6)))


def _rows(task: str, split: str, seed: int) -> list[dict]:
    """Random rows: a, b, label (class index, score, or None on test), answers for SQuAD."""
    rng = random.Random(seed)
    spec = get_task(task)
    out = []
    for i in range(SIZES[split]):
        row = {"a": _text(rng), "b": _text(rng) if spec.is_pair else None, "label": None}
        if split != "test":
            if spec.kind == "regression":
                row["label"] = rng.choice([0.0, 0.333, 1.2, 2.75, 3.8, 4.6, 5.0])
            elif spec.kind == "classification":
                row["label"] = rng.randrange(spec.num_labels)
        if spec.kind == "span":
            row["a"] = f"what is {row['a']}?"
            row["b"] = f"Context {i}: {row['b']} and more."
            start = row["b"].index(":") + 2
            row["answers"] = [(row["b"][start:start + 4], start), (row["b"][:7], 0)]
        out.append(row)
    return out


def _write_local(root, task: str, split: str, rows: list[dict]) -> None:
    """The rows as the classic glue_data/ file of the task (formats of glue.py's docstring)."""
    spec = get_task(task)
    d = root / spec.directory
    d.mkdir(exist_ok=True)
    test = split == "test"
    if task == "squad":
        qas = [{"id": f"q{split}{i}", "question": r["a"],
                "answers": [{"text": t, "answer_start": s} for t, s in r["answers"]]}
               for i, r in enumerate(rows)]
        paras = [{"context": r["b"], "qas": [q]} for r, q in zip(rows, qas, strict=True)]
        doc = {"version": "1.1", "data": [{"title": "T", "paragraphs": paras}]}
        (d / spec.files[split]).write_text(json.dumps(doc), encoding="utf-8")
        return
    if task == "sst5":
        lines = [f"__label__{r['label'] + 1}\t{r['a']}" for r in rows]
    elif task == "sst2":
        lines = (["index\tsentence"] + [f"{i}\t{r['a']}" for i, r in enumerate(rows)] if test
                 else ["sentence\tlabel"] + [f"{r['a']}\t{r['label']}" for r in rows])
    elif task == "cola":
        lines = (["index\tsentence"] + [f"{i}\t{r['a']}" for i, r in enumerate(rows)] if test
                 else [f"gj04\t{r['label']}\t{'' if r['label'] else '*'}\t{r['a']}"
                       for r in rows])
    elif task in ("qnli", "rte"):
        a, b = ("question", "sentence") if task == "qnli" else ("sentence1", "sentence2")
        names = spec.label_list
        lines = [f"index\t{a}\t{b}" + ("" if test else "\tlabel")] + [
            f"{i}\t{r['a']}\t{r['b']}" + ("" if test else f"\t{names[r['label']]}")
            for i, r in enumerate(rows)]
    elif task == "mrpc":
        lines = (["index\t#1 ID\t#2 ID\t#1 String\t#2 String"]
                 + [f"{i}\t{100 + i}\t{200 + i}\t{r['a']}\t{r['b']}" for i, r in enumerate(rows)]
                 if test else
                 ["\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
                 + [f"{r['label']}\t{100 + i}\t{200 + i}\t{r['a']}\t{r['b']}"
                    for i, r in enumerate(rows)])
    elif task == "qqp":
        lines = [("id\tquestion1\tquestion2" if test
                  else "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate")] + [
            (f"{5000 + i}\t{r['a']}\t{r['b']}" if test
             else f"{5000 + i}\t{i}\t{i + 1}\t{r['a']}\t{r['b']}\t{r['label']}")
            for i, r in enumerate(rows)]
    elif task == "stsb":
        head = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
        lines = [head + ("" if test else "\tscore")] + [
            f"{i}\tg\tf\t2012\t{i}\ts\ts\t{r['a']}\t{r['b']}"
            + ("" if test else f"\t{r['label']:.3f}") for i, r in enumerate(rows)]
    else:  # pragma: no cover
        raise AssertionError(task)
    (d / spec.files[split]).write_text("\n".join(lines) + "\n", encoding="utf-8")


def _hub_split(task: str, split: str, rows: list[dict]) -> Dataset:
    """The rows in the hub dataset's layout (unlabelled test rows carry label -1)."""
    n = len(rows)
    if task == "squad":
        features = Features({
            "id": Value("string"), "title": Value("string"), "context": Value("string"),
            "question": Value("string"),
            "answers": Sequence({"text": Value("string"), "answer_start": Value("int32")}),
        })
        return Dataset.from_dict({
            "id": [f"q{split}{i}" for i in range(n)], "title": ["T"] * n,
            "context": [r["b"] for r in rows], "question": [r["a"] for r in rows],
            "answers": [{"text": [t for t, _ in r["answers"]],
                         "answer_start": [s for _, s in r["answers"]]} for r in rows],
        }, features=features)
    if task == "sst5":
        names = list(get_task("sst5").label_list)
        return Dataset.from_dict({
            "text": [r["a"] for r in rows], "label": [r["label"] for r in rows],
            "label_text": [names[r["label"]] for r in rows],
        }, features=Features({"text": Value("string"), "label": Value("int64"),
                              "label_text": Value("string")}))
    a, b = GLUE_COLUMNS[task]
    label = (Value("float32") if task == "stsb" else ClassLabel(names=HUB_NAMES[task]))
    cols = {a: [r["a"] for r in rows]}
    feats = {a: Value("string")}
    if b is not None:
        cols[b] = [r["b"] for r in rows]
        feats[b] = Value("string")
    missing = -1.0 if task == "stsb" else -1
    cols["label"] = [missing if r["label"] is None else r["label"] for r in rows]
    cols["idx"] = list(range(n))
    feats.update(label=label, idx=Value("int32"))
    return Dataset.from_dict(cols, features=Features(feats))


@pytest.fixture
def both(tmp_path, monkeypatch):
    """``make(task, splits)``: local files in tmp_path and a hub stand-in with the same rows;
    the calls to the patched ``datasets.load_dataset`` are recorded in ``make.calls``."""
    calls: list[tuple] = []
    hub: dict[str, DatasetDict] = {}

    def fake_load_dataset(path, name=None, **kwargs):
        calls.append((path, name, kwargs))
        return hub[f"{path}/{name}"]

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)

    def make(task: str, splits=("train", "dev")):
        spec = get_task(task)
        parts = {}
        for k, split in enumerate(splits):
            rows = _rows(task, split, seed=zlib.crc32(f"{task}-{split}".encode()) + k)
            _write_local(tmp_path, spec.name, split, rows)
            parts[HUB_SPLIT[split]] = _hub_split(spec.name, split, rows)
        path, config = {"sst5": ("SetFit/sst5", None), "squad": ("rajpurkar/squad", None)}.get(
            spec.name, ("nyu-mll/glue", spec.name))
        hub[f"{path}/{config}"] = DatasetDict(parts)
        return tmp_path

    make.calls = calls
    return make


ALL_TASKS = ["sst2", "qnli", "rte", "mrpc", "qqp", "cola", "stsb", "sst5", "squad"]


@pytest.mark.parametrize("task", ALL_TASKS)
def test_hub_rows_become_the_local_examples(both, task):
    glue = both(task)
    local, local_info, _ = load_splits(task, ["train", "dev"], data_dir=str(glue))
    hub, info, where = load_splits(task, ["train", "dev"], source="hub")
    path, config, kwargs = both.calls[-1]
    assert (info["dataset"], info["config"]) == (path, config) and kwargs == {"revision": None}
    assert info["kind"] == "hub" and local_info["kind"] == "local"
    assert where == {"train": "train", "dev": "validation"}
    for split in ("train", "dev"):
        assert len(hub[split]) == SIZES[split]
        if task == "qqp":  # locally the TSV's pair id, on the hub the row index
            assert [e.guid for e in local[split]] == [f"{split}-{5000 + i}"
                                                      for i in range(SIZES[split])]
            assert [e.guid for e in hub[split]] == [f"{split}-{i}" for i in range(SIZES[split])]
            strip = [(e.text_a, e.text_b, e.label) for e in local[split]]
            assert [(e.text_a, e.text_b, e.label) for e in hub[split]] == strip
        else:
            assert hub[split] == local[split]


@pytest.mark.parametrize("task", ["sst2", "mrpc", "stsb", "cola"])
def test_glue_test_split_labels_minus_one_are_none(both, task):
    glue = both(task, splits=("test",))
    hub, _, _ = load_splits(task, ["test"], source="hub")
    assert all(e.label is None for e in hub["test"])
    assert hub["test"] == load_split(task, "test", glue)


def test_hand_checked_conventions(both):
    """Values written by hand: MRPC 1 = equivalent, STS-B float32 3.8 read back as 3.8,
    SQuAD answers as (text, start) pairs, SST-5 label 0 = very negative."""
    mrpc = examples_from_columns("mrpc", "dev", {
        "sentence1": ["a"], "sentence2": ["b"], "label": [1], "idx": [7]})
    assert (mrpc[0].guid, mrpc[0].label) == ("dev-7", 1)
    assert get_task("mrpc").label_list[1] == "1"  # MRPC's local Quality column: 1 = paraphrase
    stsb = Dataset.from_dict({"sentence1": ["a"], "sentence2": ["b"], "label": [3.8], "idx": [0]},
                             features=Features({"sentence1": Value("string"),
                                                "sentence2": Value("string"),
                                                "label": Value("float32"),
                                                "idx": Value("int32")}))
    raw = stsb.to_dict()["label"][0]
    assert raw != 3.8  # float32 storage
    assert examples_from_columns("stsb", "train", stsb.to_dict())[0].label == 3.8
    squad = examples_from_columns("squad", "dev", {
        "id": ["5733be"], "question": ["Who?"], "context": ["Saint Bernadette Soubirous"],
        "answers": [{"text": ["Saint Bernadette Soubirous", "Bernadette"],
                     "answer_start": [0, 6]}]})
    assert squad[0].guid == "5733be" and squad[0].label is None
    assert [(a.text, a.start) for a in squad[0].answers] == [
        ("Saint Bernadette Soubirous", 0), ("Bernadette", 6)]
    sst5 = examples_from_columns("sst5", "train", {
        "text": ["x", "y"], "label": [0, 4], "label_text": ["very negative", "very positive"]})
    assert [(e.guid, e.label) for e in sst5] == [("train-0", 0), ("train-1", 4)]


def test_bad_hub_rows_name_where(both):
    with pytest.raises(ValueError, match=r"hub\[0\]: label 2 is outside 0..1"):
        examples_from_columns("rte", "dev", {"sentence1": ["a"], "sentence2": ["b"],
                                             "label": [2], "idx": [0]})
    with pytest.raises(ValueError, match="no column 'sentence2'"):
        examples_from_columns("rte", "dev", {"sentence1": ["a"], "label": [0], "idx": [0]})
    with pytest.raises(ValueError, match="label_text is 'neutral'"):
        examples_from_columns("sst5", "dev", {"text": ["a"], "label": [0],
                                              "label_text": ["neutral"]})
    with pytest.raises(ValueError, match="answer_start = 9 lies outside"):
        examples_from_columns("squad", "dev", {"id": ["1"], "question": ["q"], "context": ["c"],
                                               "answers": [{"text": ["c"],
                                                            "answer_start": [9]}]})
    with pytest.raises(ValueError, match="rajpurkar/squad has no 'test' split"):
        load_splits("squad", ["test"], source="hub")
    both("mrpc", splits=("dev",))
    stored = datasets.load_dataset("nyu-mll/glue", "mrpc")  # the stand-in, changed in place
    dev = stored["validation"]
    stored["validation"] = Dataset.from_dict(dev.to_dict(), features=Features(
        {**dev.features, "label": ClassLabel(names=["equivalent", "not_equivalent"])}))
    with pytest.raises(ValueError, match="changed its label convention"):
        load_splits("mrpc", ["dev"], source="hub")


def _ours(glue, source, **kw) -> IsotropyArguments:
    return IsotropyArguments(task="sst2", data_dir=str(glue), data_source=source, **kw)


@pytest.mark.parametrize("kw", [
    {},
    {"max_train_samples": 4, "max_eval_samples": 3},
    {"split_dev_for_training": 0.6},
    {"split_dev_for_training": 0.6, "max_train_samples": 2, "max_eval_samples": 1},
])
def test_load_task_data_treats_both_sources_alike(both, kw):
    glue = both("sst2")
    local = load_task_data(_ours(glue, "local", **kw), seed=5)
    hub = load_task_data(_ours(glue, "hub", **kw), seed=5)
    assert hub.train == local.train and hub.eval == local.eval
    f = kw.get("split_dev_for_training")
    n_train = round(f * SIZES["dev"]) if f else SIZES["train"]
    n_eval = SIZES["dev"] - n_train if f else SIZES["dev"]
    assert len(local.train) == min(n_train, kw.get("max_train_samples", n_train))
    assert len(local.eval) == min(n_eval, kw.get("max_eval_samples", n_eval))
    same = ("split_dev_for_training", "split_seed", "n_train_available", "n_eval_available",
            "n_train", "n_eval", "subset_seeds", "task")
    assert {k: hub.source.get(k) for k in same} == {k: local.source.get(k) for k in same}
    assert hub.source["dataset"] == "nyu-mll/glue" and hub.source["config"] == "sst2"
    if f:
        assert hub.source["train_split"] == hub.source["eval_split"] == "validation"
        assert local.source["train_file"] == local.source["eval_file"]
    else:
        assert (hub.source["train_split"], hub.source["eval_split"]) == ("train", "validation")


def test_revision_is_the_cached_commit(tmp_path, monkeypatch):
    """A split loaded from datasets' cache (``<name>/<config>/<version>/<commit>/``) records
    that commit."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    rows = _rows("rte", "dev", seed=1)
    where = tmp_path / "nyu-mll___glue" / "rte" / "0.0.0" / commit / "validation"
    _hub_split("rte", "dev", rows).save_to_disk(str(where))
    cached = DatasetDict({"validation": datasets.load_from_disk(str(where))})
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: cached)
    _, info, _ = load_splits("rte", ["dev"], source="hub")
    assert info["revision"] == commit


def test_unreachable_hub_is_one_clear_line(tmp_path, monkeypatch):
    """The real ``datasets.load_dataset`` with HF_HUB_OFFLINE=1 and an empty cache."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    with pytest.raises(HubUnavailableError) as info:
        load_splits("rte", ["dev"], source="hub")
    msg = str(info.value)
    assert "\n" not in msg and "nyu-mll/glue/rte" in msg and "HF_HUB_OFFLINE" in msg
    assert "pip install 'isotropy[hub]'" in msg and "--data_source local --data_dir DIR" in msg
    assert isinstance(info.value, ValueError) and isinstance(info.value, ConnectionError)


def test_unreachable_hub_stops_train_before_any_work(tmp_path, monkeypatch, capsys):
    """``isotropy train --data_source hub`` offline: exit 2 with the one line, nothing
    written, the (bogus) model never looked at."""
    from isotropy.cli.train import main as train_main

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'nyu-mll/glue' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    out = tmp_path / "run"
    code = train_main(["--task", "sst2", "--data_source", "hub", "--model",
                       str(tmp_path / "no-model"), "--output_dir", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and not out.exists()
    assert err.count("\n") == 0 and "could not load the hub dataset nyu-mll/glue/sst2" in err
    assert "--data_source local --data_dir DIR" in err


def test_missing_datasets_package_is_caught_when_parsing(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import fails, find_spec is None
    with pytest.raises(ValueError, match=r"pip install 'isotropy\[hub\]'.*--data_source local "
                                         r"--data_dir DIR"):
        IsotropyArguments(task="rte", data_source="hub")
    assert IsotropyArguments(task="rte").data_source == "local"  # local needs no datasets
    with pytest.raises(ValueError, match="--data_source must be one of local, hub"):
        IsotropyArguments(task="rte", data_source="s3")


def test_squad_dev_split_keeps_each_paragraph_on_one_side(tmp_path):
    """SQuAD has several questions per context paragraph: a split by question would train on
    the paragraphs it evaluates on."""
    paragraphs = []
    for p in range(10):
        context = f"paragraph {p} says that the answer is word{p} and nothing else"
        qas = [{"id": f"p{p}q{q}", "question": f"question {q} on paragraph {p}?",
                "answers": [{"text": f"word{p}", "answer_start": context.index(f"word{p}")}]}
               for q in range(1 + p % 4)]
        paragraphs.append({"context": context, "qas": qas})
    (tmp_path / "SQuAD").mkdir()
    (tmp_path / "SQuAD" / "dev-v1.1.json").write_text(json.dumps(
        {"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}))
    iso_args = IsotropyArguments(task="squad", data_dir=str(tmp_path), split_dev_for_training=0.7)
    data = load_task_data(iso_args, seed=3)
    train_ctx = {e.text_b for e in data.train}
    eval_ctx = {e.text_b for e in data.eval}
    assert train_ctx.isdisjoint(eval_ctx)
    assert len(train_ctx) == 7 and len(eval_ctx) == 3  # round(0.7 * 10) paragraphs
    n_questions = sum(1 + p % 4 for p in range(10))
    assert sorted(e.guid for e in [*data.train, *data.eval]) == sorted(
        f"p{p}q{q}" for p in range(10) for q in range(1 + p % 4))
    assert len(data.train) + len(data.eval) == n_questions
    assert data.source["split_unit"] == "context paragraph"
    again = load_task_data(iso_args, seed=3)
    assert [e.guid for e in again.train] == [e.guid for e in data.train]


@pytest.mark.parametrize("source", ["local", "hub"])
def test_a_validation_split_is_held_out_of_train_and_the_dev_split_is_not_read(both, source,
                                                                              monkeypatch):
    import isotropy.data.sources as sources

    glue = both("sst2")
    read = []
    load = sources.load_splits

    def spy(task, splits, **kw):
        read.extend(splits)
        return load(task, splits, **kw)

    monkeypatch.setattr(sources, "load_splits", spy)
    data = load_task_data(_ours(glue, source, validation_split_percentage=25), seed=5)
    assert read == ["train"]
    whole = load_task_data(_ours(glue, source), seed=5).train
    assert len(data.eval) == SIZES["train"] - round(0.75 * SIZES["train"])
    assert len(data.train) + len(data.eval) == len(whole)
    assert {e.guid for e in data.train}.isdisjoint(e.guid for e in data.eval)
    assert {e.guid for e in data.train} | {e.guid for e in data.eval} == {e.guid for e in whole}
    key = "file" if source == "local" else "split"
    assert data.source[f"eval_{key}"] == data.source[f"train_{key}"]
    assert data.source["validation_split_percentage"] == 25 and data.source["split_seed"] == 5
    again = load_task_data(_ours(glue, source, validation_split_percentage=25), seed=5)
    assert [e.guid for e in again.eval] == [e.guid for e in data.eval]  # seeded


@pytest.mark.parametrize(("kw", "message"), [
    ({"validation_split_percentage": 0}, r"must be an integer in \[1, 99\], got 0"),
    ({"validation_split_percentage": 100}, r"must be an integer in \[1, 99\], got 100"),
    ({"validation_split_percentage": 10, "split_dev_for_training": 0.5}, "exclude each other"),
])
def test_a_validation_split_is_checked_before_any_work(kw, message):
    with pytest.raises(ValueError, match=message):
        IsotropyArguments(task="rte", **kw)


@pytest.mark.parametrize(("unlabelled", "kw"), [("train", {}), ("dev", {}),
                                               ("dev", {"split_dev_for_training": 0.5})])
def test_a_split_without_labels_is_named_with_its_file(tmp_path, unlabelled, kw):
    """A file without its label column (a GLUE test file under a train or dev name): one line
    naming the file and the column, before any split or subset hides which file it was."""
    labelled = "sentence\tlabel\n" + "".join(f"w{i}\t{i % 2}\n" for i in range(6))
    for split in ("train", "dev"):
        text = ("sentence\n" + "".join(f"w{i}\n" for i in range(6)) if split == unlabelled
                else labelled)
        (tmp_path / "SST-2").mkdir(exist_ok=True)
        (tmp_path / "SST-2" / f"{split}.tsv").write_text(text, encoding="utf-8")
    path = tmp_path / "SST-2" / f"{unlabelled}.tsv"
    with pytest.raises(ValueError) as err:
        load_task_data(_ours(tmp_path, "local", **kw), seed=5)
    assert str(err.value) == (f"{path}: SST-2's {unlabelled} split has no labels (no column "
                              "'label'): training and its evaluation need labelled examples")
