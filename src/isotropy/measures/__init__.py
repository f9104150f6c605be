"""Pure functions on point clouds ``(n_points, dim)`` and their streaming module forms.

Nothing here knows about models or training: IsoScore / IsoScore* and the participation ratio
(:mod:`~isotropy.measures.isoscore`), covariance statistics that merge across batches and
ranks (:mod:`~isotropy.measures.covariance`), cosine similarity, the partition score, the
anisotropy spectrum, TwoNN intrinsic dimension, H0 persistent homology and its entropy, and
:class:`~isotropy.measures.isoscore_metric.IsoScoreMetric`.
"""
