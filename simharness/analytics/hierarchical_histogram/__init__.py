"""TFF's hierarchical histograms (``analytics/hierarchical_histogram``).

`hierarchical_histogram_lib.build_hierarchical_histogram_process` /
``build_hierarchical_histogram_computation`` (discretize, clip, tree-sum with
optional central Gaussian noise), `hierarchical_histogram_factory`,
`clipping_factory`, `hierarchical_histogram_decoder.HierarchicalHistogramDecoder`
(node / range / quantile queries) and `build_tree_from_leaf`.
"""
