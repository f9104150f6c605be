"""Representation measurements of ``isotropy train``: the evaluation accumulator against
independent routes (NumPy eigenvalues and SVD, the reference IsoScore package, scikit-dimension),
undefined values, and what a tiny-BERT run writes (metrics, measurements.jsonl, training logs)."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
import torch
from _models import save_tiny_bert
from _reference import iota, mean_cosine, skdim_twonn, spd, spectrum
from _training import WORDS, write_sst2
from _training import Crash as _Crash
from _training import run_train as _run
from _training import train_argv as _argv

from isotropy.probing.eval_measures import (
    NONFINITE,
    EvalMeasures,
    cls_spectrum_logs,
    scalar_metrics,
)
from isotropy.rundir import RunDirectory


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread avoids oversubscription."""


@pytest.fixture(scope="module")
def word_model_dir(tmp_path_factory):
    """A saved tiny random BERT whose WordPiece tokenizer knows ``WORDS`` (given as ``vocab=``:
    transformers 5 ignores ``vocab_file=`` and maps every word to [UNK]), so that different
    sentences give different [CLS] states."""
    from transformers import AutoTokenizer

    out = save_tiny_bert(tmp_path_factory.mktemp("word_bert"), WORDS)
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.unk_token_id not in tok("good movie")["input_ids"]
    return out


@pytest.fixture(scope="module")
def sst2_dir(tmp_path_factory):
    """SST-2 train (48 rows) and dev (24 rows) files in the glue_data layout."""
    return write_sst2(tmp_path_factory.mktemp("glue"), [("train", 48), ("dev", 24)], 0)


def _batches(d: int = 6, n_states: int = 3, seed: int = 0):
    """Batches of hidden states with right and left padding; padding holds NaN (never read)."""
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(d, d, generator=g, dtype=torch.float64) * torch.linspace(0.2, 2.0, d)
    out = []
    for batch, seq, left in ((5, 7, False), (4, 9, True), (6, 4, False)):
        lengths = torch.randint(2, seq + 1, (batch,), generator=g)
        pos = torch.arange(seq)[None, :]
        mask = (pos >= seq - lengths[:, None]) if left else (pos < lengths[:, None])
        hs = []
        for layer in range(n_states):
            h = (torch.randn(batch, seq, d, generator=g, dtype=torch.float64) @ mix
                 + layer).float()
            h[~mask] = float("nan")
            hs.append(h)
        out.append((hs, mask.long()))
    return out


def _clouds(batches, max_tokens: int):
    """Per layer: the first ``max_tokens`` token rows and every example's first real token."""
    n_states = len(batches[0][0])
    tokens, cls = [[] for _ in range(n_states)], [[] for _ in range(n_states)]
    for hs, mask in batches:
        m = mask.bool().numpy()
        for i, h in enumerate(hs):
            a = h.double().numpy()
            tokens[i].append(a[m])
            cls[i].append(np.stack([a[b][m[b]][0] for b in range(len(a))]))
    return ([np.concatenate(t)[:max_tokens] for t in tokens], [np.concatenate(c) for c in cls])


# ----------------------------------------------------------------------------- accumulator


@pytest.mark.parametrize("zeta", [0.0, 0.3])
def test_accumulator_matches_independent_routes(zeta):
    d, max_tokens = 6, 40  # the cap falls inside the second batch
    batches = _batches(d)
    s = spd(d, seed=5)
    acc = EvalMeasures(max_tokens=max_tokens, top_k=4, zeta=zeta, shrinkage=torch.tensor(s))
    for hs, mask in batches:
        acc.update(hs, mask)
    rec = acc.compute()
    tokens, cls = _clouds(batches, max_tokens)
    n_total = sum(int(m.sum()) for _, m in batches)
    assert n_total > max_tokens
    assert (rec["n_examples"], rec["n_tokens"], rec["n_tokens_measured"]) == (15, n_total, 40)
    assert rec["num_layers"] == 2
    # Gaussian clouds: where the average cosine is within noise of 0, no rogue shares
    assert all(" rogue_dims: the average cosine similarity" in e for e in rec["errors"])

    def star(x: np.ndarray) -> float:
        return iota((1 - zeta) * np.cov(x, rowvar=False) + zeta * s)

    for i in range(3):
        tok, c = rec["layers"][i]["token"], rec["layers"][i]["cls"]
        assert tok["n_points"] == max_tokens and c["n_points"] == 15
        assert tok["isoscore"] == pytest.approx(iota(np.cov(tokens[i], rowvar=False)), abs=1e-6)
        assert tok["isoscore_star"] == pytest.approx(star(tokens[i]), abs=1e-6)
        assert tok["avg_cosine"] == pytest.approx(mean_cosine(tokens[i]), abs=1e-9)
        assert c["isoscore"] == pytest.approx(iota(np.cov(cls[i], rowvar=False)), abs=1e-6)
        assert c["isoscore_star"] == pytest.approx(star(cls[i]), abs=1e-6)
        assert c["avg_cosine"] == pytest.approx(mean_cosine(cls[i]), abs=1e-6)
        assert c["twonn"] == pytest.approx(skdim_twonn(cls[i]), rel=1e-5)
    union = np.concatenate(tokens[1:])
    assert rec["union"]["n_points"] == 2 * max_tokens
    assert rec["union"]["isoscore"] == pytest.approx(iota(np.cov(union, rowvar=False)), abs=1e-6)
    assert rec["union"]["isoscore_star"] == pytest.approx(star(union), abs=1e-6)
    assert rec["union"]["avg_cosine"] == pytest.approx(mean_cosine(union), abs=1e-9)
    last = rec["last"]
    np.testing.assert_allclose(last["cls_spectrum_raw"], spectrum(cls[2], 4, False), atol=1e-6)
    np.testing.assert_allclose(last["cls_spectrum_centred"], spectrum(cls[2], 4, True),
                               atol=1e-6)
    np.testing.assert_allclose(last["token_mean"], tokens[2].mean(0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(last["token_std"], tokens[2].std(0, ddof=1), rtol=1e-6)
    if zeta == 0.0:  # no shrinkage: IsoScore* is IsoScore
        assert rec["union"]["isoscore_star"] == pytest.approx(rec["union"]["isoscore"], abs=1e-12)
    json.dumps(rec, allow_nan=False)


def test_isoscore_star_matches_the_reference_package():
    ref = pytest.importorskip("IsoScore.IsoScore")
    batches = _batches(6, seed=2)
    s = spd(6, seed=7)
    acc = EvalMeasures(max_tokens=1000, zeta=0.4, shrinkage=s)
    for hs, mask in batches:
        acc.update(hs, mask)
    rec = acc.compute()
    tokens, cls = _clouds(batches, 1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs_tok = float(ref.IsoScore_star(tokens[2], torch.tensor(s), 0.4))
        theirs_cls = float(ref.IsoScore_star(cls[1], torch.tensor(s), 0.4))
    assert rec["layers"][2]["token"]["isoscore_star"] == pytest.approx(theirs_tok, abs=1e-6)
    assert rec["layers"][1]["cls"]["isoscore_star"] == pytest.approx(theirs_cls, abs=1e-6)


def test_rows_past_the_dataset_size_are_dropped():
    """``dataset_size`` = 12 of the 15 rows fed: the record is that of the first 12 examples
    (NumPy on them), as if the last 3 (padding duplicates) had never come."""
    batches = _batches(6, seed=4)
    acc = EvalMeasures(max_tokens=1000, top_k=3, dataset_size=12)
    for hs, mask in batches:
        acc.update(hs, mask)
    rec = acc.compute()
    m = [mask.bool().numpy() for _, mask in batches]
    keep = [(hs[2].double().numpy()[b], mk[b]) for (hs, _), mk in zip(batches, m, strict=True)
            for b in range(len(mk))][:12]
    tokens = np.concatenate([h[k] for h, k in keep])
    cls = np.stack([h[k][0] for h, k in keep])
    assert (rec["n_examples"], rec["n_tokens"]) == (12, len(tokens))
    last = rec["layers"][2]
    assert last["cls"]["n_points"] == 12 and last["token"]["n_points"] == len(tokens)
    assert last["token"]["isoscore"] == pytest.approx(iota(np.cov(tokens, rowvar=False)),
                                                      abs=1e-6)
    assert last["cls"]["twonn"] == pytest.approx(skdim_twonn(cls), rel=1e-5)
    np.testing.assert_allclose(rec["last"]["cls_spectrum_centred"], spectrum(cls, 3, True),
                               atol=1e-6)
    np.testing.assert_allclose(rec["last"]["token_std"], tokens.std(0, ddof=1), rtol=1e-6)
    with pytest.raises(ValueError, match="dataset_size must be a non-negative integer"):
        EvalMeasures(dataset_size=-1)


def test_sigma_s_is_checked_once(monkeypatch):
    """The positive semi-definiteness of Sigma_S is proved when it enters; computing the
    record (IsoScore* of every cloud) does not prove it again."""
    import isotropy._validation as validation

    s = torch.tensor(spd(6, seed=1))
    acc = EvalMeasures(max_tokens=100, zeta=0.3, shrinkage=s)
    for hs, mask in _batches(6):
        acc.update(hs, mask)
    proofs: list[torch.Tensor] = []  # every matrix proved PSD (the covariances too)
    original = validation._remember_psd
    monkeypatch.setattr(validation, "_remember_psd", lambda t: (proofs.append(t), original(t)))
    rec = acc.compute()
    assert rec["union"]["isoscore_star"] is not None
    # IsoScore's own check of each cloud's covariance (the outlier view's IsoScore without
    # the top-variance dimensions works on those covariances' submatrices: not proved again)
    assert len(proofs) == 7
    assert not any(torch.equal(p, s) for p in proofs)
    validation.check_psd(s.clone(), name="S")  # a new tensor is proved (the route counts)
    assert torch.equal(proofs[-1], s)


def test_scalar_names_follow_the_record():
    acc = EvalMeasures(max_tokens=100, zeta=0.2, shrinkage=np.eye(6))
    for hs, mask in _batches(6):
        acc.update(hs, mask)
    rec = acc.compute()
    out = scalar_metrics(rec)
    assert out["isoscore_last"] == rec["layers"][2]["token"]["isoscore"]
    assert out["isoscore_union"] == rec["union"]["isoscore"]
    assert out["isoscore_star_cls_last"] == rec["layers"][2]["cls"]["isoscore_star"]
    assert out["twonn_cls_layer1"] == rec["layers"][1]["cls"]["twonn"]
    assert out["cosine_last"] == rec["layers"][2]["token"]["avg_cosine"]
    per_layer = {f"{m}_layer{i}" for i in range(3) for m in
                 ("isoscore_star_token", "isoscore_star_cls", "twonn_cls")}
    assert per_layer <= set(out)
    assert all(isinstance(v, float) and math.isfinite(v) for v in out.values())


def test_undefined_values_are_none_with_a_reason():
    g = torch.Generator().manual_seed(0)
    point = torch.randn(5, generator=g)
    const = point.expand(2, 4, 5).clone()  # every token the same point: zero variance
    const[0, 1, 2] = torch.nextafter(const[0, 1, 2], torch.tensor(9.0))  # float32 rounding
    varied = torch.randn(2, 4, 5, generator=g)
    bad = varied.clone()
    bad[1, 0, 3] = float("inf")
    varied[0, 2] = 0.0  # a token of norm zero: no direction, so no cosine
    acc = EvalMeasures(max_tokens=100, zeta=0.5)  # zeta > 0 and no Sigma_S
    acc.update([const, varied, bad], torch.ones(2, 4, dtype=torch.long))
    rec = acc.compute()
    json.dumps(rec, allow_nan=False)  # no NaN anywhere
    l0, l1, l2 = rec["layers"]
    for cloud in ("token", "cls"):
        assert l0[cloud]["isoscore"] is None and l0[cloud]["isoscore_star"] is None
        assert l0[cloud]["avg_cosine"] == pytest.approx(1.0)  # defined: one direction
        assert l1[cloud]["isoscore"] is not None and l1[cloud]["isoscore_star"] is None
        assert all(v is None for k, v in l2[cloud].items() if k != "n_points")
    assert l0["cls"]["twonn"] is None and l1["cls"]["twonn"] is None  # 2 points: too few
    assert l1["token"]["avg_cosine"] is None and l1["cls"]["avg_cosine"] is not None
    last = rec["last"]
    assert last["cls_spectrum_raw"] is None and last["token_mean"] is None
    assert last["token_std"] is None
    errors = rec["errors"]
    assert "layer 0 token isoscore: zero variance: all points identical" in errors
    assert "layer 1 token isoscore_star: no Sigma_S given (zeta > 0 needs one)" in errors
    assert f"layer 2 cls twonn: {NONFINITE}" in errors
    assert f"union token isoscore: {NONFINITE}" in errors
    assert "layer 1 cls twonn: X has 2 point(s); at least 3 are needed" in errors
    assert ("layer 1 token avg_cosine: 1 token vector(s) have norm zero: cosine similarity is "
            "undefined") in errors
    assert scalar_metrics(rec) == {}  # every scalar is undefined here, none is NaN


def test_a_single_example_and_bad_input():
    acc = EvalMeasures(max_tokens=10)
    acc.update([torch.randn(1, 3, 4), torch.randn(1, 3, 4)], torch.tensor([[1, 1, 0]]))
    rec = acc.compute()
    c = rec["layers"][1]["cls"]
    assert c["n_points"] == 1 and c["isoscore"] is None and c["twonn"] is None
    assert "layer 1 cls isoscore: 1 point(s): at least 2 are needed" in rec["errors"]
    assert rec["last"]["cls_spectrum_raw"] == pytest.approx([1.0])  # one point: all energy
    assert rec["last"]["cls_spectrum_centred"] is None
    with pytest.raises(ValueError, match="earlier batches had 2"):
        acc.update([torch.randn(1, 3, 4)] * 3, None)
    with pytest.raises(ValueError, match="attention_mask shape"):
        acc.update([torch.randn(1, 3, 4)] * 2, torch.ones(1, 4))
    with pytest.raises(ValueError, match="at least one update"):
        EvalMeasures().compute()
    with pytest.raises(ValueError, match="max_tokens"):
        EvalMeasures(max_tokens=0)
    with pytest.raises(ValueError, match="zeta"):
        EvalMeasures(zeta=1.5)
    with pytest.raises(ValueError, match="positive semi-definite"):
        EvalMeasures(zeta=0.2, shrinkage=torch.tensor([[1.0, 2.0], [2.0, 1.0]]))
    acc.reset()
    with pytest.raises(ValueError, match="at least one update"):
        acc.compute()


def test_batch_cls_spectrum_logs():
    x = torch.randn(7, 5, generator=torch.Generator().manual_seed(3))
    logs = cls_spectrum_logs(x, k=3)
    a = x.double().numpy()
    assert [logs[f"cls_spectrum_raw_{i}"] for i in (1, 2, 3)] == pytest.approx(
        spectrum(a, 3, False).tolist(), abs=1e-6)
    assert [logs[f"cls_spectrum_centred_{i}"] for i in (1, 2, 3)] == pytest.approx(
        spectrum(a, 3, True).tolist(), abs=1e-6)
    # two points: one direction after centring, the other shares are zero singular values
    two = cls_spectrum_logs(x[:2], k=3)
    assert [two[f"cls_spectrum_centred_{i}"] for i in (1, 2, 3)] == pytest.approx([1, 0, 0])
    one = cls_spectrum_logs(x[:1], k=3)
    assert one == pytest.approx({"cls_spectrum_raw_1": 1.0, "cls_spectrum_raw_2": 0.0,
                                 "cls_spectrum_raw_3": 0.0})


def test_run_directory_measurements_file(tmp_path):
    rd = RunDirectory(tmp_path)
    for step in (2, 4, 6):
        rd.append_measurements({"step": step, "x": [step, None]})
    assert [r["step"] for r in rd.read_measurements()] == [2, 4, 6]
    rd.truncate_measurements(4)
    assert rd.read_measurements() == [{"step": 2, "x": [2, None]}, {"step": 4, "x": [4, None]}]
    assert rd.read_metrics() == []


# ----------------------------------------------------------------------------- training runs

EVAL_KEYS = {"isoscore_last", "isoscore_union", "isoscore_star_last", "isoscore_star_union",
             "isoscore_star_cls_last", "twonn_cls_last", "cosine_last",
             "isoscore_star_token_layer0", "isoscore_star_token_layer1",
             "isoscore_star_token_layer2", "isoscore_star_cls_layer1",
             "isoscore_star_cls_layer2", "twonn_cls_layer1", "twonn_cls_layer2"}
SPECTRUM_KEYS = [f"cls_spectrum_{kind}_{i}" for kind in ("raw", "centred") for i in (1, 2, 3)]


def _logs(out):
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("reg", ["none", "istar"])
def test_training_run_records_the_measurements(word_model_dir, sst2_dir, tmp_path, reg):
    out = tmp_path / "run"
    own = ["--zeta", "0.8", "--istar_layers", "1"] if reg == "istar" else []  # not measured with
    res = _run(_argv(word_model_dir, sst2_dir, out, "--task", "sst2", "--regularizer", reg,
                     "--max_train_samples", "32", *own))
    logs = _logs(out)
    evals = [r for r in logs if "eval_loss" in r]
    train_logs = [r for r in logs if "loss" in r]
    assert [r["step"] for r in evals] == [4, 8] and len(train_logs) == 4
    for r in evals:
        assert {f"eval_{k}" for k in EVAL_KEYS} <= set(r)
        assert "eval_twonn_cls_layer0" not in r  # the layer-0 [CLS] cloud is one point
        assert all(0 <= r[f"eval_{k}"] <= 1 for k in EVAL_KEYS if "isoscore" in k)
    for r in train_logs:
        values = [r[k] for k in SPECTRUM_KEYS]
        assert all(0 <= v <= 1 for v in values)
        assert values[0] >= values[1] >= values[2] and sum(values[:3]) <= 1 + 1e-9
    records = RunDirectory(out).read_measurements()
    assert [(m["step"], m["epoch"]) for m in records] == [(4, 1.0), (8, 2.0)]
    for m, r in zip(records, evals, strict=True):
        assert m["union"]["isoscore_star"] == pytest.approx(r["eval_isoscore_star_union"])
        assert m["layers"][2]["cls"]["twonn"] == pytest.approx(r["eval_twonn_cls_last"])
        assert "layer 0 cls twonn: zero variance: all points identical" in m["errors"]
    assert res.results["measurements"] == records[-1]
    # every run measures with the same zeta and a Sigma_S of the same kind, I-STAR included
    src = records[-1]["shrinkage"]
    assert (src["source"], src["epoch"], src["n_rows"]) == ("training data", 1, 300)
    assert records[-1]["zeta"] == 0.2
    _check_against_the_saved_model(out, sst2_dir, records[-1])


def _check_against_the_saved_model(out, glue, rec):
    """The final evaluation's [CLS] and token measures, recomputed one example at a time
    (no padding) from the saved model: skdim TwoNN, NumPy SVD spectra, mean/std, cosine."""
    import csv

    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(out / "model").eval()
    tok = AutoTokenizer.from_pretrained(out / "model")
    with (glue / "SST-2" / "dev.tsv").open() as f:
        sentences = [r["sentence"] for r in csv.DictReader(f, delimiter="\t")]
    cls, tokens = [], []
    with torch.no_grad():
        for s in sentences:
            h = model(**tok(s, truncation=True, max_length=24, return_tensors="pt"),
                      output_hidden_states=True).hidden_states[-1][0].double().numpy()
            cls.append(h[0])
            tokens.append(h)
    cls, tokens = np.stack(cls), np.concatenate(tokens)
    last = rec["last"]
    assert rec["layers"][2]["cls"]["twonn"] == pytest.approx(skdim_twonn(cls), rel=1e-5)
    np.testing.assert_allclose(last["cls_spectrum_raw"], spectrum(cls, 10, False), atol=1e-5)
    np.testing.assert_allclose(last["cls_spectrum_centred"], spectrum(cls, 10, True), atol=1e-5)
    np.testing.assert_allclose(last["token_mean"], tokens.mean(0), atol=1e-5)
    np.testing.assert_allclose(last["token_std"], tokens.std(0, ddof=1), atol=1e-5)
    assert rec["layers"][2]["token"]["avg_cosine"] == pytest.approx(mean_cosine(tokens), abs=1e-5)


@pytest.mark.slow
def test_sigma_s_pass_leaves_training_unchanged(word_model_dir, sst2_dir, tmp_path):
    """measure_zeta = 0 needs no Sigma_S (IsoScore* = IsoScore); the Sigma_S pass of
    measure_zeta > 0 changes nothing in training (same losses, same evaluation loss)."""
    runs = {}
    for zeta in ("0", "0.2"):
        out = tmp_path / f"z{zeta}"
        _run(_argv(word_model_dir, sst2_dir, out, "--task", "sst2", "--measure_zeta", zeta,
                   "--max_train_samples", "32"))
        runs[zeta] = (_logs(out), RunDirectory(out).read_measurements())
    logs0, meas0 = runs["0"]
    assert meas0[-1]["shrinkage"] == {"source": "none (zeta = 0)"}
    final0 = [r for r in logs0 if "eval_loss" in r][-1]
    assert final0["eval_isoscore_star_union"] == pytest.approx(final0["eval_isoscore_union"],
                                                              abs=1e-12)
    logs2, meas2 = runs["0.2"]
    assert meas2[0]["shrinkage"]["source"] == "training data"
    for a, b in zip(logs0, logs2, strict=True):
        for key in ("loss", "eval_loss", "cls_spectrum_raw_1"):
            assert a.get(key) == b.get(key), key


@pytest.mark.slow
def test_resume_truncates_the_measurements(word_model_dir, sst2_dir, tmp_path):
    extra = ["--task", "sst2", "--max_train_samples", "32", "--save_strategy", "steps",
             "--save_steps", "3"]
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="simulated crash"):
        _run(_argv(word_model_dir, sst2_dir, out, *extra), callbacks=[_Crash(5)])
    assert [m["step"] for m in RunDirectory(out).read_measurements()] == [4]
    _run(_argv(word_model_dir, sst2_dir, out, *extra, "--resume"))
    assert [m["step"] for m in RunDirectory(out).read_measurements()] == [4, 8]


# ----------------------------------------------------------------------------- per-layer Sigma_S


@pytest.mark.parametrize("zeta", [0.2, 0.7, 1.0])
def test_per_layer_sigma_s_of_the_measured_split_gives_isoscore(zeta):
    """Sigma_S estimated on the very clouds measured (every token, every example): every
    layer's IsoScore* (token and pooled clouds) and the union's equal their IsoScore, since
    (1 - zeta) Sigma_X + zeta Sigma_X = Sigma_X (to float32 accumulation: the statistics
    are summed batch by batch in one route, at once in the other). A union Sigma_S would
    not (checked too)."""
    from _models import random_inputs, tiny_bert
    from transformers import BertModel

    from isotropy.models.shrinkage import collect_layer_shrinkage

    model = tiny_bert(BertModel, vocab_size=50).eval()
    g = torch.Generator().manual_seed(3)
    batches = [random_inputs(g, batch=8, seq=9, vocab_size=50, min_length=3) for _ in range(5)]
    n_rows = 2 * sum(int(b["attention_mask"].sum()) for b in batches)
    shrink = collect_layer_shrinkage(model, batches, n_tokens=n_rows)
    rec = {}
    for name, sigma in (("layer", shrink), ("union", shrink.covariances()["union"])):
        acc = EvalMeasures(max_tokens=10_000, zeta=zeta, shrinkage=sigma)
        with torch.no_grad():
            for b in batches:
                acc.update(model(**b, output_hidden_states=True).hidden_states,
                           b["attention_mask"])
        rec[name] = acc.compute()
    per_layer = rec["layer"]
    assert per_layer["sigma_s"] == "per layer"
    assert rec["union"]["sigma_s"] == "one for every cloud"
    for row in per_layer["layers"][1:]:
        for cloud in ("token", "cls"):
            assert row[cloud]["isoscore_star"] == pytest.approx(row[cloud]["isoscore"],
                                                                abs=1e-7), (row["layer"], cloud)
    assert per_layer["layers"][0]["token"]["isoscore_star"] == pytest.approx(
        per_layer["layers"][0]["token"]["isoscore"], abs=1e-7)
    assert per_layer["union"]["isoscore_star"] == pytest.approx(
        per_layer["union"]["isoscore"], abs=1e-7)
    assert per_layer["union"]["isoscore_star"] == rec["union"]["union"]["isoscore_star"]
    # shrinking a layer's [CLS] cloud toward the union's Sigma_S measures something else
    last = rec["union"]["layers"][2]["cls"]
    assert abs(last["isoscore_star"] - last["isoscore"]) > 1e-3


def test_per_layer_sigma_s_must_match_the_pooling():
    from isotropy.models.shrinkage import LayerShrinkage

    shrink = LayerShrinkage([], [], "cls")
    with pytest.raises(ValueError, match="'cls'-pooled rows but pooling is 'mean'"):
        EvalMeasures(zeta=0.2, shrinkage=shrink, pooling="mean")
