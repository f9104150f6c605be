r"""What a run directory of ``isotropy train`` holds, and which of its entries are ours.

::

    config.json         every setting, the resolved data source and sizes, versions, git commit
    metrics.jsonl       one JSON object per Trainer log (training and evaluation)
    measurements.jsonl  one JSON object per evaluation: the representation measurements
                        (per layer, spectra, per-dimension mean/std, undefined-value reasons)
    checkpoint-N/       the Trainer's checkpoints, plus isotropy_state.pt (Sigma_S, the entropy
                        window, the measurements' Sigma_S), written last: a checkpoint without
                        it is incomplete (the run stopped while writing it) and never resumed
    eval_predictions.csv  one row per evaluation example (guid, label, prediction, outputs)
    model/              the fine-tuned model and tokenizer (``AutoModel...from_pretrained``)
    results.json        final and best metrics; written last: its presence marks a finished run
    .isotropy-run.lock  held by the one process writing the run
                        (:meth:`~isotropy.rundir.RunDirectory.writer`)

A folder is taken for a run only by its own record: a ``config.json`` that is a JSON object
with the ``settings`` sections ``isotropy`` and ``training`` (and, where present, an integer
``measurement_format``), as :meth:`~isotropy.rundir.RunDirectory.write_config` writes it
(:func:`run_record_problem`). In a run's folder, only the entries a run writes
(:func:`written_by_a_run`) are ever deleted.

``config.json`` holds ``measurement_format`` (absent in runs written before it existed: 1).
Format 2: per-layer IsoScore* shrinks each layer's cloud toward that layer's own
:math:`\Sigma_S` (format 1: toward the union's), and the training-time [CLS] anisotropy
spectrum is taken over the whole gradient-accumulation cycle, with its number of points
(format 1: per micro-batch). Task metrics and the union's IsoScore* mean the same in both.
"""

from __future__ import annotations

import re
from typing import Any

MEASUREMENT_FORMAT = 2

CONFIG = "config.json"
RESULTS = "results.json"
METRICS = "metrics.jsonl"
MEASUREMENTS = "measurements.jsonl"
PREDICTIONS = "eval_predictions.csv"
MODEL = "model"
CHECKPOINT_STATE = "isotropy_state.pt"
TRAINER_STATE = "trainer_state.json"
LOCK = ".isotropy-run.lock"


def is_bookkeeping(name: str) -> bool:
    """The lock file and the writability probe: never part of a run."""
    return name.startswith(LOCK) or name.startswith(".isotropy-write-test-")


# what a stop (SIGKILL) can leave behind of a write in progress: save_model's temporary
# folder (tempfile.mkdtemp(prefix=".model-")) and the atomic writers' temporary files of the
# run's own files (``.<name>.<random>.tmp<suffix>``, :func:`isotropy.io.atomic_path`)
_LEFTOVER = re.compile(
    r"\.model-[a-z0-9_]{8}"
    r"|\.(config\.json|results\.json|metrics\.jsonl|measurements\.jsonl"
    r"|eval_predictions\.csv)\.[a-z0-9_]{8}\.tmp\.(json|jsonl|csv)")
_CHECKPOINT = re.compile(r"checkpoint-(0|[1-9][0-9]*)")  # the Trainer's checkpoint-{global_step}
_RUN_FILES = frozenset({CONFIG, RESULTS, METRICS, MEASUREMENTS, PREDICTIONS, MODEL,
                        "tensorboard"})


def is_leftover(name: str) -> bool:
    """A temporary file or folder of a write that a stop cut short (ours by its name).

    >>> [is_leftover(n) for n in (".model-ab12cd34", ".metrics.jsonl.x1y2z3w4.tmp.jsonl",
    ...                           ".model-notes")]
    [True, True, False]
    """
    return _LEFTOVER.fullmatch(name) is not None


def checkpoint_name_step(name: str) -> int | None:
    """The step of a checkpoint folder's name as the Trainer writes it (``checkpoint-<step>``,
    no leading zero), else ``None``.

    >>> [checkpoint_name_step(n) for n in ("checkpoint-12", "checkpoint-012", "checkpoint-4.bak")]
    [12, None, None]
    """
    m = _CHECKPOINT.fullmatch(name)
    return None if m is None else int(m.group(1))


def written_by_a_run(name: str) -> bool:
    """Whether an entry of a run directory named ``name`` is one a run writes: its files,
    ``model/``, ``checkpoint-N/``, the TensorBoard folder, and the temporary files of its
    writes.

    >>> [written_by_a_run(n) for n in ("metrics.jsonl", "checkpoint-12", "thesis.txt")]
    [True, True, False]
    """
    return name in _RUN_FILES or _CHECKPOINT.fullmatch(name) is not None or is_leftover(name)


def run_record_problem(config: Any) -> str | None:
    """Why ``config`` (the parsed ``config.json`` of a folder) is not the record of a run of
    ours, or ``None`` when it is: a JSON object whose ``settings`` holds the ``isotropy`` and
    ``training`` sections, and whose ``measurement_format``, when present, is an integer.

    >>> run_record_problem({"settings": {"isotropy": {}, "training": {}},
    ...                     "measurement_format": 2}) is None
    True
    >>> run_record_problem({"model_type": "bert", "architectures": ["BertModel"]})
    'it has no settings of an isotropy run (keys: architectures, model_type)'
    """
    if not isinstance(config, dict):
        return f"it holds a JSON {type(config).__name__}, not the object a run writes"
    settings = config.get("settings")
    if not isinstance(settings, dict) or not all(
            isinstance(settings.get(k), dict) for k in ("isotropy", "training")):
        keys = ", ".join(sorted(map(str, config))[:6]) or "none"
        return f"it has no settings of an isotropy run (keys: {keys})"
    fmt = config.get("measurement_format", 1)
    if isinstance(fmt, bool) or not isinstance(fmt, int):
        return f"its measurement_format is {fmt!r}, not a format number"
    return None
