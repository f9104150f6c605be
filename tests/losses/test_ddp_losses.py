"""Two real processes (gloo on localhost) against one process on the concatenated batch.

Convention checked: every rank returns the loss of the global batch, each rank's gradient for
its rows is ``world_size`` times the single-process gradient for those rows, and so a shared
layer's parameter gradient, averaged over ranks as DDP does, equals the single-process one.
Also: Sigma_S from sharded data is the covariance of exactly ``n_tokens`` rows in all.
"""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.distributed as dist
from _distributed import RunResults, StepError, guarded, require_gloo
from _models import padding_mask, random_inputs

from isotropy.losses.cosreg import CosRegLoss
from isotropy.losses.istar import IStarLoss
from isotropy.models.shrinkage import collect_covariance

pytestmark = pytest.mark.slow  # spawns ranks: Python processes that import torch

WORLD = 2
SIZES = (3, 5)  # unequal local batch sizes
SEQ, DIM, N_STATES = 6, 5, 3  # hidden_states = (embeddings, layer 1, layer 2)
N_TOKENS = 61  # odd: rank 0 contributes 31 rows, rank 1 30
N_TOKENS_DDP = 41
HAS_ENTROPY = importlib.util.find_spec("isotropy.losses.entropy") is not None


def global_data():
    g = torch.Generator().manual_seed(0)
    n = sum(SIZES)
    scale = torch.linspace(0.5, 2.0, DIM, dtype=torch.float64)
    hs = [torch.randn(n, SEQ, DIM, generator=g, dtype=torch.float64) * scale + 0.3 * i
          for i in range(N_STATES)]
    lengths = torch.tensor([2, 6, 4, 3, 5, 6, 2, 4])  # different padding on each rank
    mask = padding_mask(lengths, SEQ)
    labels = torch.tensor([0, 1, 0, 1, 0, 1, 0, 1])
    a = torch.randn(DIM, 3 * DIM, generator=g, dtype=torch.float64)
    c0 = a @ a.T / (3 * DIM)
    lin = torch.nn.Linear(DIM, DIM, dtype=torch.float64)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(DIM, DIM, generator=g, dtype=torch.float64) / DIM**0.5)
        lin.bias.copy_(torch.randn(DIM, generator=g, dtype=torch.float64) * 0.1)
    return hs, mask, labels, c0, lin


def loss_factories(c0: torch.Tensor) -> dict:
    makers = {
        "istar_shrinkage": lambda: IStarLoss(-2.0, zeta=0.3, shrinkage=c0),
        "istar_identity": lambda: IStarLoss(1.5, zeta=0.2, layers=[2, 1]),
        "cosreg": lambda: CosRegLoss(1.0),
    }
    if HAS_ENTROPY:
        from isotropy.losses.entropy import PersistentEntropyLoss

        makers["entropy"] = lambda: PersistentEntropyLoss(weight=1.0, pooling="cls")
    return makers


def run_loss(make, hs, mask, labels, lin):
    """Loss, gradient w.r.t. the hidden states, and the shared Linear's parameter gradient."""
    local = [h.clone().requires_grad_(True) for h in hs]
    out = make()(tuple(local), attention_mask=mask, labels=labels)
    out.loss.backward()
    grads = torch.stack([t.grad if t.grad is not None else torch.zeros_like(t) for t in local])
    lin.zero_grad()
    make()(tuple(lin(h) for h in hs), attention_mask=mask, labels=labels).loss.backward()
    pgrad = torch.cat([lin.weight.grad.flatten(), lin.bias.grad])
    return float(out.loss.detach()), grads, pgrad


class ToyEncoder(torch.nn.Module):
    """A deterministic stand-in encoder: hidden_states = (e, tanh(e) + 1, 2 e)."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.emb = torch.nn.Parameter(torch.randn(40, DIM, generator=g, dtype=torch.float64))

    def forward(self, input_ids, attention_mask=None, output_hidden_states=False):
        e = self.emb[input_ids]
        return SimpleNamespace(hidden_states=(e, torch.tanh(e) + 1.0, 2.0 * e))


class BufferedEncoder(ToyEncoder):
    """:class:`ToyEncoder` with a buffer: DDP's own forward would broadcast it every call."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))


def shard_batches(rank: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(2)
    batches = [random_inputs(g, batch=3, seq=7, vocab_size=40, min_length=1) for _ in range(8)]
    return batches[rank::WORLD]


def uneven_shard(rank: int) -> list[dict[str, torch.Tensor]]:
    """Rank 0 reads one sentence per batch, rank 1 three: they need different batch counts."""
    g = torch.Generator().manual_seed(3 + rank)
    return [
        random_inputs(g, batch=1 + 2 * rank, seq=7, vocab_size=40, min_length=1)
        for _ in range(8)
    ]


def first_rows(model: torch.nn.Module, batches: list[dict], quota: int) -> list[np.ndarray]:
    """The first ``quota`` rows by loops: tokens in reading order, layers 1 then 2 each."""
    rows = []
    for batch in batches:
        hs = model(**batch).hidden_states
        m = batch["attention_mask"]
        for b in range(m.shape[0]):
            for t in range(m.shape[1]):
                if m[b, t]:
                    rows.extend(hs[layer][b, t].detach().numpy() for layer in (1, 2))
    return rows[:quota]


def rank_quota(rank: int, n_tokens: int) -> int:
    return n_tokens // WORLD + (1 if rank < n_tokens % WORLD else 0)


def _worker(rank: int) -> dict:
    hs, mask, labels, c0, lin = global_data()
    lo = sum(SIZES[:rank])
    hi = lo + SIZES[rank]
    results = {}
    for name, make in loss_factories(c0).items():

        def one_loss(make=make):
            local = [h[lo:hi] for h in hs]
            loss, grads, pgrad = run_loss(make, local, mask[lo:hi], labels[lo:hi], lin)
            dist.all_reduce(pgrad)
            return loss, grads, pgrad / WORLD

        results[name] = guarded(name, one_loss)
    results["shrinkage"] = guarded("shrinkage", _shrinkage, rank)
    results["shrinkage_ddp"] = guarded("shrinkage under DDP", _shrinkage_ddp, rank)
    for name in ("istar_shrinkage", "cosreg"):  # last: each rank must raise, none may wait
        results[f"nan_{name}"] = guarded(f"NaN on rank 1 ({name})", _nan_on_rank_one, rank,
                                         loss_factories(c0)[name], hs, mask, lo, hi)
    return results


def _nan_on_rank_one(rank, make, hs, mask, lo, hi):
    """A loss on the ranks' rows where rank 1 holds one NaN: expected to raise on both."""
    local = [h[lo:hi].clone() for h in hs]
    if rank == 1:
        for h in local:
            h[0, 0, 0] = float("nan")
    return float(make()(tuple(local), attention_mask=mask[lo:hi]).loss)


def _ddp_forward_called(module, args, kwargs):
    raise AssertionError("collect_covariance ran the DistributedDataParallel wrapper's forward")


def _shrinkage_ddp(rank: int) -> tuple[int, torch.Tensor, bool]:
    """collect_covariance on a DDP-wrapped model in training mode, ranks reading unevenly."""
    ddp = torch.nn.parallel.DistributedDataParallel(BufferedEncoder())
    ddp.register_forward_pre_hook(_ddp_forward_called, with_kwargs=True)
    ddp.train()
    stats = collect_covariance(ddp, uneven_shard(rank), n_tokens=N_TOKENS_DDP)
    return stats.count, stats.covariance(), ddp.module.training


def _shrinkage(rank: int) -> tuple[int, torch.Tensor]:
    stats = collect_covariance(ToyEncoder(), shard_batches(rank), n_tokens=N_TOKENS)
    return stats.count, stats.covariance()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    require_gloo()
    out = tmp_path_factory.mktemp("ddp")
    return RunResults.run(_worker, world_size=WORLD, out_dir=out, timeout=150)


@pytest.mark.filterwarnings("ignore:IStarLoss has no shrinkage matrix")
@pytest.mark.parametrize("name", list(loss_factories(torch.eye(DIM))))
def test_loss_and_gradients_match_one_process(ranks, name):
    hs, mask, labels, c0, lin = global_data()
    loss, grads, pgrad = run_loss(loss_factories(c0)[name], hs, mask, labels, lin)
    for rank in range(WORLD):
        r_loss, r_grads, r_pgrad = ranks.value(rank, name)
        lo = sum(SIZES[:rank])
        hi = lo + SIZES[rank]
        assert r_loss == pytest.approx(loss, rel=1e-10, abs=1e-12)
        torch.testing.assert_close(r_grads, WORLD * grads[:, lo:hi], rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(r_pgrad, pgrad, rtol=1e-9, atol=1e-12)
    assert float(grads.abs().max()) > 0


def test_shrinkage_uses_exactly_n_tokens_rows_over_both_ranks(ranks):
    model = ToyEncoder()
    rows = []
    for rank in range(WORLD):
        rows.extend(first_rows(model, shard_batches(rank), rank_quota(rank, N_TOKENS)))
    expected = np.cov(np.array(rows).T)
    for rank in range(WORLD):
        count, cov = ranks.value(rank, "shrinkage")
        assert count == N_TOKENS
        np.testing.assert_allclose(cov.numpy(), expected, rtol=1e-10, atol=1e-12)


def test_shrinkage_of_a_ddp_wrapped_model(ranks):
    """The DDP wrapper is bypassed (its forward, which syncs buffers, never runs), the mode is
    restored, and Sigma_S is np.cov of the rows collected independently on each shard."""
    model = BufferedEncoder()
    rows = []
    for rank in range(WORLD):
        rows.extend(first_rows(model, uneven_shard(rank), rank_quota(rank, N_TOKENS_DDP)))
    assert len(rows) == N_TOKENS_DDP
    expected = np.cov(np.array(rows).T)
    for rank in range(WORLD):
        count, cov, training = ranks.value(rank, "shrinkage_ddp")
        assert count == N_TOKENS_DDP
        assert training
        np.testing.assert_allclose(cov.numpy(), expected, rtol=1e-10, atol=1e-12)
    # the ranks need different numbers of batches (forward passes) for their quotas
    needed = [
        min(k for k in range(1, 9) if len(first_rows(model, uneven_shard(r)[:k], 10**6)) >= q)
        for r, q in ((r, rank_quota(r, N_TOKENS_DDP)) for r in range(WORLD))
    ]
    assert needed[0] != needed[1]


@pytest.mark.filterwarnings("ignore:IStarLoss has no shrinkage matrix")
@pytest.mark.parametrize("name", ["istar_shrinkage", "cosreg"])
def test_nan_on_one_rank_raises_a_clear_error_on_every_rank(ranks, name):
    # a rank raising alone would leave the other waiting in a collective: both must raise a
    # ValueError (the healthy rank too), not a transport error after the other one exits
    for rank in range(WORLD):
        got = ranks.ranks[rank][f"nan_{name}"]
        assert isinstance(got, StepError), (rank, got)
        assert "ValueError" in got.traceback and "not finite" in got.traceback.replace(
            "NaN or infinite", "not finite"), (rank, got.traceback[-600:])
