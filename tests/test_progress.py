"""Every long pass shows a bar with a total where stderr is a terminal (tqdm's rule, as the
Trainer's bars), and nothing where it is not: the Sigma_S passes count the rows read out of
``n_tokens``, the other passes the batches out of the loader's length."""

from __future__ import annotations

import io
import sys
from types import SimpleNamespace

import pytest
import torch

from isotropy.progress import progress_bar, stage


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal: tqdm then draws its bar into it."""

    def isatty(self) -> bool:
        return True


class _Toy(torch.nn.Module):
    """A stand-in encoder: hidden states = (embeddings, 2 x embeddings)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(10, 3)

    def forward(self, input_ids, attention_mask=None, output_hidden_states=False):
        e = self.emb(input_ids)
        return SimpleNamespace(hidden_states=(e, 2 * e))


# 8 batches of 3 real tokens (and one padding position) each
BATCHES = [{"input_ids": torch.tensor([[1, 2, 3, 0]]),
            "attention_mask": torch.tensor([[1, 1, 1, 0]])}] * 8


class _Recorder:
    """Stands in for tqdm to record what a bar was told: its total and every update (tqdm
    itself draws at most every 0.1 s, so its text shows the first state, not every step)."""

    made: list[_Recorder] = []

    def __init__(self, *, desc, total=None, **kwargs) -> None:
        self.desc, self.total, self.updates = desc, total, []
        _Recorder.made.append(self)

    def update(self, n: int) -> None:
        self.updates.append(n)

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass


def _recorded(monkeypatch, fn) -> list[_Recorder]:
    import tqdm.auto

    _Recorder.made = []
    monkeypatch.setattr(tqdm.auto, "tqdm", _Recorder)
    fn()
    return [(bar.desc, bar.total, bar.updates) for bar in _Recorder.made]


def _bar_text(monkeypatch, fn) -> str:
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    fn()
    return terminal.getvalue()


def test_the_sigma_s_pass_shows_the_rows_read_out_of_n_tokens(monkeypatch):
    from isotropy.models.shrinkage import collect_covariance

    torch.manual_seed(0)
    model = _Toy()
    shown = _bar_text(monkeypatch, lambda: collect_covariance(model, BATCHES, n_tokens=12))
    assert shown.split("\r")[1].startswith("Sigma_S:   0%")
    assert "0/12 " in shown.split("\r")[1]  # the total is there from the first draw
    # 3 real tokens x 2 hidden states... of which the union of layers "all" is layer 1: 3 rows
    # per batch, 4 batches to reach 12
    assert _recorded(monkeypatch, lambda: collect_covariance(model, BATCHES, n_tokens=12)) \
        == [("Sigma_S", 12, [3, 3, 3, 3])]
    quiet = _bar_text(monkeypatch, lambda: collect_covariance(model, BATCHES, n_tokens=12,
                                                                progress=False))
    assert quiet == ""


def test_the_refresh_passes_its_progress_setting_on(monkeypatch):
    from isotropy import IStarLoss, refresh_shrinkage

    model, loss = _Toy(), IStarLoss(tuning=-1.0)
    shown = _bar_text(monkeypatch, lambda: refresh_shrinkage(model, BATCHES, loss, n_tokens=6))
    assert "0/6 " in shown
    assert _bar_text(monkeypatch, lambda: refresh_shrinkage(model, BATCHES, loss, n_tokens=6,
                                                            progress=False)) == ""


def test_no_bar_where_stderr_is_not_a_terminal(monkeypatch):
    from isotropy.models.shrinkage import collect_covariance

    plain = io.StringIO()  # a file or a pipe: isatty() is False
    monkeypatch.setattr(sys, "stderr", plain)
    collect_covariance(_Toy(), BATCHES, n_tokens=12)
    assert plain.getvalue() == ""


def test_a_progress_bar_never_runs_past_its_total(monkeypatch):
    def run() -> None:
        with progress_bar("rows", 10) as advance:
            advance(4)
            advance(20)  # the last batch held more rows than were needed

    assert _recorded(monkeypatch, run) == [("rows", 10, [4, 6])]


@pytest.mark.parametrize("explicit", [True, False])
def test_a_stage_bar_has_the_loaders_length_or_the_given_total(monkeypatch, explicit):
    lines: list[str] = []

    def run() -> None:
        with stage("pass", bar=True, echo=lines.append) as counted:
            loader = iter(BATCHES) if explicit else BATCHES  # a generator has no length
            for _ in counted(loader, 8) if explicit else counted(loader):
                pass

    shown = _bar_text(monkeypatch, run)
    assert "0/8 " in shown
    assert lines[0].startswith("pass: 8 batches, 24 tokens in ")


def test_stability_shows_its_two_phases_with_their_totals(monkeypatch):
    from isotropy.paper.stability import run_stability

    shown = _bar_text(monkeypatch, lambda: run_stability(
        dim=8, sizes=[4, 50], zetas=[0.0, 0.5], shrinkage_points=2000, repeats=3))
    assert "Sigma_S sample:   0%" in shown and "0/2000 " in shown
    assert "sub-samples:   0%" in shown and "0/6 " in shown
    assert _bar_text(monkeypatch, lambda: run_stability(
        dim=8, sizes=[4, 50], zetas=[0.0], shrinkage_points=200, repeats=2,
        progress=False)) == ""


def test_measure_shows_the_layers_measured_after_its_pass(monkeypatch):
    from isotropy.probing.layerwise import LayerClouds

    g = torch.Generator().manual_seed(0)
    clouds = LayerClouds(1000, 0, "cls")
    mask = torch.ones(4, 6, dtype=torch.long)
    clouds.update(tuple(torch.randn(4, 6, 5, generator=g) for _ in range(3)), mask)
    shown = _bar_text(monkeypatch, lambda: clouds.rows(2, [], progress=True))
    assert "measures:   0%" in shown and "0/3 " in shown
    assert _bar_text(monkeypatch, lambda: clouds.rows(2, [])) == ""


def test_the_measurements_of_analyze_and_train_count_their_clouds(monkeypatch):
    from isotropy.probing.eval_measures import EvalMeasures

    g = torch.Generator().manual_seed(0)
    acc = EvalMeasures(max_tokens=100, top_k=2)
    acc.update(tuple(torch.randn(4, 6, 5, generator=g) for _ in range(3)),
               torch.ones(4, 6, dtype=torch.long))
    # 3 hidden states, the union of layers 1..2 and the last layer's view
    assert _recorded(monkeypatch, lambda: acc.compute(progress=True)) == \
        [("measures", 5, [1, 1, 1, 1, 1])]
    assert _recorded(monkeypatch, acc.compute) == []
