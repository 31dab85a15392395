"""TFF's learning/models/model_examples_test.py, renamed, on our `model_examples.py`.
Left out: none."""

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff

from . import model_examples


def _locals(model):
    return [float(np.asarray(v)) for v in model.local_variables]


@pytest.mark.parametrize('feature_dim', [1, 3])
def test_linear_regression(feature_dim):
    model = model_examples.LinearRegression(feature_dim=feature_dim)
    assert _locals(model) == [0, 0, 0.0]
    batch = collections.OrderedDict(
        x=tf.constant([[0.0] * feature_dim, [1.0] * feature_dim]), y=tf.constant([[0.0], [1.0]])
    )
    output = model.forward_pass(batch)
    np.testing.assert_array_equal(output.predictions, [[0.0], [0.0]])
    assert float(output.loss) == 0.25  # residuals (0, 1): 0.5 * 0.5 * 1
    unfinalized = model.report_local_unfinalized_metrics()
    assert [float(v) for v in unfinalized['loss']] == [0.5, 2.0]
    assert int(unfinalized['num_examples']) == 2
    finalized = {k: float(f(unfinalized[k])) for k, f in model.metric_finalizers().items()}
    assert finalized == {'loss': 0.25, 'num_examples': 2}
    model.reset_metrics()
    assert _locals(model) == [0, 0, 0.0]


def test_tff(tff_stack):
    @tff.tf_computation
    def forward_pass_and_output():
        model = model_examples.LinearRegression(2)

        @tf.function
        def _train(batch):
            return model.forward_pass(batch), model.report_local_unfinalized_metrics()

        return _train(
            batch=collections.OrderedDict(
                x=tf.constant([[0.0, 0.0], [1.0, 1.0]]), y=tf.constant([[0.0], [1.0]])
            )
        )

    @tff.federated_computation
    def at_server():
        return tff.federated_eval(forward_pass_and_output, tff.SERVER)

    batch_output, unfinalized = at_server()
    assert isinstance(batch_output, tff.learning.models.BatchOutput)
    np.testing.assert_array_equal(batch_output.predictions, [[0.0], [0.0]])
    assert float(batch_output.loss) == 0.25
    assert [float(v) for v in unfinalized['loss']] == [0.5, 2.0]
    model = model_examples.LinearRegression(2)
    finalized = {k: float(f(unfinalized[k])) for k, f in model.metric_finalizers().items()}
    assert finalized == {'loss': 0.25, 'num_examples': 2}
