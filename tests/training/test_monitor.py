"""The geometry monitor: its numbers against hand-gathered clouds (the IsoScore package, an
SVD), its logs in a plain ``Trainer`` and in Lightning, and a training it leaves unchanged."""

from __future__ import annotations

import csv
import warnings

import numpy as np
import pytest
import torch
from _models import labelled_rows, tiny_bert

from isotropy.training.monitor import GeometryMonitor, measure_geometry

VOCAB = 30


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread avoids oversubscription."""


def _rows(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
    return labelled_rows(n, seed, vocab_size=VOCAB)


def _batches(rows, size=8):
    return [{k: torch.stack([r[k] for r in rows[i:i + size]]) for k in rows[0]}
            for i in range(0, len(rows), size)]


def _model(seed=0):
    from transformers import BertForSequenceClassification

    return tiny_bert(BertForSequenceClassification, vocab_size=VOCAB, seed=seed, num_labels=2)


def test_measures_match_clouds_gathered_by_hand():
    ref = pytest.importorskip("IsoScore.IsoScore")
    model, probe = _model().eval(), _batches(_rows(24, 1))
    got = measure_geometry(model, probe, zeta=0.0)
    tokens, cls = {1: [], 2: []}, []
    with torch.no_grad():
        for b in probe:
            hs = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                       output_hidden_states=True).hidden_states
            for i in (1, 2):
                tokens[i].append(hs[i][b["attention_mask"].bool()].double().numpy())
            cls.append(hs[2][:, 0].double().numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want_last = float(ref.IsoScore(np.concatenate(tokens[2])))
        want_union = float(ref.IsoScore(np.concatenate(tokens[1] + tokens[2])))
    assert got["isoscore_last"] == pytest.approx(want_last, abs=1e-6)
    assert got["isoscore_union"] == pytest.approx(want_union, abs=1e-6)
    x = np.concatenate(cls)
    s2 = np.linalg.svd(x, compute_uv=False) ** 2
    assert got["cls_spectrum_raw_1"] == pytest.approx(s2[0] / s2.sum(), rel=1e-5)
    c2 = np.linalg.svd(x - x.mean(0), compute_uv=False) ** 2
    assert got["cls_spectrum_centred_2"] == pytest.approx(c2[1] / c2.sum(), rel=1e-5)
    assert np.isfinite(got["twonn_cls_layer2"])
    # outlier dimensions of the last layer's tokens, by NumPy on the gathered cloud
    t2 = np.concatenate(tokens[2])
    var = t2.var(0)
    assert got["outliers_variance_token_layer2"] == int((var >= 5 * var.mean()).sum())
    m = np.abs(t2).mean(0)
    assert got["outliers_activation_token_layer2"] == int((m - m.mean() > 3 * m.std()).sum())
    assert got["massive_activations_token_layer2"] == 0
    u = t2 / np.linalg.norm(t2, axis=1, keepdims=True)
    cc = (u.sum(0) ** 2 - (u * u).sum(0)) / (len(u) * (len(u) - 1))
    assert got["rogue_share_1_token_layer2"] == pytest.approx(cc.max() / cc.sum(), rel=1e-6)


def test_isoscore_star_uses_each_layers_sigma_s_when_given_shrinkage_batches():
    model, probe = _model().eval(), _batches(_rows(24, 1))
    plain = measure_geometry(model, probe, zeta=0.0)
    star = measure_geometry(model, probe, shrinkage_batches=_batches(_rows(32, 2)), zeta=0.2)
    for i in (1, 2):
        assert 0.0 <= star[f"isoscore_star_token_layer{i}"] <= 1.0
    assert star["isoscore_star_token_layer2"] != pytest.approx(plain["isoscore_last"], abs=1e-6)
    # nothing shrunk: the per-layer values are plain IsoScore and named so, never *_star_*
    assert not [k for k in plain if k.startswith("isoscore_star")]
    assert plain["isoscore_token_layer2"] == plain["isoscore_last"]
    no_sigma = measure_geometry(model, probe, zeta=0.2)  # zeta without shrinkage_batches
    assert no_sigma.keys() == plain.keys()
    assert no_sigma["isoscore_cls_layer2"] == plain["isoscore_cls_last"]
    assert "isoscore_star_cls_last" in star and "isoscore_cls_last" not in star
    # zeta = 1: the batch covariance drops out, so IsoScore* is that of Sigma_S alone
    only_s = measure_geometry(model, probe, shrinkage_batches=_batches(_rows(32, 2)), zeta=1.0)
    other_probe = measure_geometry(model, _batches(_rows(16, 7)),
                                   shrinkage_batches=_batches(_rows(32, 2)), zeta=1.0)
    assert only_s["isoscore_star_token_layer2"] == pytest.approx(
        other_probe["isoscore_star_token_layer2"], abs=1e-9)


def _args(out, **kw):
    from transformers import TrainingArguments

    base = {"output_dir": str(out), "per_device_train_batch_size": 8, "learning_rate": 1e-3,
            "max_steps": 4, "logging_steps": 1, "save_strategy": "no", "report_to": "none",
            "use_cpu": True, "disable_tqdm": True, "seed": 0}
    base.update(kw)
    return TrainingArguments(**base)


def test_trainer_logs_the_geometry_at_its_interval_and_trains_the_same(tmp_path):
    from transformers import Trainer

    runs = {}
    for name in ("without", "with"):
        model = _model()
        trainer = Trainer(model=model, args=_args(tmp_path / name), train_dataset=_rows(32, 0))
        monitor = GeometryMonitor(_batches(_rows(16, 1)), every_n_steps=2, zeta=0.0)
        if name == "with":
            monitor.attach(trainer)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.train()
        runs[name] = (model, trainer, monitor)
    model, trainer, monitor = runs["with"]
    logged = [r for r in trainer.state.log_history if "geometry/isoscore_last" in r]
    assert [r["step"] for r in logged] == [2, 4]
    assert [s for s, _ in monitor.history] == [2, 4]
    assert logged[-1]["geometry/isoscore_last"] == monitor.history[-1][1]["geometry/isoscore_last"]
    # measured in eval mode without gradients: the training itself is unchanged
    for key, value in runs["without"][0].state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key
    # and the last measurement is the final model's
    assert logged[-1]["geometry/isoscore_last"] == pytest.approx(
        measure_geometry(model, _batches(_rows(16, 1)), zeta=0.0)["isoscore_last"], abs=1e-12)


def test_bad_monitor_settings_are_refused():
    with pytest.raises(ValueError, match="every_n_steps"):
        GeometryMonitor(_batches(_rows(8, 1)), every_n_steps=0)
    with pytest.raises(ValueError, match="no batch"):
        GeometryMonitor([], every_n_steps=5)
    # a malformed probe set at construction, not at the first measurement (step 500)
    batches = _batches(_rows(8, 1))
    for bad, match in ((batches[0], "got one dict"), ([batches[0]["input_ids"]], "not a dict"),
                       (_rows(8, 1), "un-collated")):
        with pytest.raises(ValueError, match=match):
            GeometryMonitor(bad, every_n_steps=5)
    monitor = GeometryMonitor(_batches(_rows(8, 1)), every_n_steps=1)
    from transformers import TrainerControl, TrainerState

    with pytest.raises(ValueError, match="attach"):
        monitor.on_step_end(None, TrainerState(global_step=1), TrainerControl(), model=_model())
    # added with add_callback instead of attach: refused as training starts, not at step 500
    with pytest.raises(ValueError, match="attach"):
        GeometryMonitor(_batches(_rows(8, 1))).on_train_begin(None, TrainerState(),
                                                              TrainerControl())
    # the measure's options, at construction (zeta even when no Sigma_S would use it)
    for bad, match in (({"zeta": 1.5}, "zeta"), ({"zeta": -0.1, "shrinkage_batches": []},
                                                  "zeta"),
                       ({"top_k": 0}, "top_k"), ({"max_tokens": 2.5}, "max_tokens"),
                       ({"pooling": "avg"}, "pooling"), ({"n_tokens": 1}, "n_tokens")):
        with pytest.raises(ValueError, match=match):
            GeometryMonitor(_batches(_rows(8, 1)), **bad)
    with pytest.raises(ValueError, match="zeta"):
        measure_geometry(_model(), _batches(_rows(8, 1)), zeta=1.5)


def test_lightning_monitor_logs_through_the_loggers(tmp_path):
    lightning = pytest.importorskip("lightning")
    from lightning.pytorch.loggers import CSVLogger
    from torch.utils.data import DataLoader

    from isotropy.training.monitor import LightningGeometryMonitor

    class Module(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = _model()

        def training_step(self, batch, _):
            return self.net(**batch).loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    monitor = LightningGeometryMonitor(_batches(_rows(16, 1)), every_n_steps=2, zeta=0.0,
                                       model=None)
    trainer = lightning.Trainer(max_steps=4, accelerator="cpu", devices=1,
                                logger=CSVLogger(str(tmp_path)), callbacks=[monitor],
                                enable_checkpointing=False, enable_progress_bar=False,
                                enable_model_summary=False, log_every_n_steps=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Module(), DataLoader(_rows(32, 0), batch_size=8))
    with open(next(tmp_path.rglob("metrics.csv")), newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("geometry/isoscore_last")]
    assert [int(r["step"]) for r in rows] == [2, 4]
    assert [s for s, _ in monitor.history] == [2, 4]
    assert float(rows[-1]["geometry/isoscore_last"]) == pytest.approx(
        monitor.history[-1][1]["geometry/isoscore_last"], rel=1e-6)


def test_a_measurement_at_a_logging_step_keeps_the_training_log(tmp_path):
    from transformers import Trainer

    trainer = Trainer(model=_model(), args=_args(tmp_path / "run", logging_steps=2),
                      train_dataset=_rows(32, 0))
    GeometryMonitor(_batches(_rows(16, 1)), every_n_steps=2, zeta=0.0).attach(trainer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    history = trainer.state.log_history
    assert [r["step"] for r in history if "loss" in r] == [2, 4]
    assert [r["step"] for r in history if "geometry/isoscore_last" in r] == [2, 4]


def test_the_console_shows_one_line_per_measurement_not_the_values(tmp_path, capsys):
    from transformers import Trainer

    trainer = Trainer(model=_model(), args=_args(tmp_path / "run", logging_steps=2,
                                                 disable_tqdm=True),  # PrinterCallback
                      train_dataset=_rows(32, 0))
    GeometryMonitor(_batches(_rows(16, 1)), every_n_steps=2, zeta=0.0).attach(trainer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "geometry" in line]
    assert len(lines) == 2 and all(len(line) < 120 for line in lines), lines
    assert lines[0].startswith("geometry: ") and "values logged at step 2" in lines[0]
    assert "'loss'" in out  # the Trainer's own logs are still printed
    # while log_history and the loggers get every value
    logged = [r for r in trainer.state.log_history if "geometry/isoscore_last" in r]
    assert [r["step"] for r in logged] == [2, 4] and len(logged[0]) > 10


def test_monitor_values_reach_tensorboard(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from transformers import Trainer

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))
    trainer = Trainer(model=_model(), args=_args(tmp_path / "run", report_to="tensorboard"),
                      train_dataset=_rows(32, 0))
    monitor = GeometryMonitor(_batches(_rows(16, 1)), every_n_steps=2, zeta=0.0).attach(trainer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    events = list((tmp_path / "tb").rglob("events.out.tfevents.*"))
    acc = EventAccumulator(str(events[0].parent), size_guidance={"scalars": 0})
    acc.Reload()
    written = {e.step: e.value for e in acc.Scalars("train/geometry/twonn_cls_layer2")}
    assert sorted(written) == [2, 4]
    for step, logs in monitor.history:
        assert written[step] == pytest.approx(logs["geometry/twonn_cls_layer2"], rel=1e-6)


def _attach(monitor: GeometryMonitor, model) -> list:
    """Attach ``monitor`` to a stand-in trainer (only ``model`` and ``add_callback`` are
    used); returns the callbacks it added."""
    from types import SimpleNamespace

    added: list = []
    monitor.attach(SimpleNamespace(model=model, add_callback=added.append))
    return added


def test_probes_the_model_cannot_take_are_refused_at_attach_in_one_line():
    good = _batches(_rows(8, 1))[0]
    long_ids = torch.ones(2, 40, dtype=torch.long)  # the tiny BERT has 32 positions
    empty = good["attention_mask"].clone()
    empty[3] = 0
    cases = {
        "embedding table has 30 rows": {**good, "input_ids": good["input_ids"] + VOCAB},
        "the id -1": {**good, "input_ids": good["input_ids"] - 1},
        "40 positions, but the model takes at most 32": {
            "input_ids": long_ids, "attention_mask": torch.ones_like(long_ids)},
        "token_type_ids must lie in 0..1": {**good, "token_type_ids": good["input_ids"] * 0 + 5},
        "an additive mask": {**good, "attention_mask": (1.0 - good["attention_mask"]) * -1e4},
        "row 3 of attention_mask has no real token": {**good, "attention_mask": empty},
        "attention_mask has shape": {**good, "attention_mask": good["attention_mask"][:, :4]},
        "input_ids is a list, not a tensor": {"input_ids": good["input_ids"].tolist()},
        "input_ids must hold integer ids": {**good, "input_ids": good["input_ids"].float()},
    }
    for match, batch in cases.items():
        with pytest.raises(ValueError, match=match) as err:  # at construction or attach
            _attach(GeometryMonitor([good, batch], every_n_steps=500), _model())
        assert "probe batch 1" in str(err.value) and "\n" not in str(err.value)
        # measure_geometry checks each batch before the model reads it
        with pytest.raises(ValueError, match=match):
            measure_geometry(_model(), [good, batch], zeta=0.0)
    bad = {**good, "input_ids": good["input_ids"] + VOCAB}
    with pytest.raises(ValueError, match="shrinkage batch 0: input_ids hold the id"):
        _attach(GeometryMonitor([good], shrinkage_batches=[bad]), _model())
    assert len(_attach(GeometryMonitor([good]), _model())) == 1  # a good probe is added


@pytest.mark.parametrize("probe", [None, 5, "text"])
def test_a_probe_set_that_is_not_batches_is_a_one_line_error(probe):
    with pytest.raises(ValueError, match="the probe set must be a sequence of batches"):
        GeometryMonitor(probe)
    with pytest.raises(ValueError, match="the probe set must be a sequence of batches"):
        measure_geometry(_model(), probe, zeta=0.0)
