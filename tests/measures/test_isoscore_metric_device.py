"""``IsoScoreMetric``'s route without host reads (``eager_checks=False``, the default off the
CPU): the same statistics as the eager route (``CovarianceStats``) and as NumPy, NaN handled
where it belongs, and on fake CUDA tensors (``FakeTensorMode``: a host read of a value, or
``[]`` indexing, raises there) with no host read and one device."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from isotropy.measures.covariance import CovarianceStats, merge_packed, packed_batch
from isotropy.measures.isoscore_metric import IsoScoreMetric


def _batches(seed: int = 0, scale: float = 1.0, dtype: torch.dtype = torch.float32):
    g = torch.Generator().manual_seed(seed)
    out = []
    for b, s in ((3, 7), (2, 5), (4, 9)):
        x = (torch.randn(b, s, 6, generator=g, dtype=torch.float64) * scale
             * torch.linspace(0.2, 2.0, 6, dtype=torch.float64) + 3.0 * scale).to(dtype)
        mask = (torch.rand(b, s, generator=g) < 0.7).long()
        mask[0, 0] = 1
        out.append((x, mask))
    return out


def _metrics(zeta: float = 0.2, shrinkage: torch.Tensor | None = None):
    return (IsoScoreMetric(zeta, shrinkage, eager_checks=True),
            IsoScoreMetric(zeta, shrinkage, eager_checks=False))


@pytest.mark.parametrize(("scale", "dtype"), [(1.0, torch.float32), (1e-30, torch.float32),
                                              (1e30, torch.float32), (1.0, torch.bfloat16),
                                              (1.0, torch.float16), (1e120, torch.float64),
                                              (1e-120, torch.float64)])
def test_the_device_route_accumulates_what_the_eager_route_does(scale, dtype):
    eager, device = _metrics()
    rows = []
    for x, mask in _batches(scale=scale, dtype=dtype):
        eager.update(x, mask)
        device.update(x, mask)
        rows.append(x.double()[mask.bool()].numpy())
    a, b = eager.stats, device.stats
    assert a.count == b.count == sum(len(r) for r in rows)
    allrows = np.concatenate(rows)
    np.testing.assert_allclose(b.mean.numpy(), allrows.mean(0), rtol=1e-6)
    torch.testing.assert_close(b.mean, a.mean, rtol=1e-6, atol=0)  # float32 shifts
    torch.testing.assert_close(b.comoment, a.comoment, rtol=1e-6,
                               atol=1e-6 * float(a.comoment.abs().max()))
    assert float(device.compute()) == pytest.approx(float(eager.compute()), rel=1e-6)


def test_empty_batches_and_a_first_empty_state_merge_exactly():
    x, mask = _batches()[0]
    none = packed_batch(x, torch.zeros_like(mask))
    assert none.abs().sum() == 0  # n = 0, mean 0, M = 0
    one = packed_batch(x, mask)
    assert torch.equal(merge_packed(none, one), one)
    assert torch.equal(merge_packed(one, none), one)
    # merging two batches is CovarianceStats.merge's arithmetic
    y, m2 = _batches(seed=1)[1]
    two = packed_batch(y, m2)
    merged = merge_packed(one, two)
    want = CovarianceStats(int(one[0]), one[1:7], one[7:].reshape(6, 6)).merge(
        CovarianceStats(int(two[0]), two[1:7], two[7:].reshape(6, 6)))
    assert int(merged[0]) == want.count
    assert torch.equal(merged[1:7], want.mean) and torch.equal(merged[7:].reshape(6, 6),
                                                               want.comoment)


def test_padding_is_never_read_but_a_kept_nan_fails_at_compute():
    eager, device = _metrics()
    for x, mask in _batches():
        x = x.clone()
        x[~mask.bool()] = float("nan")  # padding may hold anything
        eager.update(x, mask)
        device.update(x, mask)
    assert float(device.compute()) == pytest.approx(float(eager.compute()), rel=1e-6)
    x, mask = _batches(seed=3)[0]
    x = x.clone()
    x[0, 0, 2] = float("inf")
    device.update(x, mask)
    with pytest.raises(ValueError, match="not finite: an update received NaN or infinity"):
        device.compute()
    with pytest.raises(ValueError):
        eager.update(x, mask)  # the eager route refuses the batch itself


def test_shapes_and_options_are_checked_on_the_device_route():
    m = IsoScoreMetric(eager_checks=False)
    with pytest.raises(ValueError, match="at least 2 axes"):
        m.update(torch.ones(4))
    m.update(torch.randn(5, 3))
    with pytest.raises(ValueError, match="dimension 4, the metric 3"):
        m.update(torch.randn(5, 4))
    with pytest.raises(ValueError, match="mask shape"):
        m.update(torch.randn(2, 5, 3), torch.ones(2, 4))
    with pytest.raises(TypeError, match="eager_checks"):
        IsoScoreMetric(eager_checks="no")
    assert IsoScoreMetric()._device_route(torch.ones(2, 2)) is False  # CPU: eager by default


def test_no_host_read_and_one_device_on_fake_cuda():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        metric = IsoScoreMetric(zeta=0.2)  # the default route off the CPU
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            x = torch.randn(4, 6, 8, device="cuda", dtype=dtype)
            mask = torch.ones(4, 6, dtype=torch.long, device="cuda")
            metric.update(x, mask)
        assert metric.packed.device.type == "cuda" and metric.packed.shape == (1 + 8 + 64,)
        # CovarianceStats merges on the device too (counts are host integers)
        z = torch.zeros(8, device="cuda", dtype=torch.float64)
        s = CovarianceStats(3, z, torch.zeros(8, 8, device="cuda", dtype=torch.float64))
        assert s.merge(s).comoment.device.type == "cuda"
        with pytest.raises(Exception, match="local_scalar_dense|[Dd]ata.dependent"):
            metric.compute()  # compute reads the state on the host, by design
