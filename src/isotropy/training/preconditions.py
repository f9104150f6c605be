"""What ``isotropy train`` checks before any work: the model (and the I-STAR layers it has),
the resume point and the recorded settings of an earlier run, and the Trainer settings that
would silently measure or regularize something else (dropped evaluation batches, SQuAD's label
names, parallel set-ups in which a regularizer sees only part of the batch)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from transformers.training_args import ParallelMode

from isotropy._validation import one_line
from isotropy.clouds import parse_layers
from isotropy.data.glue import TaskSpec
from isotropy.distributed import is_distributed, world_size
from isotropy.io import read_json
from isotropy.models.loading import check_tokenizer, longest_input
from isotropy.rundir import TRAINER_STATE, RunDirectory
from isotropy.rundir.layout import checkpoint_name_step
from isotropy.training.config import IsotropyArguments, TrainArguments
from isotropy.training.predictions import SPAN_LABELS

__all__ = [
    "IGNORED_FOR_RESUME",
    "check_best_metric",
    "check_drop_last",
    "check_feature_lengths",
    "check_model",
    "check_parallel",
    "check_precision",
    "checkpoint_step",
    "evaluation_metric_names",
    "check_resume_point",
    "prepare_span_arguments",
    "resume_point",
    "settings_difference",
]


def check_model(path: str, iso_args: IsotropyArguments | None = None) -> Any:
    """Load the model's config and tokenizer (cheap) so a bad model, or I-STAR layers it does
    not have, fail before any work."""
    from transformers import AutoConfig, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(path)
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(
            f"could not load model {path!r} ({str(err).splitlines()[0]}); if the hub cannot be "
            "reached, pass a local model directory as --model (or --model minilm) and the data "
            "with --data_dir"
        ) from err
    check_tokenizer(tokenizer, config, path)
    n_layers = getattr(config, "num_hidden_layers", None)
    if iso_args is not None and "istar" in iso_args.regularizers and isinstance(n_layers, int):
        layers = parse_layers(iso_args.istar_layers)
        for i in [layers] if isinstance(layers, int) else (
                layers if isinstance(layers, list) else []):
            if not -(n_layers + 1) <= i <= n_layers:
                raise ValueError(
                    f"--istar_layers {iso_args.istar_layers}: layer {i} is out of range, the model "
                    f"has {n_layers} transformer layers (valid: 0 = embeddings, 1..{n_layers}, "
                    f"or -1..-{n_layers + 1})")
    return config


_SPEED_METRICS = ("runtime", "samples_per_second", "steps_per_second")


def evaluation_metric_names(spec: TaskSpec, n_layers: int) -> list[str]:
    """The names (without ``eval_``) of what every evaluation of a run of task ``spec`` on a
    model of ``n_layers`` transformer layers records: the loss, the task metrics, the
    prediction summary, the representation measures and the Trainer's speed."""
    from isotropy.probing.eval_scalars import scalar_metrics

    zero = {"isoscore": 0.0, "isoscore_star": 0.0, "avg_cosine": 0.0, "twonn": 0.0}
    record = {"num_layers": n_layers, "union": zero,
              "layers": [{"layer": i, "token": zero, "cls": zero} for i in range(n_layers + 1)]}
    summary = {"classification": ["collapsed", "majority_fraction"],
               "regression": ["collapsed"]}.get(spec.kind, [])
    return ["loss", *spec.metrics, *summary, *scalar_metrics(record), *_SPEED_METRICS]


def check_best_metric(train_args: Any, spec: TaskSpec, config: Any) -> None:
    """``ValueError`` when ``--metric_for_best_model`` names nothing an evaluation records
    (:func:`evaluation_metric_names`): the Trainer would fail at the first checkpoint after
    an evaluation, with the work up to it lost."""
    metric = getattr(train_args, "metric_for_best_model", None)
    if metric is None:
        return
    n_layers = getattr(config, "num_hidden_layers", None)
    names = evaluation_metric_names(spec, n_layers if isinstance(n_layers, int) else 0)
    name = metric.removeprefix("eval_")
    if name in names:
        return
    import difflib

    close = difflib.get_close_matches(name, names, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise ValueError(
        f"--metric_for_best_model {metric}: no evaluation of {spec.display_name} records it"
        f"{hint}; it records loss, {', '.join(spec.metrics)}, the measures (isoscore_star_union, "
        "twonn_cls_last, ...; see metrics.jsonl)")


def check_feature_lengths(lengths: Sequence[int], config: Any, max_seq_length: int | None,
                          model: str) -> None:
    """``ValueError`` before training when a tokenised example (``lengths``: every example's
    token count after truncation to ``max_seq_length``) is longer than the model takes
    (:func:`longest_input`), which would otherwise stop training at that batch with a shape
    error. A ``max_seq_length`` above the limit that no example reaches is harmless.

    >>> from types import SimpleNamespace as NS
    >>> try:
    ...     check_feature_lengths([12, 906], NS(max_position_embeddings=512, model_type="bert"),
    ...                           1000, "minilm")
    ... except ValueError as err:
    ...     print(*str(err).split(", "), sep="\\n")
    --max_seq_length 1000 lets through an example of 906 tokens
    but model 'minilm' takes at most 512 (512 position embeddings): use --max_seq_length 512 ...
    """
    limit, why = longest_input(config)  # the position table: what would fail, not a hint
    longest = max(lengths, default=0)
    if limit is not None and longest > limit:
        given = ("--max_seq_length " + str(max_seq_length) if max_seq_length is not None
                 else "no --max_seq_length")
        raise ValueError(
            f"{given} lets through an example of {longest} tokens, but model {model!r} takes "
            f"at most {limit} ({why}): use --max_seq_length {limit} or less")


def check_resume_point(run_dir: RunDirectory, requested: str) -> Path:
    """The ``--resume_from_checkpoint`` folder, if it is a complete checkpoint of the run
    directory; ``ValueError`` otherwise (checked before anything is changed)."""
    chosen = Path(requested).resolve()
    if chosen.parent != run_dir.path.resolve() or checkpoint_name_step(chosen.name) is None \
            or not RunDirectory.is_complete(chosen):
        raise ValueError(
            f"--resume_from_checkpoint {requested}: not a complete checkpoint of "
            f"{run_dir.path} (choose one of: "
            f"{', '.join(p.name for p in run_dir.complete_checkpoints()) or 'none'})")
    return chosen


def resume_point(run_dir: RunDirectory, requested: str | None) -> list[str]:
    """Make the checkpoint to resume from the last complete one: incomplete checkpoints (the
    run stopped while writing them) are deleted, and with ``--resume_from_checkpoint`` (a
    complete checkpoint of this run) the later ones too. Returns what to tell the user."""
    said = []
    chosen = check_resume_point(run_dir, requested) if requested else None
    last_complete = run_dir.last_checkpoint()
    resumed = chosen or last_complete
    if resumed is not None:  # its weights are read by the Trainer: whole, or one line now
        from isotropy.models.loading import check_weight_files

        advice = (f"cannot resume from {resumed.name}: delete {resumed} to resume from the "
                  "checkpoint before it, or pass --overwrite to start again")
        check_weight_files(str(resumed), advice=advice)
        try:  # the Trainer reads it first, with an error that names no file
            read_json(resumed / TRAINER_STATE, "Trainer state (a JSON object)")
        except (OSError, ValueError) as err:
            raise ValueError(f"{one_line(err, 300)}; {advice}") from None
    for p in run_dir.drop_checkpoints(incomplete=True):
        said.append(f"{p.name} is incomplete (the run stopped while writing it): deleted; "
                    f"resuming from {last_complete.name if last_complete else 'the start'}")
    if chosen is not None:
        later = run_dir.drop_checkpoints(incomplete=False, after=checkpoint_step(chosen))
        if later:
            said.append(f"resuming from {chosen.name}: the later "
                        f"{', '.join(p.name for p in later)} deleted")
    return said


IGNORED_FOR_RESUME = {
    ("isotropy", "resume"), ("isotropy", "overwrite"), ("training", "resume_from_checkpoint"),
    ("training", "overwrite_output_dir"), ("training", "logging_dir"),
}


# settings that name files or folders: the same path written relative to the working directory
# or absolute, or through a symbolic link, is the same setting
PATH_SETTINGS = {
    ("isotropy", "model"), ("isotropy", "data_dir"), ("isotropy", "config"),
    ("training", "output_dir"), ("training", "run_name"),
}


def _as_path(value: Any, cwd: str | None) -> Any:
    """``value`` as a canonical absolute path (symbolic links resolved) when it is one
    (absolute, or a file or folder relative to ``cwd``); else unchanged (a model alias, a hub
    id).

    >>> _as_path("/a/./b/", None)
    '/a/b'
    >>> _as_path("minilm", "/nonexistent-dir")
    'minilm'
    """
    if not isinstance(value, str) or not value:
        return value
    if os.path.isabs(value):
        return os.path.realpath(value)
    if cwd is not None and os.path.exists(os.path.join(cwd, value)):
        return os.path.realpath(os.path.join(cwd, value))
    return value


def settings_difference(old: Mapping[str, Any], new: Mapping[str, Any],
                         data: Mapping[str, Any] | None = None) -> str | None:
    """Why a run with ``old`` config cannot be resumed with settings ``new`` (and data source
    ``data``), else ``None``; a dev split made by example (runs written before SQuAD was split
    by paragraph) does not resume as a split by paragraph."""
    old_cwd, new_cwd = old.get("settings", {}).get("cwd"), new.get("cwd")
    for section in ("isotropy", "training"):
        a, b = old.get("settings", {}).get(section, {}), new.get(section, {})
        for key in sorted(set(a) | set(b)):
            if (section, key) in IGNORED_FOR_RESUME:
                continue
            if (section, key) in PATH_SETTINGS and \
                    _as_path(a.get(key), old_cwd) == _as_path(b.get(key), new_cwd):
                continue
            if a.get(key) != b.get(key):
                return f"setting {key} was {a.get(key)!r}, now {b.get(key)!r}"
    old_data = old.get("data") or {}
    if data and "split_dev_for_training" in data and "split_dev_for_training" in old_data:
        was, now = old_data.get("split_unit", "example"), data.get("split_unit", "example")
        if was != now:
            return f"the dev split was made by {was}, now by {now}"
    return None


def check_drop_last(train_args: TrainArguments, n_eval: int, what: str) -> None:
    """``--dataloader_drop_last`` also drops the Trainer's last evaluation batch: refuse it
    unless the evaluation batches divide the evaluation set."""
    batch = train_args.eval_batch_size * max(1, train_args.world_size)
    if train_args.dataloader_drop_last and n_eval % batch:
        raise ValueError(
            f"--dataloader_drop_last would leave {n_eval % batch} of the {n_eval} evaluation "
            f"{what} unscored (evaluation batches of {batch}): choose an evaluation batch size "
            f"that divides {n_eval}, or drop the flag"
        )


def prepare_span_arguments(spec: TaskSpec, train_args: TrainArguments) -> None:
    """SQuAD's label names for the Trainer (eval loss from start/end positions); settings
    that would leave the span post-processing without its predictions fail here."""
    if spec.kind != "span":
        return
    if train_args.label_names is not None and list(train_args.label_names) != SPAN_LABELS:
        raise ValueError(f"--label_names must be {' '.join(SPAN_LABELS)} for "
                         f"{spec.display_name}, got {' '.join(train_args.label_names)}")
    if train_args.batch_eval_metrics:
        raise ValueError(f"--batch_eval_metrics is not supported for {spec.display_name}: "
                         "answers are decoded from all windows of a question at once")
    train_args.label_names = list(SPAN_LABELS)


def check_parallel(train_args: Any) -> None:
    """Refuse the parallel set-ups in which the regularizers would not see the global batch.

    Setting up the devices (``train_args.parallel_mode``) joins or starts a launcher's process
    group; then the ranks share the run directory, which rank 0 alone writes. One process that
    sees several GPUs would fall back to ``DataParallel``, where each GPU scores only its slice.

    >>> from types import SimpleNamespace
    >>> check_parallel(SimpleNamespace(parallel_mode=ParallelMode.NOT_PARALLEL, n_gpu=1))
    >>> check_parallel(SimpleNamespace(parallel_mode=ParallelMode.NOT_DISTRIBUTED, n_gpu=2))
    Traceback (most recent call last):
    ...
    ValueError: one process sees 2 GPUs: the Trainer would use DataParallel, ...
    """
    if train_args.parallel_mode != ParallelMode.DISTRIBUTED and is_distributed():
        raise ValueError(
            f"{world_size()} processes were launched but the Trainer does not train them in "
            "parallel (on a machine without a GPU, pass --use_cpu true)"
        )
    if train_args.parallel_mode == ParallelMode.NOT_DISTRIBUTED and train_args.n_gpu > 1:
        raise ValueError(
            f"one process sees {train_args.n_gpu} GPUs: the Trainer would use DataParallel, in "
            "which each GPU's regularizers see only its slice of the batch; make one GPU "
            "visible (CUDA_VISIBLE_DEVICES=0) or start one process per GPU (accelerate "
            "launch, torchrun)"
        )


def checkpoint_step(checkpoint: Path | None) -> int:
    return int(checkpoint.name.rsplit("-", 1)[-1]) if checkpoint is not None else 0


def check_precision(train_args: Any, *, native_bf16: bool | None = None) -> None:
    """Refuse a half-precision flag that would not run as asked on this device.

    - ``--fp16`` needs a GPU: on the CPU the Trainer trains in float32 while the run records
      ``fp16: true``, so the record would say something else ran.
    - ``--bf16`` on a CPU without native bf16 (AVX-512 bf16 or AMX,
      :func:`isotropy.runtime.cpu_has_native_bf16`) runs, but each MiniLM step was measured
      20x slower than in float32 on such a CPU; where it is native it was 1.5-1.8x faster.

    ``native_bf16`` overrides the CPU probe (tests).

    >>> from types import SimpleNamespace
    >>> check_precision(SimpleNamespace(fp16=True, bf16=False, device=SimpleNamespace(type="cpu")))
    Traceback (most recent call last):
    ...
    ValueError: --fp16 needs a GPU and this run is on the CPU: ...
    """
    from isotropy.runtime import cpu_has_native_bf16

    if not (train_args.fp16 or train_args.bf16):
        return
    if train_args.device.type != "cpu":
        return
    if train_args.fp16:
        raise ValueError(
            "--fp16 needs a GPU and this run is on the CPU: the Trainer would train in float32 "
            "and the run would record fp16; drop --fp16 (or use --bf16 on a CPU with native "
            "bf16)")
    native = cpu_has_native_bf16() if native_bf16 is None else native_bf16
    if not native:
        import torch

        raise ValueError(
            "--bf16 on this CPU (torch kernels: "
            f"{torch.backends.cpu.get_cpu_capability()}, no avx512_bf16 or amx_bf16) is "
            "emulated, about 20x slower than float32; drop --bf16 (it pays on CPUs with "
            "native bf16 and on GPUs)")
