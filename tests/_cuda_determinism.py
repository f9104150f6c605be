"""Which ops a piece of work dispatches that CUDA has no deterministic kernel for, found on the
CPU: :class:`NondeterministicOnCuda` records every ATen op (forward and backward) that
``torch.use_deterministic_algorithms(True)`` refuses on a CUDA tensor, so a GPU run under
``--full_determinism true`` would stop there.

The list mirrors torch's own (the docstring of ``torch.use_deterministic_algorithms``, torch
2.13, "will throw a RuntimeError"), as ATen op names, with the conditions it states. One entry
is narrowed by a measurement: ``NLLLoss`` is listed whole, but only its 2-d kernel
(``nll_loss2d_forward``) alerts; the 1-d loss of sequence classification ran on an H200 under
full determinism (``docs/gpu-runs-mpnet/1``)."""

from __future__ import annotations

from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

# ops CUDA refuses whatever their arguments (forward ops, and backward ops: what
# "when attempting to differentiate a CUDA tensor" reaches)
ALWAYS = frozenset({
    "aten.median.dim", "aten.median.dim_values",  # median with indices output
    "aten.nanmedian.dim", "aten.nanmedian.dim_values",
    "aten.histc.default", "aten.histc.out",
    "aten.put_.default", "aten.put.default",  # put_, accumulate or not, on CUDA
    "aten.nll_loss2d_forward.default", "aten.nll_loss2d_forward.output",
    "aten.avg_pool3d_backward.default",
    "aten._adaptive_avg_pool2d_backward.default", "aten._adaptive_avg_pool3d_backward.default",
    "aten.adaptive_max_pool2d_backward.default",
    "aten.fractional_max_pool2d_backward.default", "aten.fractional_max_pool3d_backward.default",
    "aten.max_unpool2d.default", "aten.max_unpool3d.default",
    "aten.upsample_linear1d_backward.default", "aten.upsample_bilinear2d_backward.default",
    "aten.upsample_bicubic2d_backward.default", "aten.upsample_trilinear3d_backward.default",
    "aten.reflection_pad1d_backward.default", "aten.reflection_pad2d_backward.default",
    "aten.reflection_pad3d_backward.default",
    "aten._ctc_loss_backward.default", "aten._ctc_loss_backward.Tensor",
    "aten.grid_sampler_2d_backward.default", "aten.grid_sampler_3d_backward.default",
})
_CUMSUM = frozenset({"aten.cumsum.default", "aten.cumsum_.default", "aten.cumsum.out"})
_SCATTER_REDUCE = frozenset({"aten.scatter_reduce.two", "aten.scatter_reduce_.two",
                             "aten.scatter_reduce.two_out"})
_EMBEDDING_BAG_MAX = 2  # mode index of "max" in ATen's embedding_bag


def _arg(args: tuple, kwargs: dict, i: int, name: str) -> Any:
    return kwargs[name] if name in kwargs else (args[i] if len(args) > i else None)


def refusal(name: str, args: tuple, kwargs: dict) -> str | None:
    """Why CUDA under deterministic algorithms refuses the op ``name`` with these arguments,
    or ``None`` where it has a deterministic kernel (or is not on torch's list)."""
    if name in ALWAYS:
        return name
    if name in _CUMSUM:
        x, dtype = args[0], _arg(args, kwargs, 2, "dtype")
        out = dtype if dtype is not None else x.dtype
        if out.is_floating_point or out.is_complex:
            return f"{name} in {out}"
    if name.startswith("aten.bincount") and _arg(args, kwargs, 1, "weights") is not None:
        return f"{name} with weights"
    if name in _SCATTER_REDUCE and _arg(args, kwargs, 4, "reduce") == "prod":
        return f"{name} with reduce='prod'"
    if (name.startswith("aten._embedding_bag_backward")
            or name.startswith("aten._embedding_bag_dense_backward")):
        mode = _arg(args, kwargs, 7 if "dense" in name else 8, "mode")
        if mode == _EMBEDDING_BAG_MAX:
            return f"{name} with mode='max'"
    return None


class NondeterministicOnCuda(TorchDispatchMode):
    """Within it, every op with no deterministic CUDA kernel is counted in ``found``
    (``{reason: calls}``); ``ops`` holds every op name seen, to show the recording worked."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, int] = {}
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        name = str(func)
        self.ops.add(name)
        why = refusal(name, args, kwargs)
        if why is not None:
            self.found[why] = self.found.get(why, 0) + 1
        return func(*args, **kwargs)


def _main(argv: list[str]) -> int:
    """``python tests/_cuda_determinism.py JOBS.json OUT.json``: train each job's settings
    (``args_from_dict``) on the CPU under the recorder; writes ``{name: {"found": ..., "ops":
    [every op name seen]}}``."""
    import json
    from pathlib import Path

    from isotropy.training.run import run_training
    from isotropy.training.settings import args_from_dict

    jobs = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    out: dict[str, Any] = {}
    for name, settings in jobs.items():
        iso_args, train_args = args_from_dict(settings)
        with NondeterministicOnCuda() as seen:
            run_training(iso_args, train_args)
        out[name] = {"found": seen.found, "ops": sorted(seen.ops)}
    Path(argv[1]).write_text(json.dumps(out, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(_main(sys.argv[1:]))
