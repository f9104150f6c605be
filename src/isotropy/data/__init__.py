"""Datasets: local GLUE / SST-5 / SQuAD loaders, the Hugging Face hub source, the task
registry, and the train/eval data of ``isotropy train`` from either source."""

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
from isotropy.data.hub import HUB_DATASETS, HubDataset, HubUnavailableError, load_hub_splits
from isotropy.data.sources import (
    DATA_SOURCES,
    TaskData,
    check_data_source,
    load_splits,
    load_task_data,
)

__all__ = [
    "DATA_SOURCES",
    "HUB_DATASETS",
    "SPLITS",
    "TASKS",
    "Answer",
    "Example",
    "HubDataset",
    "HubUnavailableError",
    "TaskData",
    "TaskSpec",
    "check_data_source",
    "default_glue_dir",
    "get_task",
    "load_hub_splits",
    "load_split",
    "load_splits",
    "load_task_data",
    "require_split",
    "split_path",
    "task_names",
]
