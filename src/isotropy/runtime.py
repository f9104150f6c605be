"""Process-wide settings: numerics (flush-to-zero), random states, the CPU's bf16 support,
and the fault-injection points of the crash tests."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["FAULT_ENV", "RngState", "autocast_off", "cpu_has_native_bf16", "fault_point",
           "flush_denormals", "flushing_denormals", "get_rng_state", "set_rng_state"]

FAULT_ENV = "ISOTROPY_FAULT"
_fault_hits: dict[str, int] = {}


def fault_point(name: str) -> None:
    """Stop the process here when the environment variable ``ISOTROPY_FAULT`` names this point.

    ``ISOTROPY_FAULT=<name>[@<n>][:<kill|int|stop>]``: at the ``n``-th time (default 1) the
    point ``name`` is reached, send this process ``SIGKILL`` (``kill``, the default: no cleanup
    at all, as a killed process), raise ``KeyboardInterrupt`` right here (``int``: what Ctrl-C
    does when Python gets the signal at this point; raised, not signalled, so that it lands
    exactly here), or ``SIGSTOP`` (``stop``: paused mid-run until ``SIGCONT``). Used by the
    crash tests to stop a real run at a named place; without the
    variable it does nothing.

    >>> fault_point("checkpoint_written")  # ISOTROPY_FAULT unset: nothing happens
    """
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    where, _, how = spec.partition(":")
    point, _, nth = where.partition("@")
    if point != name:
        return
    _fault_hits[name] = _fault_hits.get(name, 0) + 1
    if _fault_hits[name] != (int(nth) if nth else 1):
        return
    if how == "int":
        raise KeyboardInterrupt(f"{FAULT_ENV}={spec}")
    os.kill(os.getpid(), signal.SIGSTOP if how == "stop" else signal.SIGKILL)

RngState = tuple[torch.Tensor, dict[str, torch.Tensor]]


def cpu_has_native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU computes bf16 natively (torch's AVX-512 kernels and the
    ``avx512_bf16`` or ``amx_bf16`` flag), so that bf16 autocast speeds training up.

    Measured on our 2-core machines: a MiniLM step was 1.5-1.8x faster in bf16 than in fp32
    on such a CPU, and 20x slower on an AVX2-only one. ``False`` where it cannot tell (not
    Linux)."""
    if torch.backends.cpu.get_cpu_capability() not in ("AVX512", "AMX"):
        return False
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool({"avx512_bf16", "amx_bf16"} & flags)
    except OSError:
        return False
    return False


def _accelerators() -> list[object]:
    """The torch device modules with a random generator of their own that are in use."""
    out: list[object] = []
    for name in ("cuda", "mps", "xpu", "npu"):
        mod = getattr(torch, name, None)
        available = getattr(mod, "is_available", None)
        if mod is not None and callable(available) and available() \
                and hasattr(mod, "get_rng_state"):
            out.append(mod)
    return out


def get_rng_state() -> RngState:
    """The torch random state that dropout draws from: the CPU generator's and that of every
    accelerator in use (CUDA's current device, MPS, XPU, NPU).

    >>> s = get_rng_state(); a = torch.rand(2); set_rng_state(s)
    >>> bool(torch.equal(a, torch.rand(2)))
    True
    """
    return torch.get_rng_state(), {m.__name__: m.get_rng_state() for m in _accelerators()}


def set_rng_state(state: RngState) -> None:
    """Restore a :func:`get_rng_state`."""
    cpu, devices = state
    torch.set_rng_state(cpu)
    for mod in _accelerators():
        if mod.__name__ in devices:
            mod.set_rng_state(devices[mod.__name__])


def flushing_denormals() -> bool:
    """Whether denormal floats are flushed to zero now (probe: 1e-310 * 1 is 0 when they are)."""
    probe = torch.tensor([1e-310], dtype=torch.float64)
    return bool((probe * 1.0)[0] == 0)


@contextmanager
def flush_denormals(enabled: bool = True) -> Iterator[None]:
    """Flush denormal floats to zero inside the block (CPU), then restore the previous mode.

    Denormals in transformer activations slow CPU steps several-fold. The mode is a CPU flag
    of the calling thread that also changes plain Python and NumPy float arithmetic, so it is
    never left switched on behind the caller's back.

    >>> tiny = torch.tensor([1e-310], dtype=torch.float64)
    >>> with flush_denormals():
    ...     inside = float(tiny * 1.0)
    >>> inside, float(tiny * 1.0) > 0
    (0.0, True)
    """
    if not enabled:
        yield
        return
    before = flushing_denormals()
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(before)


_AUTOCAST_DEVICES = ("cpu", "cuda", "xpu", "mps")


@contextmanager
def autocast_off() -> Iterator[None]:
    """Switch ``torch.autocast`` off inside the block on every device where it is on.

    The measures and losses choose their accumulation dtype themselves (float32 for half
    inputs, float64 for float64); under autocast a matrix product of float32 operands would
    run in float16 (overflowing at |x| ~ 256 for squares summed over a few hundred rows) or
    bfloat16 (8 bits of mantissa).

    >>> with torch.autocast("cpu", dtype=torch.bfloat16):
    ...     with autocast_off():
    ...         (torch.ones(2, 2) @ torch.ones(2, 2)).dtype
    torch.float32
    """
    stack = []
    for dev in _AUTOCAST_DEVICES:
        try:
            on = torch.is_autocast_enabled(dev)
        except (RuntimeError, TypeError):  # a device type this build does not know
            on = False
        if on:
            ctx = torch.autocast(device_type=dev, enabled=False)
            ctx.__enter__()
            stack.append(ctx)
    try:
        yield
    finally:
        for ctx in reversed(stack):
            ctx.__exit__(None, None, None)
