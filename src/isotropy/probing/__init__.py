"""Probing a model: what is measured on its hidden states.

Texts are read and checked (``inputs``), turned into batches of model inputs (``batches``),
run through the one hidden-state pass (:func:`isotropy.models.forward.hidden_state_batches`)
and fed to a consumer with ``update(hidden_states, attention_mask)``: ``layerwise.LayerClouds``
(the ``measure`` command) or ``eval_measures.EvalMeasures`` (``analyze``, with ``checkpoint``;
and the evaluations of ``train``, fed by the trainer's own forward pass). ``results`` writes
the tables."""
