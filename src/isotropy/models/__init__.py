"""Hugging Face models: loading (hub id, local path, ``minilm``), hidden states -> point
clouds, :class:`~isotropy.models.regularized.RegularizedModel` and the I-STAR shrinkage
covariance refresh. Modules here import ``transformers`` lazily or not at all, so
``import isotropy`` stays light."""
