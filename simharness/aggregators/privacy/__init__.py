"""TFF's DP queries (``aggregators/privacy``): the tensorflow_privacy `DPQuery` interface.

`query`: `DPQuery`, `SumAggregationDPQuery`, `GaussianSumQuery`,
`NoPrivacySumQuery`, `NoPrivacyAverageQuery`, `NormalizedQuery`.
`quantile`: `QuantileEstimatorQuery`, `NoPrivacyQuantileEstimatorQuery`,
`QuantileAdaptiveClipSumQuery`, `TreeQuantileEstimatorQuery`,
`QAdaClipTreeResSumQuery`. `tree`: `TreeRangeSumQuery` (range sums by
tree aggregation, with ``build_central_gaussian_query``) and the DP-FTRL
streaming queries `TreeCumulativeSumQuery`, `TreeResidualSumQuery`,
`RestartQuery` with their tree aggregators, noise generators and restart
indicators.
"""
