"""Datasets: local GLUE / SST-5 / SQuAD loaders and the task registry."""

from isotropy.data.glue import (
    SPLITS,
    TASKS,
    Answer,
    Example,
    TaskSpec,
    default_glue_dir,
    get_task,
    load_split,
    require_split,
    split_path,
    task_names,
)

__all__ = [
    "SPLITS",
    "TASKS",
    "Answer",
    "Example",
    "TaskSpec",
    "default_glue_dir",
    "get_task",
    "load_split",
    "require_split",
    "split_path",
    "task_names",
]
