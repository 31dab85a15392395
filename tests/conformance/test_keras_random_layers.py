"""Keras 3's random layers (``Dropout``, an RNN's dropout) in ``tff.learning``: their seed states
are not model weights (TFF's Keras 2 models have none), and each training step draws its masks
from its inputs and weights (`simharness.learning.models.keras_seeds`): fresh per step, client and
round, the same bits on every stack.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.learning.models import keras_seeds

WIDTH = 16
SPEC = (tf.TensorSpec([None, WIDTH], tf.float32), tf.TensorSpec([None], tf.int32))


def _keras_model(seed=1, batch_norm=True):
    layers = [
        tf.keras.layers.Input((WIDTH,)),
        tf.keras.layers.Dense(WIDTH, kernel_initializer=tf.keras.initializers.GlorotUniform(2)),
        tf.keras.layers.Dropout(0.5, seed=seed),
    ]
    if batch_norm:
        layers.append(tf.keras.layers.BatchNormalization())
    layers.append(
        tf.keras.layers.Dense(3, kernel_initializer=tf.keras.initializers.GlorotUniform(3))
    )
    return tf.keras.Sequential(layers)


def _model_fn(batch_norm=True):
    return lambda: tff.learning.models.from_keras_model(
        _keras_model(batch_norm=batch_norm),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=SPEC,
    )


def _process(batch_norm=True):
    return tff.learning.algorithms.build_weighted_fed_avg(
        _model_fn(batch_norm),
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
    )


def _datasets(n=4, rows=12):
    rng = np.random.default_rng(5)
    return [
        tf.data.Dataset.from_tensor_slices(
            (
                rng.normal(size=(rows, WIDTH)).astype(np.float32),
                rng.integers(0, 3, rows).astype(np.int32),
            )
        ).batch(4)
        for _ in range(n)
    ]


def test_the_state_holds_tff_s_weights_not_the_seed_states():
    process = _process()
    weights_type = process.next.type_signature.parameter[0].member.global_model_weights
    # BatchNormalization's moving mean and variance; no int64[2] seed state (TFF's structure)
    assert str(weights_type.non_trainable) == '<float32[16],float32[16]>'
    state = process.initialize()
    assert len(state.global_model_weights.non_trainable) == 2
    keras_model = _keras_model()
    assert len(keras_model.non_trainable_variables) == 3  # the seed state is Keras' variable
    weights = tff.learning.models.ModelWeights.from_model(keras_model)
    assert [np.asarray(v).dtype for v in weights.non_trainable] == [np.float32, np.float32]
    # the state's weights go back into a Keras model (TFF's tutorials' `assign_weights_to`)
    trained = process.get_model_weights(process.next(state, _datasets())[0])
    trained.assign_weights_to(keras_model)
    for var, value in zip(keras_model.non_trainable_weights, trained.non_trainable):
        np.testing.assert_array_equal(var.numpy(), value)


def _probe_model():
    """Dense(ones) over Dropout(0.5) of x = 2**i: the output spells out the kept units."""
    return tf.keras.Sequential(
        [
            tf.keras.layers.Input((WIDTH,)),
            tf.keras.layers.Dropout(0.5, seed=11),
            tf.keras.layers.Dense(1, use_bias=False, kernel_initializer='ones'),
        ]
    )


PROBE_SPEC = (tf.TensorSpec([None, WIDTH]), tf.TensorSpec([None, 1]))


def _kept_units(model, inputs, scale=1.0):
    """The bit mask of the units a training step keeps (Dropout(0.5) scales them by 2)."""
    kernel = tf.constant(np.full([WIDTH, 1], scale, np.float32))
    out, _, _ = model.stateless_forward_pass(
        [kernel], [], model.stateless_metrics_state(), (inputs, tf.zeros([1, 1]))
    )
    return int(round(float(out.predictions[0, 0]) / (2 * scale)))


def test_a_step_s_mask_follows_its_inputs_and_weights_only():
    model = tff.learning.models.from_keras_model(
        _probe_model(),
        loss=tf.keras.losses.MeanSquaredError(),
        input_spec=PROBE_SPEC,
    )
    x = tf.constant([[2.0**i for i in range(WIDTH)]])
    masks = {
        'first': _kept_units(model, x),
        'again': _kept_units(model, x),
        'other weights': _kept_units(model, x, 1.5),
        'other inputs': _kept_units(model, x * 4.0) // 4,
    }
    assert masks['first'] == masks['again']
    assert masks['first'] != masks['other weights']
    assert masks['first'] != masks['other inputs']
    assert 0 < bin(masks['first']).count('1') < WIDTH
    # the variable path (TFF's: the model's variables) draws the same mask
    model.trainable_variables[0].assign(np.ones([WIDTH, 1], np.float32))
    out = model.predict_on_batch(x, training=True)
    assert int(round(float(out[0, 0]) / 2)) == masks['first']
    # in evaluation nothing is dropped
    assert float(model.predict_on_batch(x, training=False)[0, 0]) == 2.0**WIDTH - 1


def test_the_hash_is_exact_in_the_graph_runtime_and_under_xla():
    rng = np.random.default_rng(0)
    weights = [tf.constant(rng.normal(size=(300, 7)).astype(np.float32))]
    inputs = (tf.constant(rng.normal(size=(5, 4))), tf.constant(['a', 'bc']))
    eager = keras_seeds.step_hash(weights, inputs[:1])
    graph = tf.function(lambda w, x: keras_seeds.step_hash(w, x))(weights, inputs[:1])
    xla = tf.function(lambda w, x: keras_seeds.step_hash(w, x), jit_compile=True)(
        weights, inputs[:1]
    )
    assert int(eager) == int(graph) == int(xla)
    assert 0 <= int(eager) < 2**31 - 1
    assert int(keras_seeds.step_hash(weights, inputs)) != int(eager)  # strings count too


def test_the_functional_model_has_no_seed_weight_and_fresh_masks():
    model = tff.learning.models.functional_model_from_keras(
        _probe_model(),
        loss_fn=tf.keras.losses.MeanSquaredError(),
        input_spec=PROBE_SPEC,
    )
    trainable, non_trainable = model.initial_weights
    assert non_trainable == ()
    x = tf.constant([[2.0**i for i in range(WIDTH)]])
    a = model.predict_on_batch(model.initial_weights, x, training=True)
    b = model.predict_on_batch((tuple(t * 1.5 for t in trainable), ()), x, training=True)
    assert float(a[0, 0]) != float(b[0, 0]) / 1.5
    assert float(model.predict_on_batch(model.initial_weights, x, False)[0, 0]) == 2.0**WIDTH - 1


def test_keras_global_seed_makes_runs_repeat_and_unseeded_layers_differ():
    def initial_states():
        model = tf.keras.Sequential([tf.keras.layers.Dropout(0.5), tf.keras.layers.Dropout(0.5)])
        return [v.numpy().tolist() for v in keras_seeds.KerasSeeds(model).states]

    tf.keras.utils.set_random_seed(3)
    first = initial_states()
    tf.keras.utils.set_random_seed(3)
    assert initial_states() == first
    assert initial_states() != first


_WANT: dict = {}


def _two_rounds(process):
    state = process.initialize()
    out = []
    for _ in range(2):
        state, metrics = process.next(state, _datasets())
        out += [np.asarray(v) for v in tf.nest.flatten(process.get_model_weights(state))]
        out.append(np.asarray(metrics['client_work']['train']['loss']))
    return out


@pytest.mark.parametrize('stack_name', ['local', 'process-2-cpw3'])
def test_a_dropout_model_gives_the_same_bits_on_every_layout(stack_name, stack_registry):
    process = _process()
    with stack_registry.open(stack_name):
        got = _two_rounds(process)
    if 'want' not in _WANT:
        factory = stack_registry.make_factory('thread-1')
        try:
            with tff.execution_context(factory):
                _WANT['want'] = _two_rounds(process)
        finally:
            factory.close()
    assert [a.tobytes() for a in got] == [b.tobytes() for b in _WANT['want']]
    assert all(np.all(np.isfinite(a)) for a in got)


def test_a_reconstruction_model_leaves_the_seed_states_out_and_draws_fresh_masks():
    keras_model = _probe_model()
    dropout, dense = keras_model.layers
    ReconstructionModel = tff.learning.models.ReconstructionModel
    # TFF's users list each layer's variables: Keras 3's hold the seed state, left out
    model = ReconstructionModel.from_keras_model_and_variables(
        keras_model,
        global_trainable_variables=dense.trainable_variables,
        global_non_trainable_variables=dropout.non_trainable_variables,
        local_trainable_variables=[],
        local_non_trainable_variables=[],
        input_spec=PROBE_SPEC,
    )
    assert model.global_non_trainable_variables == []
    layers_model = ReconstructionModel.from_keras_model_and_layers(
        keras_model, global_layers=[dense, dropout], local_layers=[], input_spec=PROBE_SPEC
    )
    assert layers_model.global_non_trainable_variables == []
    x = tf.constant([[2.0**i for i in range(WIDTH)]])
    y = tf.zeros([1, 1])

    def kept(inputs):
        return int(round(float(model.forward_pass((inputs, y)).predictions[0, 0]) / 2))

    assert kept(x) == _kept_units(
        tff.learning.models.from_keras_model(
            _probe_model(), loss=tf.keras.losses.MeanSquaredError(), input_spec=PROBE_SPEC
        ),
        x,
    )
    assert kept(x * 4.0) // 4 != kept(x)
    assert float(model.forward_pass((x, y), training=False).predictions[0, 0]) == 2.0**WIDTH - 1


def test_a_saved_model_keeps_its_seed_states_out_of_its_weights(tmp_path):
    tff.learning.models.save(_model_fn()(), str(tmp_path))
    loaded = tff.learning.models.load(str(tmp_path))
    assert [v.shape.as_list() for v in loaded.non_trainable_variables] == [[WIDTH], [WIDTH]]
    x = tf.ones([3, WIDTH])
    batch = (x, tf.zeros([3], tf.int32))
    first = loaded.forward_pass(batch, training=True).loss
    assert float(loaded.forward_pass(batch, training=True).loss) == float(first)
    assert float(loaded.forward_pass((x * 2.0, batch[1]), training=True).loss) != float(first)
