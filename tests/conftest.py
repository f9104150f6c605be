from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest
from hypothesis import settings

# torch is imported where it is used: the pytest-xdist controller loads this file but runs no
# test, and importing torch there costs minutes on a slow machine

# Property tests draw the same examples on every run (a suite that fails 1 run in 20 blocks
# everyone). HYPOTHESIS_PROFILE=explore searches with fresh random examples instead.
settings.register_profile("deterministic", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


@pytest.fixture
def one_thread():
    """Tiny tensors: one thread avoids oversubscription on a busy machine."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(autouse=True)
def no_leaked_denormal_flushing():
    """Fail a test that leaves denormal flushing on: the CPU flag also changes Python and NumPy
    float arithmetic for every later test (e.g. Hypothesis' float strategies break)."""
    from isotropy.runtime import flushing_denormals

    before = flushing_denormals()
    yield
    if flushing_denormals() and not before:
        import torch

        torch.set_flush_denormal(False)
        pytest.fail("the test left torch.set_flush_denormal(True) switched on")


_SLOW_BY_TIME = Path(__file__).with_name("slow_by_time.txt")


def _slow_by_time() -> set[str]:
    """The node ids of ``slow_by_time.txt``: tests too long for ``make test`` on the CI
    machine (the file's header says how they were measured)."""
    lines = _SLOW_BY_TIME.read_text(encoding="utf-8").splitlines()
    return {line.split("#", 1)[0].strip() for line in lines} - {""}


@pytest.hookimpl(tryfirst=True)  # before ``-m "not slow or floor"`` deselects
def pytest_collection_modifyitems(config, items):
    """Tests listed in ``slow_by_time.txt`` are marked ``slow``; tests marked ``gpu`` are
    skipped, with the reason, where CUDA is not available."""
    slow = _slow_by_time()
    for item in items:
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (marked gpu)")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """Once every report is written, the session's objects leave garbage collection: on the CI
    machine test processes spent minutes in the collector at interpreter exit, after their
    JUnit reports were written."""
    gc.disable()
    gc.freeze()
