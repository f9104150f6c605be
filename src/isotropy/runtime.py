"""Process-wide settings: numerics (flush-to-zero), random states, the CPU's bf16 support,
stopping on a signal (at once, or after a checkpoint) and the fault-injection points of the
crash tests."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = ["CHECKPOINT_SIGNAL", "FAULT_ENV", "RngState", "StoppedAtCheckpoint", "autocast_off",
           "checkpoint_on_signal", "checkpoint_requested", "cpu_has_native_bf16",
           "fault_point", "flush_denormals", "flushing_denormals", "get_rng_state",
           "set_rng_state", "stop_on_signals", "stop_point", "stop_requested"]

FAULT_ENV = "ISOTROPY_FAULT"
_fault_hits: dict[str, int] = {}


def fault_point(name: str) -> None:
    """Stop the process here when the environment variable ``ISOTROPY_FAULT`` names this point.

    ``ISOTROPY_FAULT=<name>[@<n>][:<how>]``: at the ``n``-th time (default 1) the
    point ``name`` is reached, send this process ``SIGKILL`` (``kill``, the default: no cleanup
    at all, as a killed process), raise ``KeyboardInterrupt`` right here (``int``: what Ctrl-C
    does when Python gets the signal at this point; raised, not signalled, so that it lands
    exactly here), send ``SIGSTOP`` (``stop``: paused mid-run until ``SIGCONT``), ``SIGINT``
    ``SIGTERM`` or ``SIGUSR1`` (``sigint``, ``sigterm``, ``sigusr1``: the signal, handled
    wherever it lands), or
    ``SIGINT`` from inside a finalizer (``sigint-in-finalizer``: a Ctrl-C that Python would
    drop). Used by the
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
    if how in ("sigint", "sigterm", "sigusr1"):  # the signal itself, handled wherever it lands
        os.kill(os.getpid(), getattr(signal, how.upper()))
        return
    if how == "sigint-in-finalizer":  # Ctrl-C landing while a finalizer (__del__) runs
        _Finalized()
        return
    os.kill(os.getpid(), signal.SIGSTOP if how == "stop" else signal.SIGKILL)


class _Finalized:
    """An object whose finalizer receives SIGINT: the handler's ``KeyboardInterrupt`` is
    raised inside ``__del__``, where Python prints and drops it ("Exception ignored in")."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(3):  # the handler runs at the next bytecode boundary, in this frame
            pass


_stops: list[int] = []  # the signals received by the handler of stop_on_signals


def _request_stop(signum: int, frame: object) -> None:
    """Record the stop, then raise ``KeyboardInterrupt`` where the program is."""
    _stops.append(signum)
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextmanager
def stop_on_signals(signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)
                    ) -> Iterator[None]:
    """Inside the block, SIGINT (Ctrl-C, also where the process was started with SIGINT
    ignored, as a background job is) and SIGTERM (``kill``) stop the program as Ctrl-C does,
    with ``KeyboardInterrupt``; each is recorded, so that :func:`stop_point` raises it again
    where Python dropped it (raised inside a finalizer, ``__del__``, it is only printed, as
    "Exception ignored in ..."). Main thread only; the previous handlers are back, and the
    record empty, on exit."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    import sys

    hook = sys.unraisablehook

    def quiet_dropped_stop(unraisable: Any) -> None:
        """A recorded stop dropped inside a finalizer is not printed: it stops the run at
        the next :func:`stop_point` (any other unraisable error is shown as before)."""
        if not (_stops and isinstance(unraisable.exc_value, KeyboardInterrupt)):
            hook(unraisable)

    previous = {sig: signal.signal(sig, _request_stop) for sig in signals}
    sys.unraisablehook = quiet_dropped_stop
    try:
        yield
    finally:
        sys.unraisablehook = hook
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _stops.clear()


def stop_requested() -> int | None:
    """The last signal received inside :func:`stop_on_signals`, or ``None``."""
    return _stops[-1] if _stops else None


def stop_point() -> None:
    """Raise ``KeyboardInterrupt`` if a stop was requested (:func:`stop_on_signals`): called
    at the points where stopping is safe, so that a dropped interrupt still stops the run.

    >>> stop_point()  # no stop requested: nothing happens
    """
    if _stops:
        raise KeyboardInterrupt(signal.Signals(_stops[-1]).name)

CHECKPOINT_SIGNAL = getattr(signal, "SIGUSR1", None)  # None where the platform has none
_checkpoint_requests: list[int] = []  # the signals received by checkpoint_on_signal's handler


class StoppedAtCheckpoint(KeyboardInterrupt):
    """A training run stopped, as asked (:func:`checkpoint_on_signal`), right after writing a
    complete checkpoint at ``step``: resuming from it continues the run to the records of an
    uninterrupted one."""

    def __init__(self, step: int, signum: int) -> None:
        super().__init__(f"stopped at step {step} after its checkpoint")
        self.step, self.signum = step, signum


def _request_checkpoint(signum: int, frame: object) -> None:
    _checkpoint_requests.append(signum)


@contextmanager
def checkpoint_on_signal(signals: tuple[int, ...] | None = None) -> Iterator[None]:
    """Inside the block, ``SIGUSR1`` (e.g. a cluster's warning before a job's time limit:
    Slurm's ``--signal=USR1@120``) asks a training run to write a checkpoint at the end of the
    optimizer step in progress and then stop (:class:`StoppedAtCheckpoint`); the handler only
    records the request (:func:`checkpoint_requested`), so the step in progress is never cut.
    Main thread only (elsewhere, and where the platform has no ``SIGUSR1``, nothing is
    installed); the previous handlers are back, and the record empty, on exit.

    >>> with checkpoint_on_signal():  # no request yet
    ...     print(checkpoint_requested())
    None
    """
    import threading

    chosen = signals if signals is not None else (
        (CHECKPOINT_SIGNAL,) if CHECKPOINT_SIGNAL is not None else ())
    if not chosen or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _request_checkpoint) for sig in chosen}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _checkpoint_requests.clear()


def checkpoint_requested() -> int | None:
    """The signal that asked for a checkpoint and a stop (:func:`checkpoint_on_signal`), or
    ``None``."""
    return _checkpoint_requests[-1] if _checkpoint_requests else None


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
