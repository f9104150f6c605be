"""The run directory of ``isotropy train``: its layout and which entries are ours (layout),
the JSONL record files (records), the checkpoint folders (checkpoints), what a run records
of the code that ran it (provenance), and :class:`RunDirectory` (directory)."""

from isotropy.rundir.checkpoints import checkpoint_files, checkpoint_problem
from isotropy.rundir.directory import RunDirectory
from isotropy.rundir.layout import (
    CHECKPOINT_STATE,
    CONFIG,
    LOCK,
    MEASUREMENT_FORMAT,
    MEASUREMENTS,
    METRICS,
    MODEL,
    PREDICTIONS,
    RESULTS,
    TRAINER_STATE,
    run_record_problem,
    written_by_a_run,
)
from isotropy.rundir.provenance import git_commit, library_versions
from isotropy.rundir.records import read_jsonl_whole

__all__ = [
    "CHECKPOINT_STATE", "CONFIG", "LOCK", "MEASUREMENTS", "MEASUREMENT_FORMAT", "METRICS",
    "MODEL", "PREDICTIONS", "RESULTS", "TRAINER_STATE", "RunDirectory", "checkpoint_files",
    "checkpoint_problem", "git_commit", "library_versions", "read_jsonl_whole",
    "run_record_problem", "written_by_a_run",
]
