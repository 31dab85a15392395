"""Unit tests of simharness.learning.models."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from simharness.learning import reference_fedavg_workload
from simharness.errors import ConfigError, SimharnessTypeError, SimharnessValueError
from simharness.learning import models as m

SPECS = {
    'logreg': m.get_model('logreg', (12,), 4),
    'mlp': m.get_model('mlp', (12,), 4, hidden_sizes=(8, 6)),
    'cnn8': m.get_model('cnn', (8, 8, 1), 10, conv_filters=(4, 6)),
    'cnn28': m.get_model('cnn', (28, 28, 1), 10),
}


def _batch(spec, n=16, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n,) + spec.input_shape).astype(np.float32)
    y = rng.integers(0, spec.num_classes, size=n).astype(np.int32)
    return x, y


class TestSpec:
    def test_shapes_and_counts(self):
        ref = m.reference_mlp_spec()
        assert ref.weight_shapes == [(60, 256), (256,), (256, 256), (256,), (256, 10), (10,)]
        assert ref.num_parameters == 83_978
        assert SPECS['logreg'].weight_shapes == [(12, 4), (4,)]
        assert SPECS['cnn28'].weight_shapes == [
            (3, 3, 1, 16),
            (16,),
            (3, 3, 16, 32),
            (32,),
            (14 * 14 * 32, 10),
            (10,),
        ]
        assert SPECS['cnn8'].weight_shapes[4] == (4 * 4 * 6, 10)
        assert m.get_model('mlp', [60], 10) == ref  # defaults, list -> tuple
        assert m.get_model('logreg', (8, 8, 1), 10).num_features == 64

    def test_frozen(self):
        with pytest.raises(Exception):
            SPECS['mlp'].num_classes = 3

    @pytest.mark.parametrize(
        'call, match',
        [
            (
                lambda: m.get_model('resnet', (8,), 10),
                "unknown model 'resnet'; allowed: 'cnn', 'logreg', 'mlp'",
            ),
            (lambda: m.ModelSpec('transformer', (8,), 10), "allowed: 'cnn', 'logreg', 'mlp'"),
            (
                lambda: m.get_model('logreg', (8,), 10, hidden_sizes=(3,)),
                "model 'logreg' has no option 'hidden_sizes' .its options: none",
            ),
            (
                lambda: m.get_model('mlp', (8,), 10, kernel_size=3),
                "model 'mlp' has no option 'kernel_size' .its options: hidden_sizes",
            ),
            (lambda: m.ModelSpec('logreg', (8,), 10, pool_size=2), "has no option 'pool_size'"),
            (lambda: m.get_model('mlp', (8,), 1), 'num_classes must be an int >= 2'),
            (lambda: m.get_model('mlp', (8,), 10, hidden_sizes=()), 'at least one hidden layer'),
            (lambda: m.get_model('mlp', (8,), 10, hidden_sizes=(4, 0)), 'positive ints'),
            (lambda: m.get_model('mlp', (), 10), 'input_shape must not be empty'),
            (lambda: m.get_model('mlp', (8.5,), 10), 'input_shape must be a sequence'),
            (lambda: m.get_model('cnn', (64,), 10), r'needs input_shape \(H, W, C\)'),
            (lambda: m.get_model('cnn', (8, 8, 1), 10, conv_filters=(4,)), 'needs 2 values'),
            (lambda: m.get_model('cnn', (1, 8, 1), 10), 'smaller than the pool size'),
            (lambda: m.get_model('cnn', (8, 8, 1), 10, kernel_size=0), 'positive int'),
        ],
    )
    def test_config_errors(self, call, match):
        with pytest.raises(ConfigError, match=match):
            call()


class TestInit:
    @pytest.mark.parametrize('name', list(SPECS))
    def test_init(self, name):
        spec = SPECS[name]
        w = m.init_weights(spec, 0)
        assert [a.shape for a in w] == spec.weight_shapes
        assert all(a.dtype == np.float32 for a in w)
        for a, b in zip(w, m.init_weights(spec, 0)):
            np.testing.assert_array_equal(a, b)
        assert not np.array_equal(w[0], m.init_weights(spec, 1)[0])
        for a in w:
            if a.ndim == 1:
                assert not a.any()
            else:
                rf = int(np.prod(a.shape[:-2]))
                lim = np.sqrt(6 / (rf * (a.shape[-2] + a.shape[-1])))
                assert np.abs(a).max() <= lim and np.abs(a).max() > 0.9 * lim

    def test_reference_init(self):
        w = m.reference_mlp_init()
        _, w_ref = reference_fedavg_workload()
        for a, b in zip(w, w_ref):
            np.testing.assert_array_equal(a, b)

    def test_seed_errors(self):
        with pytest.raises(SimharnessValueError, match='seed must be >= 0'):
            m.init_weights(SPECS['mlp'], -1)
        with pytest.raises(SimharnessTypeError, match='seed must be an int'):
            m.init_weights(SPECS['mlp'], 1.0)


class TestReferenceLoss:
    def test_initial_loss(self):
        cd, w = reference_fedavg_workload()
        x = np.concatenate([cd.client_arrays(c)['x'] for c in cd.client_ids])
        y = np.concatenate([cd.client_arrays(c)['y'] for c in cd.client_ids])
        assert x.shape == (50_000, 60)
        loss, acc = m.numpy_evaluate(m.reference_mlp_spec(), w, x, y)
        assert abs(loss - 2.433921) < 1e-6
        assert 0.0 < acc < 0.2
        # Mean over clients of client means (the reference definition) agrees.
        per_client = [
            m.numpy_evaluate(
                m.reference_mlp_spec(), w, cd.client_arrays(c)['x'], cd.client_arrays(c)['y']
            )[0]
            for c in cd.client_ids[:100]
        ]
        part, _ = m.numpy_evaluate(m.reference_mlp_spec(), w, x[:5000], y[:5000])
        assert abs(np.mean(per_client) - part) < 1e-9
        tf_loss = float(m.loss(m.reference_mlp_spec(), w, x, y))
        assert abs(tf_loss - loss) < 1e-5


class TestForward:
    @pytest.mark.parametrize('name', list(SPECS))
    def test_eager_graph_numpy_agree(self, name):
        spec = SPECS[name]
        w = m.init_weights(spec, 3)
        x, y = _batch(spec)
        logits = m.forward(spec, w, x)
        assert logits.shape == (16, spec.num_classes) and logits.dtype == tf.float32
        eager_loss = float(m.loss(spec, w, x, y))
        eager_acc = float(m.accuracy(spec, w, x, y))

        sig = (
            [tf.TensorSpec(s, tf.float32) for s in spec.weight_shapes],
            tf.TensorSpec((None,) + spec.input_shape, tf.float32),
            tf.TensorSpec((None,), tf.int32),
        )

        @tf.function(input_signature=sig)
        def graph_fn(weights, xb, yb):
            return (
                m.forward(spec, weights, xb),
                m.loss(spec, weights, xb, yb),
                m.accuracy(spec, weights, xb, yb),
            )

        g_logits, g_loss, g_acc = graph_fn([tf.constant(a) for a in w], x, y)
        np.testing.assert_allclose(g_logits.numpy(), logits.numpy(), rtol=1e-5, atol=1e-6)
        assert abs(float(g_loss) - eager_loss) < 1e-6
        assert float(g_acc) == eager_acc
        np_loss, np_acc = m.numpy_evaluate(spec, w, x, y, batch_size=5)
        assert abs(np_loss - eager_loss) < 1e-5
        assert abs(np_acc - eager_acc) < 1e-6

    @pytest.mark.parametrize('name', list(SPECS))
    def test_trained_weights_agree(self, name):
        # Random (not just initial) weights, so that ReLUs and pools matter.
        spec = SPECS[name]
        rng = np.random.default_rng(9)
        w = [rng.normal(size=s).astype(np.float32) * 0.3 for s in spec.weight_shapes]
        x, y = _batch(spec, n=32, seed=1)
        np_loss, np_acc = m.numpy_evaluate(spec, w, x, y)
        assert abs(np_loss - float(m.loss(spec, w, x, y))) < 1e-5 * max(1.0, np_loss)
        assert abs(np_acc - float(m.accuracy(spec, w, x, y))) < 1e-6

    def test_gradients(self):
        for spec in SPECS.values():
            w = [tf.Variable(a) for a in m.init_weights(spec, 0)]
            x, y = _batch(spec)
            with tf.GradientTape() as tape:
                value = m.loss(spec, w, x, y)
            grads = tape.gradient(value, w)
            assert all(g is not None for g in grads)
            assert [tuple(g.shape) for g in grads] == spec.weight_shapes

    def test_flat_and_image_inputs(self):
        spec = SPECS['cnn8']
        w = m.init_weights(spec, 0)
        x, y = _batch(spec)
        np.testing.assert_allclose(
            m.forward(spec, w, x.reshape(16, 64)).numpy(), m.forward(spec, w, x).numpy()
        )
        dense = m.get_model('mlp', (8, 8, 1), 10, hidden_sizes=(5,))
        wd = m.init_weights(dense, 0)
        np.testing.assert_allclose(
            m.forward(dense, wd, x).numpy(), m.forward(dense, wd, x.reshape(16, 64)).numpy()
        )
        assert (
            abs(
                m.numpy_evaluate(dense, wd, x, y)[0]
                - m.numpy_evaluate(dense, wd, x.reshape(16, 64), y)[0]
            )
            < 1e-12
        )
        # int64 labels and float64 inputs are accepted.
        assert np.isfinite(float(m.loss(dense, wd, x.astype(np.float64), y.astype(np.int64))))

    def test_errors(self):
        spec = SPECS['mlp']
        w = m.init_weights(spec, 0)
        x, y = _batch(spec)
        with pytest.raises(SimharnessValueError, match='has 6 weight tensors'):
            m.forward(spec, w[:4], x)
        with pytest.raises(SimharnessValueError, match=r'weight 2 must have shape \(8, 6\)'):
            m.forward(spec, w[:2] + [np.zeros((6, 8), np.float32)] + w[3:], x)
        with pytest.raises(SimharnessTypeError, match='weight 0 must be float32, got float64'):
            m.forward(spec, [w[0].astype(np.float64)] + w[1:], x)
        with pytest.raises(SimharnessTypeError, match='list of tensors'):
            m.forward(spec, {'w': w}, x)
        with pytest.raises(SimharnessValueError, match=r'x must have shape \[batch, 12\]'):
            m.forward(spec, w, np.zeros((4, 24), np.float32))
        with pytest.raises(SimharnessTypeError, match='labels must be integers'):
            m.loss(spec, w, x, y.astype(np.float32))
        with pytest.raises(SimharnessValueError, match=r'labels must be in \[0, 4\)'):
            m.numpy_evaluate(spec, w, x, np.full(16, 4))
        with pytest.raises(SimharnessValueError, match='x has 15 examples and y has 16'):
            m.numpy_evaluate(spec, w, x[:15], y)
        with pytest.raises(SimharnessValueError, match='at least one example'):
            m.numpy_evaluate(spec, w, x[:0], y[:0])
        with pytest.raises(SimharnessTypeError, match='labels must be integers'):
            m.numpy_evaluate(spec, w, x, y.astype(np.float32))
        with pytest.raises(SimharnessValueError, match='batch_size'):
            m.numpy_evaluate(spec, w, x, y, batch_size=0)
