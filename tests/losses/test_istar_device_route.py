"""The I-STAR loss on its sync-free route (the default on accelerators): the same loss, logs
and gradient as the eager route, logs kept as tensors until logged, a NaN batch score turned
into a one-line error by ``isotropy train``'s logging, and no host read on fake CUDA."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import transformers
from _reference import spd
from torch.utils._python_dispatch import TorchDispatchMode

from isotropy.losses import CosRegLoss, IStarLoss
from isotropy.models.regularized import log_value
from isotropy.training.trainer import IsotropyTrainer


@pytest.fixture(autouse=True)
def _threads(one_thread):
    """Small tensors: one thread."""


def _states(seed=0, scale=50.0):
    g = torch.Generator().manual_seed(seed)
    hs = [torch.randn(4, 12, 16, generator=g) * scale + 3.0 for _ in range(3)]
    mask = (torch.arange(12)[None, :] < torch.tensor([[12], [9], [5], [7]])).long()
    return hs, mask


@pytest.mark.parametrize("include_padding", [False, True])
@pytest.mark.parametrize("zeta", [0.0, 0.3, 1.0])
def test_same_loss_logs_and_gradient_as_the_eager_route(zeta, include_padding):
    s = torch.as_tensor(spd(16, seed=3), dtype=torch.float32) * 2500.0
    outs, grads = [], []
    for eager in (True, False):
        hs, mask = _states()
        hs = [h.requires_grad_() for h in hs]
        loss = IStarLoss(-2.0, zeta=zeta, shrinkage=s, include_padding=include_padding,
                         eager_checks=eager)
        out = loss(hs, attention_mask=mask)
        if zeta < 1.0:
            out.loss.backward()
            grads.append(torch.cat([h.grad.flatten() for h in hs[1:]]))
        outs.append(out)
    eager, device = outs
    assert float(device.loss) == pytest.approx(float(eager.loss), abs=1e-6)
    assert isinstance(device.logs["isoscore_star"], torch.Tensor)
    assert not device.logs["isoscore_star"].requires_grad
    for key, value in eager.logs.items():
        assert float(device.logs[key]) == pytest.approx(value, abs=1e-6), key
    if grads:
        assert torch.allclose(grads[0], grads[1], rtol=1e-4, atol=1e-6 * grads[0].abs().max())


def test_eager_checks_must_be_a_bool_or_none():
    with pytest.raises(TypeError, match="eager_checks must be True, False or None"):
        IStarLoss(-1.0, eager_checks="no")


def test_log_values_stay_tensors_off_the_cpu_only():
    assert log_value(torch.tensor(1.5)) == 1.5 and isinstance(log_value(2), float)
    with torch.device("meta"):
        t = torch.ones(())
    assert log_value(t) is not None and isinstance(log_value(t), torch.Tensor)


def _trainer(sums, counts, step=7):
    trainer = object.__new__(IsotropyTrainer)
    trainer._log_sums, trainer._log_counts = sums, counts
    trainer.state = SimpleNamespace(global_step=step)
    return trainer


def test_logging_reads_tensors_once_and_stops_on_a_nan_score(monkeypatch):
    seen = []
    monkeypatch.setattr(transformers.Trainer, "log", lambda self, logs, start_time=None:
                        seen.append(dict(logs)))
    trainer = _trainer({"istar/isoscore_star": torch.tensor(0.9)}, {"istar/isoscore_star": 3})
    trainer.log({"loss": 1.0})
    assert seen == [{"loss": 1.0, "istar/isoscore_star": pytest.approx(0.3)}]
    assert isinstance(seen[0]["istar/isoscore_star"], float)
    trainer = _trainer({"istar/isoscore_star": torch.tensor(math.nan)},
                       {"istar/isoscore_star": 2})
    with pytest.raises(ValueError, match="not finite in the steps up to 7"):
        trainer.log({"loss": 1.0})


def test_no_host_read_on_fake_cuda():
    """Forward on fake CUDA hidden states with padding in the cloud: no ``float``/``bool`` of a
    value and no CPU tensor (either raises there)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    loss = IStarLoss(-1.0, zeta=0.2, include_padding=True)
    with FakeTensorMode():
        hs = [torch.randn(4, 12, 16, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
        mask = torch.ones(4, 12, dtype=torch.long, device="cuda")
        loss.shrinkage = torch.eye(16, device="cuda")  # validated once elsewhere
        with torch.no_grad():
            out = loss(hs, attention_mask=mask)
        assert out.loss.device.type == "cuda"
        assert out.logs["isoscore_star"].device.type == "cuda"
        assert out.logs["n_points"] == 2 * 4 * 12  # layers 1 and 2, padding included


def test_cosreg_device_route_equals_the_eager_one():

    outs, grads = [], []
    for eager in (True, False):
        hs, mask = _states(seed=4)
        hs = [h.requires_grad_() for h in hs]
        out = CosRegLoss(1.0, eager_checks=eager)(hs, attention_mask=mask)
        out.loss.backward()
        outs.append(out)
        grads.append(hs[-1].grad)
    assert float(outs[1].loss) == pytest.approx(float(outs[0].loss), abs=1e-7)
    for key, value in outs[0].logs.items():
        assert float(outs[1].logs[key]) == pytest.approx(value, abs=1e-7), key
    assert torch.allclose(grads[0], grads[1], atol=1e-9)
    hs, mask = _states(seed=4)
    hs[-1][0, 0] = 0.0  # a zero-norm token: NaN on the device route, an error on the eager one
    with pytest.raises(ValueError, match="norm zero"):
        CosRegLoss(1.0, eager_checks=True)(hs, attention_mask=mask)
    assert math.isnan(float(CosRegLoss(1.0, eager_checks=False)(hs, attention_mask=mask).loss))


def test_non_finite_values_are_caught_before_a_save_or_the_end_without_a_log():
    """Where no log falls (the last steps, --logging_strategy no) a NaN regularizer value
    summed on the device is still caught before a checkpoint, an evaluation or the end."""
    trainer = _trainer({"istar/isoscore_star": torch.tensor(math.nan), "task_loss": 1.0},
                       {"istar/isoscore_star": 1, "task_loss": 1}, step=103)
    with pytest.raises(ValueError, match="istar/isoscore_star.*not finite.*103"):
        trainer._check_regularizer_values()
    _trainer({"istar/isoscore_star": torch.tensor(0.5)}, {"istar/isoscore_star": 1}
             )._check_regularizer_values()  # finite: nothing happens


def test_cosreg_has_no_host_read_on_fake_cuda():
    """CosReg's forward on fake CUDA bf16 hidden states, padding in the cloud: its loss and
    logs stay on the device. (Fake CUDA on this CPU-only torch build cannot record autograd:
    building a graph aborts the process in a CUDA device guard, so backward is checked through
    the analytic gradients on CPU and on real CUDA, tests/gpu.)"""
    from torch._subclasses.fake_tensor import FakeTensorMode

    loss = CosRegLoss(1.0, include_padding=True)
    with FakeTensorMode():
        hs = [torch.randn(4, 12, 16, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
        mask = torch.ones(4, 12, dtype=torch.long, device="cuda")
        with torch.no_grad():
            out = loss(hs, attention_mask=mask)
        assert out.loss.device.type == "cuda"
        assert out.logs["cosreg_term"].device.type == out.logs["avg_cosine"].device.type == "cuda"
        assert out.logs["n_points"] == 4 * 12


def test_bfloat16_products_on_the_sync_free_route_and_a_warning_on_the_eager_one():
    s = torch.as_tensor(spd(16, seed=3), dtype=torch.float32) * 2500.0
    hs, mask = _states()
    plain = IStarLoss(-1.0, zeta=0.2, shrinkage=s, eager_checks=False)(hs, attention_mask=mask)
    loss = IStarLoss(-1.0, zeta=0.2, shrinkage=s, eager_checks=False,
                     product_dtype=torch.bfloat16)
    assert "product_dtype=torch.bfloat16" in repr(loss)
    bf16 = loss(hs, attention_mask=mask)
    # IsoScore* of 145 rows in 16 dimensions: PR <= 16, so |Δι| <= 4u(1 + 4)(ι + 1/15)
    iota = 1.0 + float(plain.loss)
    assert abs(float(bf16.loss) - float(plain.loss)) <= 4 * 2.0**-8 * 5 * (iota + 1 / 15)
    assert float(bf16.loss) != float(plain.loss)  # the products did change
    eager = IStarLoss(-1.0, zeta=0.2, shrinkage=s, eager_checks=True,
                      product_dtype=torch.bfloat16)
    with pytest.warns(UserWarning, match="applies to the sync-free route"):
        out = eager(hs, attention_mask=mask)
    assert float(out.loss) == pytest.approx(float(plain.loss), abs=1e-6)  # float32 products
    with pytest.raises(ValueError, match="product_dtype must be None or torch.bfloat16"):
        IStarLoss(-1.0, product_dtype="bf16")


class Ops(TorchDispatchMode):
    """Records the operators dispatched inside it (``seen``)."""

    def __init__(self):
        super().__init__()
        self.seen = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.add(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def test_no_selection_of_the_real_tokens_and_no_host_read():
    """With padding left out, the real tokens are a row mask, not a selection: the forward and
    backward call no ``nonzero`` (a data-dependent size) and read no value on the host
    (``_local_scalar_dense``, behind ``float``, ``bool`` and ``.item()``), as the eager
    route does."""
    s = torch.as_tensor(spd(16, seed=3), dtype=torch.float32) * 2500.0
    for eager, product in ((False, None), (False, torch.bfloat16), (True, None)):
        hs, mask = _states()
        mask = mask.bool()  # an integer mask is checked for 0/1 on the CPU only (a read)
        hs = [h.requires_grad_() for h in hs]
        loss = IStarLoss(-1.0, zeta=0.2, shrinkage=s, eager_checks=eager, product_dtype=product)
        with Ops() as ops:
            out = loss(hs, attention_mask=mask)
            out.loss.backward()
        host = {"aten.nonzero", "aten._local_scalar_dense"} & ops.seen
        assert host == ({"aten.nonzero", "aten._local_scalar_dense"} if eager else set())
        assert torch.count_nonzero(hs[1].grad[~mask]) == 0  # padding takes no part


def test_cosreg_selects_nothing_and_reads_nothing_on_the_device_route():
    """The padding left out by a row mask: no ``nonzero`` and no host read in the forward and
    backward (an operator record), the same value and gradient as the selection."""
    hs, mask = _states(seed=5)
    mask = mask.bool()
    hs[-1][~mask] = float("nan")  # padding rows take no part, whatever they hold
    hs = [h.requires_grad_() for h in hs]
    with Ops() as ops:
        out = CosRegLoss(1.0, eager_checks=False)(hs, attention_mask=mask)
        out.loss.backward()
    assert not {"aten.nonzero", "aten._local_scalar_dense"} & ops.seen
    assert torch.count_nonzero(hs[-1].grad[~mask]) == 0
    chosen = hs[-1].detach()[mask].clone().requires_grad_()
    want = CosRegLoss(1.0, eager_checks=True)((chosen[None],), attention_mask=None)
    want.loss.backward()
    assert float(out.loss) == pytest.approx(float(want.loss), abs=1e-7)
    assert float(out.logs["n_points"]) == chosen.shape[0]
    torch.testing.assert_close(hs[-1].grad[mask], chosen.grad, rtol=1e-5, atol=1e-9)
