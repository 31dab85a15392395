"""TFF's learning/models/functional_test.py, renamed (Keras 3).

Left out: test_predict_on_batch_keras_outside_graph_fails (ours runs eagerly too: Keras 3's
``stateless_call`` needs no graph), the KerasModelFromFunctionalWeightsTest cases
(``keras_model_from_functional_weights`` is not ported), and the Keras-2 SGD of the
convergence cases (our `build_sgdm` takes the steps).
"""

import collections

import keras
import numpy as np
import pytest
import tensorflow as tf

import simharness as tff

F = tff.learning.models


def initial_weights():
    return ((np.asarray([[0.0, 0.0, 0.0]], np.float32), np.asarray([0.0], np.float32)), ())


@tf.function
def predict_on_batch(model_weights, x, training):
    w, b = model_weights[0]
    # Only add the bias when training, so that the two modes differ.
    if training:
        return tf.matmul(x, w, transpose_b=True) + b
    return tf.matmul(x, w, transpose_b=True)


def loss(output, label, sample_weight=None):
    del sample_weight
    return tf.math.reduce_mean(tf.math.pow(output - label, 2.0))


@tf.function
def predict_on_batch_with_structure(model_weights, x, training):
    w, b = model_weights[0]
    if training:
        return (tf.matmul(x, w, transpose_b=True) + b, x)
    return (tf.matmul(x, w, transpose_b=True), x)


def loss_with_structure(output, label, sample_weight=None):
    del sample_weight
    return tf.math.reduce_mean(tf.math.pow(output[0] - label, 2.0))


def initialize_metrics():
    return collections.OrderedDict(num_examples=(0.0,), accuracy=(0.0, 0.0))


def update_metrics_state(state, labels, batch_output, sample_weight=None):
    del sample_weight
    batch_size = tf.cast(tf.shape(labels)[0], tf.float32)
    accuracy, count = state['accuracy']
    matches = tf.reduce_sum(tf.cast(tf.equal(labels, batch_output.predictions), tf.float32))
    return collections.OrderedDict(
        num_examples=(state['num_examples'][0] + batch_size,),
        accuracy=(accuracy + matches, count + batch_size),
    )


def finalize_metrics(state):
    accuracy, count = state['accuracy']
    return collections.OrderedDict(
        num_examples=state['num_examples'][0], accuracy=tf.math.divide_no_nan(accuracy, count)
    )


def create_test_dataset():
    def generate_example(i, t):
        del t
        features = tf.random.stateless_uniform(shape=[3], seed=(0, i))
        label = tf.expand_dims(tf.reduce_sum(features * tf.constant([1.0, 2.0, 3.0])), -1) + 5.0
        return features, label

    return tf.data.Dataset.range(25).enumerate().map(generate_example).batch(5, drop_remainder=True)


def _model(predict=predict_on_batch, loss_fn=loss, **kwargs):
    return F.FunctionalModel(
        initial_weights=initial_weights(),
        predict_on_batch_fn=predict,
        loss_fn=loss_fn,
        input_spec=create_test_dataset().element_spec,
        **kwargs,
    )


def test_fail_construction_on_tf_value():
    with pytest.raises(TypeError, match='initial_weights may not contain TensorFlow values'):
        F.FunctionalModel(
            initial_weights=((tf.constant(1.0),), ()),
            predict_on_batch_fn=predict_on_batch,
            loss_fn=loss,
            input_spec=None,
        )
    with pytest.raises(TypeError, match='initial_weights may not contain TensorFlow values'):
        F.FunctionalModel(
            initial_weights=((tf.Variable(1.0),), ()),
            predict_on_batch_fn=predict_on_batch,
            loss_fn=loss,
            input_spec=None,
        )


def test_fail_non_tf_function():
    with pytest.raises(TypeError, match='get_concrete_function'):
        F.FunctionalModel(
            initial_weights=initial_weights(),
            predict_on_batch_fn=lambda w, x, t: x,
            loss_fn=loss,
            input_spec=None,
        )


def test_predict_on_batch():
    model = _model()
    x = next(iter(create_test_dataset()))[0]
    np.testing.assert_allclose(model.predict_on_batch(model.initial_weights, x), [[0.0]] * 5)


@pytest.mark.parametrize(
    'predict, loss_fn',
    [(predict_on_batch, loss), (predict_on_batch_with_structure, loss_with_structure)],
    ids=['tensor', 'structure'],
)
def test_loss(predict, loss_fn):
    model = _model(predict, loss_fn)
    x, y = next(iter(create_test_dataset()))
    output = model.predict_on_batch(model.initial_weights, x)
    np.testing.assert_allclose(model.loss(output, y), 74.250, rtol=1e-3, atol=1e-3)


def test_metrics_eager():
    model = _model(metrics_fns=(initialize_metrics, update_metrics_state, finalize_metrics))
    state = model.initialize_metrics_state()
    labels = tf.constant([[1.0], [0.0], [1.0]])
    out = F.BatchOutput(predictions=tf.constant([[1.0], [1.0], [1.0]]))
    state = model.update_metrics_state(state, labels, out)
    state = model.update_metrics_state(state, labels, out)
    final = model.finalize_metrics(state)
    assert float(final['num_examples']) == 6.0
    np.testing.assert_allclose(final['accuracy'], 4 / 6)


def test_functional_model_converges():
    model = _model()
    optimizer = tff.learning.optimizers.build_sgdm(0.05)
    trainable = tuple(tf.constant(w) for w in model.initial_weights[0])
    state = optimizer.initialize(
        tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), trainable)
    )
    for x, y in create_test_dataset().repeat(50):
        with tf.GradientTape() as tape:
            tape.watch(trainable)
            batch_loss = model.loss(model.predict_on_batch((trainable, ()), x, True), y)
        state, trainable = optimizer.next(state, trainable, tape.gradient(batch_loss, trainable))
    assert float(batch_loss) < 0.1
    np.testing.assert_allclose(trainable[0], [[1.0, 2.0, 3.0]], atol=0.5)
    np.testing.assert_allclose(trainable[1], [5.0], atol=0.5)


@pytest.mark.parametrize(
    'predict, loss_fn',
    [(predict_on_batch, loss), (predict_on_batch_with_structure, loss_with_structure)],
    ids=['tensor', 'structure'],
)
def test_tff_model_from_functional_same_result(predict, loss_fn):
    functional_model = _model(predict, loss_fn)
    variable_model = F.model_from_functional(functional_model)
    for training in (True, False):
        for x, y in create_test_dataset():
            expected = functional_model.predict_on_batch(
                functional_model.initial_weights, x, training
            )
            got = variable_model.forward_pass((x, y), training=training)
            tf.nest.map_structure(np.testing.assert_allclose, got.predictions, expected)
            np.testing.assert_allclose(got.loss, functional_model.loss(expected, y))


def test_tff_model_from_functional_fails_with_repeated_metric_names():
    with pytest.raises(ValueError, match='more than once'):
        F.model_from_functional(
            _model(),
            metric_constructors=[
                lambda: keras.metrics.MeanSquaredError(name='same'),
                lambda: keras.metrics.MeanAbsoluteError(name='same'),
            ],
        )


def test_tff_model_from_functional_binding_metrics_and_reset():
    model = F.model_from_functional(
        _model(),
        metric_constructors=[keras.metrics.MeanSquaredError, keras.metrics.MeanAbsoluteError],
    )
    for batch in create_test_dataset():
        model.forward_pass(batch)
    unfinalized = model.report_local_unfinalized_metrics()
    assert list(unfinalized) == ['loss', 'mean_squared_error', 'mean_absolute_error']
    finalizers = model.metric_finalizers()
    final = {k: float(finalizers[k](unfinalized[k])) for k in finalizers}
    np.testing.assert_allclose(final['loss'], final['mean_squared_error'], rtol=1e-5)
    assert float(unfinalized['loss'][1]) == 25.0
    model.reset_metrics()
    assert all(float(np.asarray(v)) == 0.0 for v in model.local_variables)


def _keras_model():
    return keras.Sequential(
        [
            keras.Input((3,)),
            keras.layers.Dense(1, kernel_initializer='zeros', bias_initializer='zeros'),
        ]
    )


def test_construct_from_keras():
    keras_model = _keras_model()
    keras_model.layers[-1].kernel.assign(np.ones([3, 1], np.float32))
    model = F.functional_model_from_keras(
        keras_model, keras.losses.MeanSquaredError(), create_test_dataset().element_spec
    )
    trainable, non_trainable = model.initial_weights
    np.testing.assert_array_equal(trainable[0], np.ones([3, 1]))
    assert non_trainable == ()
    x, y = next(iter(create_test_dataset()))
    np.testing.assert_allclose(
        model.predict_on_batch(model.initial_weights, x),
        tf.reduce_sum(x, axis=1, keepdims=True),
        rtol=1e-6,
    )
    assert float(model.loss(model.predict_on_batch(model.initial_weights, x), y)) > 0


def test_keras_model_with_non_none_sample_weights_fails():
    class WeightedLoss(keras.losses.MeanSquaredError):
        def __call__(self, y_true, y_pred, sample_weight=1.0):
            return super().__call__(y_true, y_pred, sample_weight)

    with pytest.raises(F.functional.KerasFunctionalModelError):
        F.functional_model_from_keras(
            _keras_model(), WeightedLoss(), create_test_dataset().element_spec
        )


def test_keras_model_with_batch_normalization_fails():
    keras_model = keras.Sequential(
        [keras.Input((3,)), keras.layers.BatchNormalization(), keras.layers.Dense(1)]
    )
    with pytest.raises(F.functional.KerasFunctionalModelError, match='batch normalization'):
        F.functional_model_from_keras(
            keras_model, keras.losses.MeanSquaredError(), create_test_dataset().element_spec
        )


def test_keras_model_with_non_trainable_variables():
    keras_model = _keras_model()
    keras_model.layers[-1].trainable = False
    model = F.functional_model_from_keras(
        keras_model, keras.losses.MeanSquaredError(), create_test_dataset().element_spec
    )
    trainable, non_trainable = model.initial_weights
    assert trainable == () and len(non_trainable) == 2


def test_construct_from_keras_converges_in_computations(tff_stack):
    """The Keras functional model, its metrics and sum_then_finalize inside computations."""
    model = F.functional_model_from_keras(
        _keras_model,
        keras.losses.MeanSquaredError(),
        create_test_dataset().element_spec,
        metrics_constructor=collections.OrderedDict(mae=keras.metrics.MeanAbsoluteError),
    )
    weights_type = tff.to_type(
        tf.nest.map_structure(lambda a: tf.TensorSpec(a.shape, a.dtype), model.initial_weights)
    )
    batch_type = tff.to_type(create_test_dataset().element_spec)
    state_type = tff.tf_computation(model.initialize_metrics_state).type_signature.result

    @tff.tf_computation(weights_type, batch_type)
    def step(weights, batch):
        x, y = batch
        trainable, non_trainable = weights
        with tf.GradientTape() as tape:
            tape.watch(trainable)
            batch_loss = model.loss(model.predict_on_batch((trainable, non_trainable), x), y)
        grads = tape.gradient(batch_loss, trainable)
        new = tuple(w - 0.05 * g for w, g in zip(trainable, grads))
        metrics = model.update_metrics_state(
            model.initialize_metrics_state(),
            y,
            F.BatchOutput(predictions=model.predict_on_batch((new, non_trainable), x)),
        )
        return (new, non_trainable), metrics

    aggregate = tff.learning.metrics.sum_then_finalize(model.finalize_metrics)

    @tff.federated_computation(tff.type_at_clients(state_type))
    def finalize(states):
        return aggregate(states)

    weights = model.initial_weights
    losses = []
    for x, y in list(create_test_dataset()) * 8:
        weights, metrics = step(weights, (x.numpy(), y.numpy()))
        losses.append(float(finalize([metrics, metrics])['mae']))
    assert losses[-1] < 0.5 * losses[0]


def test_building_your_own_federated_learning_algorithm_tutorial(tff_stack):
    """TFF's tutorial of that name, renamed, on synthetic data (10 features, 3 classes):
    functional_model_from_keras, build_sgdm in a tf.function client update, ModelWeights."""
    rng = np.random.default_rng(0)
    xs = rng.normal(size=(4, 12, 10)).astype(np.float32)
    ys = (np.argmax(xs[..., :3], axis=-1)[..., None]).astype(np.int32)
    federated_train_data = [
        tf.data.Dataset.from_tensor_slices((x, y)).batch(4) for x, y in zip(xs, ys)
    ]

    def create_keras_model():
        initializer = tf.keras.initializers.GlorotNormal(seed=0)
        return tf.keras.models.Sequential(
            [
                tf.keras.layers.Input(shape=(10,)),
                tf.keras.layers.Dense(3, kernel_initializer=initializer),
                tf.keras.layers.Softmax(),
            ]
        )

    tff_model = tff.learning.models.functional_model_from_keras(
        create_keras_model(),
        loss_fn=tf.keras.losses.SparseCategoricalCrossentropy(),
        input_spec=federated_train_data[0].element_spec,
        metrics_constructor=collections.OrderedDict(
            accuracy=tf.keras.metrics.SparseCategoricalAccuracy
        ),
    )

    @tf.function
    def client_update(model, dataset, initial_weights, client_optimizer):
        client_weights = initial_weights.trainable
        optimizer_state = client_optimizer.initialize(
            tf.nest.map_structure(tf.TensorSpec.from_tensor, client_weights)
        )
        for batch in dataset:
            x, y = batch
            with tf.GradientTape() as tape:
                tape.watch(client_weights)
                outputs = model.predict_on_batch(
                    model_weights=(client_weights, ()), x=x, training=True
                )
                loss = model.loss(output=outputs, label=y)
            grads = tape.gradient(loss, client_weights)
            optimizer_state, client_weights = client_optimizer.next(
                optimizer_state, weights=client_weights, gradients=grads
            )
        return tff.learning.models.ModelWeights(client_weights, non_trainable=())

    @tff.tf_computation
    def server_init():
        return tff.learning.models.ModelWeights(*tff_model.initial_weights)

    @tff.federated_computation
    def initialize_fn():
        return tff.federated_eval(server_init, tff.SERVER)

    tf_dataset_type = tff.SequenceType(tff.to_type(tff_model.input_spec))
    model_weights_type = server_init.type_signature.result

    @tff.tf_computation(tf_dataset_type, model_weights_type)
    def client_update_fn(tf_dataset, server_weights):
        client_optimizer = tff.learning.optimizers.build_sgdm(learning_rate=0.5)
        return client_update(tff_model, tf_dataset, server_weights, client_optimizer)

    @tff.tf_computation(model_weights_type)
    def server_update_fn(mean_client_weights):
        return mean_client_weights

    @tff.federated_computation(
        tff.type_at_server(model_weights_type), tff.type_at_clients(tf_dataset_type)
    )
    def next_fn(server_weights, federated_dataset):
        at_clients = tff.federated_broadcast(server_weights)
        client_weights = tff.federated_map(client_update_fn, (federated_dataset, at_clients))
        return tff.federated_map(server_update_fn, tff.federated_mean(client_weights))

    process = tff.templates.IterativeProcess(initialize_fn=initialize_fn, next_fn=next_fn)

    def evaluate(model_weights):
        keras_model = create_keras_model()
        model_weights.assign_weights_to(keras_model)
        probs = keras_model(xs.reshape(-1, 10)).numpy()
        return float(np.mean(-np.log(probs[np.arange(len(probs)), ys.reshape(-1)])))

    state = process.initialize()
    before = evaluate(state)
    for _ in range(5):
        state = process.next(state, federated_train_data)
    assert isinstance(state, tff.learning.models.ModelWeights)
    assert evaluate(state) < before
