"""``isotropy sweep``: ``spec`` (spec files, presets, points, their names and checks, the
sweep's state file) and ``engines`` (the local and Ray engines, the worker, the driver)."""
