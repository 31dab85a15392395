"""2021's ``tff.learning.build_federated_sgd_process`` against today's ``build_fed_sgd``.

The alias runs today's builder, so over 3 rounds its losses and weights must
equal ``tff.learning.algorithms.build_fed_sgd``'s bit for bit; its state and
metrics have 2021's structure (``stat``: the clients' weights summed, the
non-finite updates counted); what has no exact counterpart raises. Also the
2021 ``tff.learning.framework`` names that today's classes carry.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from tests.tff.tutorials2021 import test_legacy_2021_aliases as aliases


@pytest.mark.slow  # ~8 s: two FedSGD processes traced, 3 rounds each
def test_fed_sgd_equals_build_fed_sgd_bit_for_bit():
    process = tff.learning.build_federated_sgd_process(
        aliases.model_fn,
        server_optimizer_fn=lambda: tf.keras.optimizers.SGD(learning_rate=0.02, momentum=0.5),
    )
    state, metrics, losses = aliases._run_2021(process)
    today = tff.learning.algorithms.build_fed_sgd(
        aliases.model_fn,
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.02, momentum=0.5),
    )
    today_state, today_metrics, today_losses = aliases._run_today(today)
    aliases._assert_same_bits(state, losses, today, today_state, today_losses)
    assert losses[0] > losses[2]
    assert list(state._fields[:4]) == [
        'model',
        'optimizer_state',
        'delta_aggregate_state',
        'model_broadcast_state',
    ]
    assert list(metrics) == ['broadcast', 'aggregation', 'train', 'stat']
    assert metrics['aggregation'] == collections.OrderedDict(mean_value=(), mean_weight=())
    assert metrics['train'] == collections.OrderedDict(
        (k, v)
        for k, v in today_metrics['client_work']['train'].items()
        if k in ('sparse_categorical_accuracy', 'loss')
    )
    assert metrics['stat'] == collections.OrderedDict(client_weight=30.0, has_non_finite_delta=0)
    weights = process.get_model_weights(state)
    np.testing.assert_array_equal(weights.trainable[0], state.model.trainable[0])

    # A client without examples: 0 / 0 is not finite, so it sends weight 0 (as in 2021).
    _, with_empty = process.next(state, aliases.TRAIN + [aliases.TRAIN[0].take(0)])
    assert with_empty['stat'] == collections.OrderedDict(
        client_weight=30.0, has_non_finite_delta=1
    )


@pytest.mark.parametrize(
    'kwargs, error, match',
    [
        (dict(client_weighting=tff.learning.ClientWeighting.UNIFORM), ValueError, 'UNIFORM'),
        (
            dict(model_update_aggregation_factory=tff.aggregators.UnweightedMeanFactory()),
            ValueError,
            'unweighted',
        ),
        (dict(aggregation_process=object()), ValueError, 'model_update_aggregation_factory'),
        (dict(broadcast_process=object()), ValueError, 'model_distributor'),
        (dict(client_weighting=lambda outputs: 1.0), TypeError, 'client_weighting'),
        (
            dict(server_optimizer_fn=lambda: tf.keras.optimizers.Adam(0.01)),
            TypeError,
            'server_optimizer_fn.*build_adam',
        ),
    ],
)
def test_what_does_not_map_exactly_raises(kwargs, error, match):
    with pytest.raises(error, match=match):
        tff.learning.build_federated_sgd_process(aliases.model_fn, **kwargs)


def test_framework_names_are_todays():
    framework = tff.learning.framework
    assert framework.ModelWeights is tff.learning.models.ModelWeights
    assert framework.ServerState is tff.learning.legacy_2021.ServerState
    weights_type = framework.weights_type_from_model(aliases.model_fn)
    assert [t.shape for t in weights_type.trainable] == [(784, 10), (10,)]
