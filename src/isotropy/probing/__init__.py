"""Probing a model: forward passes over a model's hidden states and the measures taken on them.
``layerwise`` (the ``measure`` command), ``analyze`` (the ``analyze`` command, on
``eval_measures``) and ``eval_measures`` (the evaluation measurements of ``train``)."""
