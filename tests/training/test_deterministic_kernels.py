"""Every op that the GPU specs' runs under ``--full_determinism true`` dispatch has a
deterministic CUDA kernel, checked on the CPU before a GPU window is spent on it: each kind
of run in ``benchmarks/gpu/runs*.yaml`` trains on a tiny model of its spec's family (BERT, or
MPNet for ``runs-mpnet.yaml``) under :class:`NondeterministicOnCuda`, which records the ops
torch refuses on CUDA in that mode (``median(dim=...)`` stopped all twelve MPNet runs of the
first GPU try). The recorder is checked on ops of torch's list first."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from _cuda_determinism import _CUMSUM, _SCATTER_REDUCE, ALWAYS, NondeterministicOnCuda
from _models import save_tiny_bert, save_tiny_mpnet
from _training import WORDS

from isotropy.data.glue import default_glue_dir
from isotropy.io import parse_yaml_unique
from isotropy.measures.outliers import massive_activations

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "benchmarks" / "gpu").glob("runs*.yaml"))
# the settings that choose which ops a run dispatches (a task only as regression or not)
KIND_KEYS = ("preset", "regularizer", "include_padding", "select_features",
             "classifier_pooling", "eval_on_start", "eval_strategy",
             "validation_split_percentage")
GLUE_FOLDERS = {"sst2": "SST-2", "mrpc": "MRPC", "cola": "CoLA", "stsb": "STS-B", "rte": "RTE"}
# the model family of a spec's runs, where it is not BERT's (MiniLM is a BERT): its kinds
# train on a tiny model of that family, so that its own layers' ops are recorded too
FAMILY = {"runs-mpnet.yaml": "mpnet"}


def _found(work) -> dict[str, int]:
    with NondeterministicOnCuda() as seen:
        work()
    return seen.found


# ------------------------------------------------------------------ the recorder


def test_every_listed_op_is_an_aten_op():
    for name in ALWAYS | _CUMSUM | _SCATTER_REDUCE:
        _, op, overload = name.split(".")
        assert overload in getattr(torch.ops.aten, op).overloads(), name


def test_median_with_indices_is_refused_and_without_is_not():
    x = torch.randn(4, 6)
    assert _found(lambda: x.median(dim=1)) == {"aten.median.dim": 1}
    assert _found(lambda: torch.median(x.abs(), dim=1, keepdim=True).values) == {
        "aten.median.dim": 1}
    assert _found(lambda: x.median()) == {}
    assert _found(lambda: x.sort(dim=1).values[:, 2]) == {}


def test_cumsum_is_refused_in_floating_point_only():
    assert _found(lambda: torch.ones(5).cumsum(0)) == {"aten.cumsum.default in torch.float32": 1}
    assert _found(lambda: torch.ones(5, dtype=torch.long).cumsum(0)) == {}
    found = _found(lambda: torch.ones(5, dtype=torch.long).cumsum(0, dtype=torch.float64))
    assert found == {"aten.cumsum.default in torch.float64": 1}


def test_arguments_decide_bincount_and_scatter_reduce():
    idx = torch.tensor([0, 1, 1, 3])
    assert _found(lambda: torch.bincount(idx)) == {}
    assert _found(lambda: torch.bincount(idx, weights=torch.ones(4))) == {
        "aten.bincount.default with weights": 1}
    src = torch.arange(4.0)
    assert _found(lambda: torch.zeros(4).scatter_reduce(0, idx, src, "sum")) == {}
    assert _found(lambda: torch.zeros(4).scatter_reduce(0, idx, src, "prod")) == {
        "aten.scatter_reduce.two with reduce='prod'": 1}


def test_backward_ops_are_seen():
    x = torch.randn(1, 2, 5, requires_grad=True)

    def reflect():
        F.pad(x, (1, 1), mode="reflect").sum().backward()

    assert _found(reflect) == {"aten.reflection_pad1d_backward.default": 1}
    assert _found(lambda: F.pad(x, (1, 1), mode="reflect")) == {}  # the forward has a kernel

    w = torch.randn(6, 3, requires_grad=True)
    ids, offsets = torch.tensor([0, 2, 4, 5]), torch.tensor([0, 2])

    def bag(mode):
        return lambda: F.embedding_bag(ids, w, offsets, mode=mode).sum().backward()

    assert any("mode='max'" in k for k in _found(bag("max")))
    assert _found(bag("sum")) == {}


def test_massive_activations_use_no_refused_op():
    x = torch.randn(40, 16)
    x[3, 5] = 5000.0
    assert _found(lambda: massive_activations(x)) == {}


# ------------------------------------------------------------------ the GPU specs' runs


@functools.cache
def _kinds() -> dict[str, dict]:
    """One run's settings per kind of run among the GPU specs' points with full determinism
    (the first point of each kind), named by the kind."""
    from isotropy.sweeps.points import expand
    from isotropy.sweeps.spec import spec_from_dict

    kinds: dict[str, dict] = {}
    for path in SPECS:
        data = parse_yaml_unique(path.read_text(encoding="utf-8").replace("@MODEL@", "m"))
        spec = spec_from_dict(data, str(path))
        for point in expand(spec, "/nonexistent-out"):
            s = point.settings
            if str(s.get("full_determinism", "")).lower() != "true":
                continue
            key = ",".join(f"{k}={s.get(k)}" for k in KIND_KEYS)
            family = FAMILY.get(path.name, "bert")
            kinds.setdefault(f"{key},regression={s['task'] == 'stsb'},model={family}",
                             {**s, "model": family})
    return kinds


def test_the_gpu_specs_have_runs_under_full_determinism():
    kinds = _kinds()
    assert len(kinds) >= 10, sorted(kinds)  # confirm, mpnet, entropy, rte-lr: 14 on 2026-11-30
    regularizers = {s.get("regularizer") for s in kinds.values()}
    assert {"none", "istar", "cosreg", "entropy"} <= regularizers
    assert {s["model"] for s in kinds.values()} == {"bert", "mpnet"}


@pytest.mark.timeout(900)
def test_gpu_spec_runs_dispatch_only_ops_with_deterministic_cuda_kernels(tmp_path):
    glue = default_glue_dir()
    kinds = _kinds()
    tasks = {s["task"] for s in kinds.values()}
    if glue is None or any(not (glue / GLUE_FOLDERS[t] / "train.tsv").is_file() for t in tasks):
        pytest.skip(f"needs GLUE {sorted(tasks)} (../shared/glue_data or GLUE_DIR)")
    models = {"bert": save_tiny_bert(tmp_path / "bert", WORDS),
              "mpnet": save_tiny_mpnet(tmp_path / "mpnet", WORDS)}
    jobs = {}
    for i, (name, s) in enumerate(sorted(kinds.items())):
        s = {k: v for k, v in s.items() if k not in ("max_train_samples", "seed")}
        s.update(model=str(models[s["model"]]), data_dir=str(glue),
                 output_dir=str(tmp_path / f"run{i}"),
                 max_train_samples=16, max_eval_samples=8, max_seq_length=32,
                 per_device_train_batch_size=8, per_device_eval_batch_size=8,
                 num_train_epochs=1, logging_steps=1, shrinkage_tokens=300, use_cpu=True,
                 disable_tqdm=True, report_to="none", save_strategy="no", seed=0)
        if s.get("eval_strategy") == "steps":
            s["eval_steps"] = 1
        jobs[name] = s
    (tmp_path / "jobs.json").write_text(json.dumps(jobs), encoding="utf-8")
    paths = [str(ROOT / "tests"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(paths)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "_cuda_determinism.py"),
         str(tmp_path / "jobs.json"), str(tmp_path / "found.json")],
        env=env, capture_output=True, text=True, timeout=840)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads((tmp_path / "found.json").read_text(encoding="utf-8"))
    assert sorted(found) == sorted(jobs)
    assert all(len(r["ops"]) > 50 for r in found.values()), found  # the recording saw the run
    # the MPNet kinds ran MPNet's own layers: ops that no BERT kind dispatched
    ops = {family: set().union(*(found[n]["ops"] for n in jobs if kinds[n]["model"] == family))
           for family in ("bert", "mpnet")}
    assert ops["mpnet"] - ops["bert"], "the MPNet kinds dispatched no op of their own"
    refused = {name: r["found"] for name, r in found.items() if r["found"]}
    assert refused == {}, json.dumps(refused, indent=1)
