"""Algorithms, Keras models, optimizers and aggregators on every stack (issue 16).

Each case runs a few rounds of a small problem on the `stack` fixture
(thread-1, thread-2, local, process-1, process-2-cpw3) and must give the bits of
the thread-1 stack; the single-stack tests check the math against numpy.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from simharness.data import synthetic_alpha_beta
from simharness.errors import ConfigError, SimharnessTypeError, SimharnessValueError
from simharness.learning import aggregators as G
from simharness.learning import padded as A
from simharness.learning import functional as F
from simharness.learning import optimizers as O
from simharness.learning import models as M
from simharness.learning.fedavg import FedAvg, FedAvgConfig

keras = pytest.importorskip('keras')
tf = pytest.importorskip('tensorflow')
from simharness.core.determinism import pin_tensorflow_threads  # noqa: E402

pin_tensorflow_threads()  # before Keras runs an op here: the bits of the worker processes

DATA = synthetic_alpha_beta(num_clients=6, samples_per_client=12, dim=5, num_classes=3, seed=0)
ARRAYS = [DATA.client_arrays(c) for c in DATA.client_ids]
SPEC = M.get_model('mlp', (5,), 3, hidden_sizes=(8,))


def _keras_model():
    keras.utils.set_random_seed(0)
    km = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation='relu'),
                           keras.layers.BatchNormalization(), keras.layers.Dense(3)])
    return F.from_keras_model(
        km, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        (tf.TensorSpec([None, 5], tf.float32), tf.TensorSpec([None], tf.int32)),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name='accuracy')])


KERAS = _keras_model()

#: name -> (algorithm name, model, build_algorithm kwargs)
CASES = {
    'fedadam-keras-dp': ('fedadam', KERAS, {'server_learning_rate': 0.01,
                                            'aggregator': G.dp_gaussian_fixed(0.5, 6, 1.0)}),
    'fedyogi-adaptive-clip': ('fedyogi', F.from_model_spec(SPEC),
                              {'server_learning_rate': 0.01,
                               'aggregator': G.dp_gaussian_adaptive(0.05, 6, 0.3)}),
    'fedadagrad': ('fedadagrad', F.from_model_spec(SPEC), {'server_learning_rate': 0.01}),
    'fedavgm-clip': ('fedavgm', F.from_model_spec(SPEC), {'aggregator': G.clipping(0.2)}),
    'fedprox-quantized': ('fedprox', F.from_model_spec(SPEC),
                          {'proximal_strength': 0.1, 'aggregator': G.quantized_mean(6, 1.0)}),
    'fedsgd-secure': ('fedsgd', F.from_model_spec(SPEC),
                      {'aggregator': G.secure_sum(8, 1.0, clip=1.0)}),
    'fedavg-client-adam': ('fedavg', F.from_model_spec(SPEC), {'client_optimizer': 'adam',
                                                               'client_learning_rate': 0.01}),
}


_PROCESSES = {}


def _process(case):
    """The case's process, built (traced) once for every stack."""
    if case not in _PROCESSES:
        name, model, kw = CASES[case]
        _PROCESSES[case] = A.build_algorithm(name, model, max_examples=12, batch_size=5,
                                             **{'client_learning_rate': 0.1, **kw})
    return _PROCESSES[case]


def _run(case, rounds=2):
    p = _process(case)
    state = p.initialize()
    out = []
    for _ in range(rounds):
        state, metrics = p.next(state, p.pad(ARRAYS))
        out.append(metrics)
    ev = p.evaluate(p.get_model_weights(state), p.pad(ARRAYS))
    return state, out, ev


@pytest.fixture(scope='module')
def reference():
    """thread-1 results of every case (the stack fixture's first entry)."""
    import simharness
    from simharness.stacks import thread_debugging_executor_factory
    with simharness.execution_context(thread_debugging_executor_factory(clients_per_thread=1)):
        return {c: _run(c) for c in CASES}


#: Run on every stack; the other cases on process-2-cpw3 (2 workers, blocks of 3 clients).
EVERY_STACK = ('fedadam-keras-dp', 'fedyogi-adaptive-clip', 'fedsgd-secure')


def _same(case, reference):
    state, metrics, ev = _run(case)
    ref_state, ref_metrics, ref_ev = reference[case]
    for part in ('weights', 'optimizer', 'aggregator'):
        for a, b in zip(state[part], ref_state[part]):
            assert np.array_equal(a, b), (case, part)
    assert metrics == ref_metrics and ev == ref_ev, case


def test_algorithms_give_the_same_bits_on_every_stack(stack, reference):
    for case in EVERY_STACK:
        _same(case, reference)


@pytest.mark.process
def test_every_algorithm_gives_the_same_bits_on_worker_processes(make_factory, reference):
    import simharness
    with simharness.execution_context(make_factory('process-2-cpw3')):
        for case in CASES:
            if case not in EVERY_STACK:
                _same(case, reference)


def test_results_move_and_report_measurements(reference):
    for case, (state, metrics, ev) in reference.items():
        assert int(state['round_num']) == 2
        assert metrics[0]['num_examples'] == 72.0 and metrics[0]['clients'] == 6.0
        assert all(math.isfinite(m['loss']) and 0 <= m['accuracy'] <= 1 for m in metrics), case
        assert math.isfinite(ev['loss']) and ev['num_examples'] == 72.0
    _, m, _ = reference['fedadam-keras-dp']
    assert m[0]['dp_noise_stddev'] == pytest.approx(0.5 * 1.0 / 6)
    _, m, _ = reference['fedyogi-adaptive-clip']
    state = reference['fedyogi-adaptive-clip'][0]
    assert m[0]['clip_norm'] == pytest.approx(0.3) and float(state['aggregator'][0]) != \
        pytest.approx(0.3)  # the clip norm adapted
    _, m, _ = reference['fedavgm-clip']
    assert 0 <= m[0]['unclipped_fraction'] <= 1 and m[0]['clip_norm'] == pytest.approx(0.2)


def test_fedavg_with_sgd_is_bit_identical_to_the_builtin_fedavg():
    old = FedAvg(SPEC, FedAvgConfig(batch_size=5, client_learning_rate=0.1,
                                    server_momentum=0.5), 12)
    s = old.initialize(seed=0)
    p = A.build_algorithm('fedavg', F.from_model_spec(SPEC), max_examples=12, batch_size=5,
                          client_learning_rate=0.1, server_momentum=0.5)
    st = p.initialize(seed=0)
    for _ in range(2):
        s, m_old = old.next(s, old.pad(ARRAYS))
        st, m_new = p.next(st, p.pad(ARRAYS))
    assert all(np.array_equal(a, b) for a, b in zip(s['weights'], st['weights']))
    assert m_old['loss'] == m_new['loss'] and m_old['accuracy'] == m_new['accuracy']


def test_keras_forward_matches_the_keras_model():
    km = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4), keras.layers.Dense(3)])
    fm = F.from_keras_model(km, 'sparse_categorical_crossentropy',
                            {'x': tf.TensorSpec([None, 5]), 'y': tf.TensorSpec([None], tf.int32)})
    x = ARRAYS[0]['x']
    w = fm.initial_weights(0)
    pred, _ = fm.predict([tf.constant(v) for v in w], tf.constant(x), False)
    np.testing.assert_allclose(pred.numpy(), km(x).numpy(), rtol=1e-6)
    assert fm.num_trainable == 4 and fm.num_parameters == 5 * 4 + 4 + 4 * 3 + 3


def test_fedsgd_step_is_minus_lr_times_the_mean_gradient():
    fm = F.from_model_spec(SPEC)
    p = A.build_fed_sgd(fm, O.SGD(0.5), max_examples=12)
    state = p.initialize(seed=3)
    w0 = [tf.constant(v) for v in state['weights']]
    grads, total = None, 0.0
    for a in ARRAYS:  # example-weighted mean of per-client mean gradients
        with tf.GradientTape() as tape:
            tape.watch(w0)
            loss = M.loss(SPEC, w0, a['x'], a['y'])
        g = tape.gradient(loss, w0)
        n = len(a['y'])
        grads = [n * v for v in g] if grads is None else [u + n * v for u, v in zip(grads, g)]
        total += n
    expected = [w - 0.5 * g / total for w, g in zip(w0, grads)]
    new, _ = p.next(state, p.pad(ARRAYS))
    for a, b in zip(new['weights'], expected):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-6)


def test_optimizers_match_keras_where_keras_has_them():
    w = [np.array([1.0, -2.0, 3.0], np.float32)]
    grads = [[np.array([0.5, -1.0, 2.0], np.float32)], [np.array([-0.1, 0.3, 1.0], np.float32)]]
    for mine, theirs in ((O.Adam(0.1), keras.optimizers.Adam(0.1, epsilon=1e-7)),
                         (O.SGD(0.1, 0.9), keras.optimizers.SGD(0.1, momentum=0.9)),
                         (O.Adagrad(0.1, 0.1, 1e-7),
                          keras.optimizers.Adagrad(0.1, initial_accumulator_value=0.1,
                                                   epsilon=1e-7))):
        state = [tf.constant(s) for s in mine.initialize([(3,)])]
        weights = [tf.constant(w[0])]
        var = keras.Variable(w[0])
        for g in grads:
            state, weights = mine.next(state, weights, [tf.constant(g[0])])
            theirs.apply_gradients([(tf.constant(g[0]), var)])
        np.testing.assert_allclose(weights[0].numpy(), var.numpy(), rtol=2e-5, atol=1e-6,
                                   err_msg=type(mine).__name__)


def test_dp_epsilon_grows_with_rounds_and_falls_with_noise():
    e10 = G.dp_epsilon(1.0, 10, 1000, 10, 1e-5)
    e100 = G.dp_epsilon(1.0, 10, 1000, 100, 1e-5)
    assert 0 < e10 < e100
    assert G.dp_epsilon(2.0, 10, 1000, 100, 1e-5) < e100
    assert G.dp_epsilon(0.0, 10, 1000, 10, 1e-5) == math.inf


def test_secure_sum_mean_is_within_one_quantization_step():
    fm = F.from_model_spec(SPEC)
    plain = A.build_algorithm('fedavg', fm, max_examples=12, batch_size=5,
                              aggregator=G.unweighted_mean())
    secure = A.build_algorithm('fedavg', fm, max_examples=12, batch_size=5,
                               aggregator=G.secure_sum(12, 1.0))
    s0 = plain.initialize()
    a, _ = plain.next(s0, plain.pad(ARRAYS))
    b, _ = secure.next(secure.initialize(), secure.pad(ARRAYS))
    step = 2.0 / (2 ** 12 - 1)
    for x, y in zip(a['weights'], b['weights']):
        assert np.max(np.abs(x - y)) <= step + 1e-6


@pytest.mark.parametrize('kwargs, fragment', [
    ({'noise_multiplier': 1.0, 'clip': 1.0, 'clients_per_round': 5}, 'weighted = false'),
    ({'weighted': False, 'noise_multiplier': 1.0, 'clients_per_round': 5}, 'clip norm'),
    ({'secure': True, 'weighted': False}, 'quantize_bits'),
    ({'quantize_bits': 40, 'clip': 1.0}, 'quantize_bits'),
    ({'adaptive': True}, 'initial clip norm'),
])
def test_aggregator_errors_name_the_key(kwargs, fragment):
    with pytest.raises(ConfigError, match=fragment):
        G.Aggregator(**kwargs)


def test_bad_inputs_are_clear_errors():
    with pytest.raises(SimharnessTypeError, match='keras.Model'):
        F.from_keras_model('nope', 'mse', (tf.TensorSpec([None, 5]), tf.TensorSpec([None])))
    km = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])
    with pytest.raises(SimharnessValueError, match='every non-batch dimension'):
        F.from_keras_model(km, 'mse', (tf.TensorSpec([None, None]), tf.TensorSpec([None])))
    with pytest.raises(ConfigError, match="unknown algorithm 'fedfoo'"):
        A.build_algorithm('fedfoo', KERAS, max_examples=4)
    with pytest.raises(ConfigError, match='proximal_strength'):
        A.build_fed_prox(KERAS, 0.0, max_examples=4)
    with pytest.raises(ConfigError, match="unknown optimizer 'rmsprop'"):
        O.build('rmsprop', 0.1)
    with pytest.raises(ConfigError, match='beta_1'):
        O.Adam(0.1, beta_1=1.5)


def test_yogi_follows_its_update_rule():
    opt = O.Yogi(0.1, beta_1=0.9, beta_2=0.99, epsilon=1e-3, initial_accumulator=1e-6)
    w = np.array([1.0, -2.0], np.float32)
    m, v = np.zeros(2), np.full(2, 1e-6)
    state, weights = [tf.constant(s) for s in opt.initialize([(2,)])], [tf.constant(w)]
    x = w.astype(np.float64)
    for t, g in enumerate([np.array([0.5, -1.0]), np.array([2.0, 0.1])], start=1):
        state, weights = opt.next(state, weights, [tf.constant(g, tf.float32)])
        m = 0.9 * m + 0.1 * g
        v = v - 0.01 * np.sign(v - g * g) * g * g
        lr = 0.1 * np.sqrt(1 - 0.99 ** t) / (1 - 0.9 ** t)
        x = x - lr * m / (np.sqrt(v) + 1e-3)
    np.testing.assert_allclose(weights[0].numpy(), x, rtol=1e-5)


def test_adaptive_clip_norm_moves_geometrically_towards_the_target_quantile():
    fm = F.from_model_spec(SPEC)
    p = A.build_algorithm('fedavg', fm, max_examples=12, batch_size=5,
                          aggregator=G.clipping(0.05, adaptive=True, target_quantile=0.5,
                                                learning_rate=0.2))
    state = p.initialize()
    new, m = p.next(state, p.pad(ARRAYS))
    frac = m['unclipped_fraction']
    assert m['clip_norm'] == pytest.approx(0.05)
    assert float(new['aggregator'][0]) == pytest.approx(0.05 * math.exp(-0.2 * (frac - 0.5)),
                                                        rel=1e-6)


def test_sequence_padding_counts_in_neither_loss_nor_accuracy():
    from simharness.learning.keras_examples import next_token
    keras.utils.set_random_seed(0)
    km = next_token((4,), 6)
    spec = (tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None, 4], tf.int32))
    masked = F.from_keras_model(km, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                                spec, metrics=['accuracy'], ignore_label=0)
    x = np.array([[5, 1, 2, 0], [3, 4, 0, 0]], np.float32)
    y = np.array([[1, 2, 3, 0], [4, 5, 0, 0]], np.int32)
    out = masked.evaluate(masked.initial_weights(0), x, y)
    logits = km(x).numpy().astype(np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(logp, y[..., None], -1)[..., 0]
    real = y != 0
    expected = np.mean([nll[i][real[i]].mean() for i in range(2)])
    assert out['loss'] == pytest.approx(expected, rel=1e-5)
    hits = (logits.argmax(-1) == y) & real
    assert out['accuracy'] == pytest.approx(hits.sum() / real.sum())
    p = A.build_algorithm('fedavg', masked, max_examples=2, batch_size=2)
    fed = p.evaluate(masked.initial_weights(0), p.pad([{'x': x, 'y': y}]))
    assert fed['loss'] == pytest.approx(expected, rel=1e-5)
    assert fed['accuracy'] == pytest.approx(out['accuracy'])
