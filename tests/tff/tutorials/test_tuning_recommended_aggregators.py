"""TFF 0.88's ``docs/tutorials/tuning_recommended_aggregators.ipynb``, renamed.

The tutorial only builds aggregation factories; every cell runs as written on
the default context, and the checks at the end run one round of each.

Left out / changed (tutorial bugs, they fail in TFF 0.88 as well):
- cell 7 calls ``tff.tensorflow_computation``, which TFF 0.88 does not have
  (it is ``tff.tensorflow.computation``): renamed here.
- cell 27 uses ``tff.aggregators.EncodedSumFactory``, which TFF 0.88 no longer
  exports (removed with tensorflow_model_optimization): left out.
"""

import numpy as np

import simharness as federated_language


def test_tuning_recommended_aggregators_tutorial():
    # cell 7
    import math
    import simharness as tff

    tff.tensorflow.computation(lambda: 'Hello, World!')()

    # cell 13
    median_estimate = tff.aggregators.PrivateQuantileEstimationProcess.no_noise(
        initial_estimate=1.0, target_quantile=0.5, learning_rate=0.2
    )

    # cell 18
    zeroing_norm = tff.aggregators.PrivateQuantileEstimationProcess.no_noise(
        initial_estimate=10.0,
        target_quantile=0.98,
        learning_rate=math.log(10),
        multiplier=2.0,
        increment=1.0,
    )
    zeroing_mean = tff.aggregators.zeroing_factory(
        zeroing_norm=zeroing_norm, inner_agg_factory=tff.aggregators.MeanFactory()
    )

    # Equivalent to:
    # zeroing_mean = tff.learning.robust_aggregator(clipping=False)

    # cell 21
    clipping_norm = tff.aggregators.PrivateQuantileEstimationProcess.no_noise(
        initial_estimate=1.0, target_quantile=0.8, learning_rate=0.2
    )
    clipping_mean = tff.aggregators.clipping_factory(
        clipping_norm=clipping_norm, inner_agg_factory=tff.aggregators.MeanFactory()
    )

    # Equivalent to:
    # clipping_mean = tff.learning.robust_aggregator(zeroing=False)

    # cell 24
    dp_mean = tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
        noise_multiplier=0.1, clients_per_round=100
    )

    # Equivalent to:
    # dp_mean = tff.learning.dp_aggregator(
    #   noise_multiplier=0.1, clients_per_round=100, zeroing=False)

    # cell 32
    secagg_bound = tff.aggregators.PrivateQuantileEstimationProcess.no_noise(
        initial_estimate=50.0,
        target_quantile=0.95,
        learning_rate=1.0,
        multiplier=2.0,
    )
    secure_mean = tff.aggregators.MeanFactory(
        tff.aggregators.SecureSumFactory(secagg_bound)
    )

    # Equivalent to:
    # secure_mean = tff.learning.secure_aggregator(zeroing=Fasle, clipping=False)


    # Checks (not in the tutorial): one round of each factory's process.
    value_type = federated_language.TensorType(np.float32, [3])
    weight_type = federated_language.TensorType(np.float32)
    values = [np.array([1.0, 2.0, 3.0], np.float32), np.array([3.0, 2.0, 1.0], np.float32)]
    weights = [1.0, 3.0]
    for factory in (zeroing_mean, secure_mean):
        process = factory.create(value_type, weight_type)
        output = process.next(process.initialize(), values, weights)
        np.testing.assert_allclose(output.result, [2.5, 2.0, 1.5], rtol=1e-6)
    # Clipping at the initial estimate 1.0: both norms (sqrt(14)) are clipped to 1; the
    # estimate then moves toward the 0.8 quantile of the norms: up.
    process = clipping_mean.create(value_type, weight_type)
    output = process.next(process.initialize(), values, weights)
    np.testing.assert_allclose(output.result, np.array([2.5, 2.0, 1.5]) / np.sqrt(14.0), rtol=1e-5)
    assert output.measurements['clipped_count'] == 2
    assert process.next(output.state, values, weights).measurements['clipping_norm'] > 1.0
    process = dp_mean.create(value_type)
    output = process.next(process.initialize(), values)
    assert np.asarray(output.result).shape == (3,)
    median_state = median_estimate.initialize()
    assert median_estimate.report(median_state) == 1.0
