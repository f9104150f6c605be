"""Hugging Face models: loading (hub id, local path, ``minilm``), hidden states -> point
clouds, :class:`~isotropy.models.regularized.RegularizedModel` and the I-STAR shrinkage
covariance refresh. ``import isotropy`` loads none of them until a name is first used
(``isotropy.RegularizedModel``, ...); the measures and the losses never import them, nor
``transformers``."""
