"""TFF's learning/models/keras_utils_test.py, renamed (Keras 3 models and metrics).

Left out: the ``tf.keras`` (Keras 2) parameterizations; ``train_on_batch`` absence
(nothing to port); embeddings, multiple inputs/outputs, tupled-dict outputs and
preprocessing-layer cases (Keras-feature coverage, not TFF behaviour; the
multiple-loss arithmetic is covered by test_multiple_losses_are_weighted).
"""

import collections

import keras
import numpy as np
import pytest
import tensorflow as tf

import simharness as tff

from .model_examples import keras_linear_model


def _whimsy_types(feature_dims):
    return (tf.TensorSpec([None, feature_dims], tf.float32), tf.TensorSpec([None, 1], tf.float32))


def _test_batch(feature_dims):
    return collections.OrderedDict(
        x=np.stack([np.zeros(feature_dims, np.float32), np.ones(feature_dims, np.float32)]),
        y=np.array([[0.0], [1.0]], np.float32),
    )


def test_convert_fails_on_non_keras_model():
    with pytest.raises(TypeError, match=r'keras\..*Model'):
        tff.learning.models.from_keras_model(
            keras_model=0, input_spec=_whimsy_types(1), loss=keras.losses.MeanSquaredError()
        )


_TestBatch = collections.namedtuple('TestBatch', ['x', 'y'])


@pytest.mark.parametrize(
    'input_spec',
    [
        collections.OrderedDict(
            x=tf.TensorSpec([None, 1], tf.float32), y=tf.TensorSpec([None, 1], tf.float32)
        ),
        _TestBatch(x=tf.TensorSpec([1, 1], tf.float32), y=tf.TensorSpec([None, 1], tf.float32)),
        tff.StructType(
            [
                ('x', tff.TensorType(np.float32, [None, 1])),
                ('y', tff.TensorType(np.float32, [None, 1])),
            ],
            container=collections.OrderedDict,
        ),
    ],
    ids=['container', 'container_fn', 'tff_struct_with_python_type'],
)
def test_input_spec_python_container(input_spec):
    model = tff.learning.models.from_keras_model(
        keras_model=keras_linear_model(1),
        input_spec=input_spec,
        loss=keras.losses.MeanSquaredError(),
    )
    assert isinstance(model, tff.learning.models.VariableModel)
    for s in tf.nest.flatten(model.input_spec):
        assert isinstance(s, tf.TensorSpec)
    if isinstance(input_spec, tff.Type):
        assert isinstance(model.input_spec, collections.OrderedDict)


@pytest.mark.parametrize(
    'input_spec',
    [
        [tf.TensorSpec([None, 1], tf.float32)] * 3,
        collections.OrderedDict(
            foo=tf.TensorSpec([None, 1], tf.float32), y=tf.TensorSpec([None, 1], tf.float32)
        ),
        collections.OrderedDict(
            x=tf.TensorSpec([None, 1], tf.float32), bar=tf.TensorSpec([None, 1], tf.float32)
        ),
    ],
    ids=['more_than_two_elements', 'dict_with_key_not_named_x', 'dict_with_key_not_named_y'],
)
def test_input_spec_batch_types_value_errors(input_spec):
    with pytest.raises(ValueError):
        tff.learning.models.from_keras_model(
            keras_model=keras_linear_model(1),
            input_spec=input_spec,
            loss=keras.losses.MeanSquaredError(),
        )


@pytest.mark.parametrize(
    'input_spec, message',
    [
        (
            collections.OrderedDict(x=tf.constant(0.0), y=tf.TensorSpec([None, 1], tf.float32)),
            'Expected input spec member to be of type.*TensorSpec',
        ),
        (
            tff.StructType(
                [
                    ('x', tff.SequenceType(tff.TensorType(np.float32))),
                    ('y', tff.TensorType(np.float32, [None, 1])),
                ],
                container=collections.OrderedDict,
            ),
            'Expected a `federated_language.Type` with all the leaf nodes being '
            '`federated_language.TensorType`s',
        ),
    ],
    ids=['python_container_not_tensorspec', 'tff_type_not_tensortype'],
)
def test_input_spec_batch_types_type_errors(input_spec, message):
    with pytest.raises(TypeError, match=message):
        tff.learning.models.from_keras_model(
            keras_model=keras_linear_model(1),
            input_spec=input_spec,
            loss=keras.losses.MeanSquaredError(),
        )


@pytest.mark.parametrize('feature_dims', [1, 3])
def test_tff_model_from_keras_model(feature_dims):
    model = tff.learning.models.from_keras_model(
        keras_model=keras_linear_model(feature_dims),
        input_spec=_whimsy_types(feature_dims),
        loss=keras.losses.MeanSquaredError(),
        metrics=[keras.metrics.MeanAbsoluteError()],
    )
    assert [float(np.asarray(v)) for v in model.local_variables] == [0.0] * 4 + [0, 0]
    output = model.forward_pass(_test_batch(feature_dims))
    np.testing.assert_array_equal(output.predictions, [[0.0], [0.0]])
    assert float(output.loss) == 0.5  # residuals 0 and 1, mean squared error 0.5
    metrics = model.report_local_unfinalized_metrics()
    assert list(metrics) == ['mean_absolute_error', 'loss', 'num_examples', 'num_batches']
    assert [int(v) for v in metrics['num_batches']] == [1]
    assert [int(v) for v in metrics['num_examples']] == [2]
    assert float(metrics['loss'][0]) > 0 and float(metrics['loss'][1]) == 2
    assert float(metrics['mean_absolute_error'][0]) > 0
    assert float(metrics['mean_absolute_error'][1]) == 2


def test_tff_model_from_keras_model_regularization():
    keras_model = keras.Sequential(
        [
            keras.Input((3,)),
            keras.layers.Dense(
                1,
                kernel_initializer='ones',
                bias_initializer='zeros',
                kernel_regularizer=keras.regularizers.L2(0.01),
            ),
        ]
    )
    model = tff.learning.models.from_keras_model(
        keras_model=keras_model, input_spec=_whimsy_types(3), loss=keras.losses.MeanSquaredError()
    )
    batch = collections.OrderedDict(
        x=np.zeros([2, 3], np.float32), y=np.array([[0.0], [1.0]], np.float32)
    )
    output = model.forward_pass(batch)
    # MSE 0.5 plus the regularization 0.01 * (1 + 1 + 1).
    np.testing.assert_allclose(float(output.loss), 0.53, rtol=1e-6)


def test_multiple_losses_are_weighted():
    x = keras.Input((2,))
    out1, out2 = (
        keras.layers.Dense(1, kernel_initializer='zeros')(x),
        keras.layers.Dense(1, kernel_initializer='zeros')(x),
    )
    keras_model = keras.Model(x, [out1, out2])
    model = tff.learning.models.from_keras_model(
        keras_model,
        loss=[keras.losses.MeanSquaredError(), keras.losses.MeanAbsoluteError()],
        loss_weights=[0.5, 2.0],
        input_spec=(tf.TensorSpec([None, 2]), (tf.TensorSpec([None, 1]), tf.TensorSpec([None, 1]))),
    )
    batch = (
        np.ones([2, 2], np.float32),
        (np.full([2, 1], 2.0, np.float32), np.full([2, 1], 3.0, np.float32)),
    )
    np.testing.assert_allclose(float(model.forward_pass(batch).loss), 0.5 * 4.0 + 2.0 * 3.0)
    with pytest.raises(ValueError, match='equal number of outputs'):
        tff.learning.models.from_keras_model(
            keras_model, loss=[keras.losses.MeanSquaredError()], input_spec=_whimsy_types(2)
        )
    with pytest.raises(ValueError, match='loss_weights'):
        tff.learning.models.from_keras_model(
            keras_model,
            loss=keras.losses.MeanSquaredError(),
            loss_weights=[1.0],
            input_spec=_whimsy_types(2),
        )


def test_keras_model_using_batch_norm_gets_warning():
    keras_model = keras.Sequential(
        [keras.Input((2,)), keras.layers.BatchNormalization(), keras.layers.Dense(1)]
    )
    with pytest.warns(UserWarning, match='Batch Normalization'):
        tff.learning.models.from_keras_model(
            keras_model, loss=keras.losses.MeanSquaredError(), input_spec=_whimsy_types(2)
        )


def _model_fn(feature_dims=3, metrics=None):
    return tff.learning.models.from_keras_model(
        keras_model=keras_linear_model(feature_dims),
        input_spec=_whimsy_types(feature_dims),
        loss=keras.losses.MeanSquaredError(),
        metrics=[keras.metrics.MeanAbsoluteError()] if metrics is None else metrics,
    )


def test_keras_model_aggregated_metrics(tff_stack):
    """Training inside a computation (model_fn traced there), metrics summed then finalized."""
    feature_dims, steps = 3, 3

    @tff.tf_computation()
    def train():
        model = _model_fn(feature_dims)
        optimizer = tff.learning.optimizers.build_sgdm(0.1)
        state = optimizer.initialize(
            [tf.TensorSpec(v.shape, v.dtype) for v in model.trainable_variables]
        )
        for _ in range(steps):
            with tf.GradientTape() as tape:
                output = model.forward_pass(
                    collections.OrderedDict(x=tf.ones([2, feature_dims]), y=tf.ones([2, 1]))
                )
            grads = tape.gradient(output.loss, model.trainable_variables)
            weights = [tf.convert_to_tensor(v) for v in model.trainable_variables]
            state, weights = optimizer.next(state, weights, grads)
            for v, w in zip(model.trainable_variables, weights):
                v.assign(w)
        return (
            model.report_local_unfinalized_metrics(),
            tff.learning.models.ModelWeights.from_model(model),
        )

    unfinalized_type = train.type_signature.result[0]
    aggregate = tff.learning.metrics.sum_then_finalize(_model_fn().metric_finalizers())

    @tff.federated_computation(tff.type_at_clients(unfinalized_type))
    def aggregate_metrics(unfinalized):
        return aggregate(unfinalized)

    metrics, weights = train()
    out = aggregate_metrics([metrics, metrics])
    assert int(out['num_batches']) == 2 * steps
    assert int(out['num_examples']) == 2 * 2 * steps
    assert float(out['loss']) > 0.0 and float(out['mean_absolute_error']) > 0.0
    weights.assign_weights_to(keras_linear_model(feature_dims))


def test_metric_finalizers_work_with_report_local_unfinalized_metrics():
    # Named: Keras 3 numbers a default name (false_negatives_1, ...) when the process made one before.
    model = _model_fn(
        metrics=[
            keras.metrics.MeanAbsoluteError(name='mean_absolute_error'),
            keras.metrics.FalseNegatives(name='false_negatives'),
        ]
    )
    model.forward_pass(_test_batch(3))
    unfinalized = model.report_local_unfinalized_metrics()
    finalizers = model.metric_finalizers()
    assert list(finalizers) == list(unfinalized)
    finalized = {k: float(finalizers[k](unfinalized[k])) for k in finalizers}
    assert finalized['num_examples'] == 2 and finalized['num_batches'] == 1
    assert finalized['mean_absolute_error'] == 0.5 and finalized['loss'] == 0.5
    assert finalized['false_negatives'] == 1.0
    with pytest.raises(ValueError, match='length'):
        finalizers['loss']([tf.constant(1.0)])


class _CustomMetricExtraArgs(keras.metrics.Sum):
    def __init__(self, arg1, name='custom', dtype='int64'):
        super().__init__(name=name, dtype=dtype)
        self._arg1 = arg1


class _CustomMetricNoExtraArgs(keras.metrics.Sum):
    def __init__(self, name='custom', dtype='int64'):
        super().__init__(name=name, dtype=dtype)


def test_custom_keras_metric_with_extra_init_args_raises():
    model = _model_fn(metrics=[_CustomMetricExtraArgs(arg1=1.0)])
    with pytest.raises(TypeError, match='extra arguments'):
        model.metric_finalizers()


def test_custom_keras_metric_no_extra_init_args_builds():
    model = _model_fn(metrics=[_CustomMetricNoExtraArgs()])
    assert 'custom' in model.metric_finalizers()


def test_keras_model_with_metric_constructors():
    model = _model_fn(metrics=[keras.metrics.MeanAbsoluteError])
    model.forward_pass(_test_batch(3))
    unfinalized = model.report_local_unfinalized_metrics()
    finalizers = model.metric_finalizers()
    assert list(finalizers) == ['mean_absolute_error', 'loss', 'num_examples', 'num_batches']
    assert float(finalizers['mean_absolute_error'](unfinalized['mean_absolute_error'])) == 0.5


def test_keras_model_without_input_metrics():
    model = _model_fn(metrics=[])
    assert list(model.report_local_unfinalized_metrics()) == ['loss', 'num_examples', 'num_batches']
    assert list(model.metric_finalizers()) == ['loss', 'num_examples', 'num_batches']


@pytest.mark.parametrize(
    'metrics, message',
    [
        ([keras.metrics.MeanAbsoluteError(), keras.metrics.MeanSquaredError], 'found both types'),
        ([lambda: 0], 'not a no-arg callable that creates'),
        ([0], 'non-callable'),
    ],
    ids=['mixed', 'bad_constructor', 'not_callable'],
)
def test_keras_model_provided_invalid_metrics_raises(metrics, message):
    with pytest.raises(TypeError, match=message):
        _model_fn(metrics=metrics)


@pytest.mark.parametrize(
    'metric', [tff.learning.metrics.NumExamplesCounter(), tff.learning.metrics.NumBatchesCounter()]
)
def test_custom_metrics_override_defaults(metric):
    model = _model_fn(metrics=[metric])
    names = [m.name for m in model.get_metrics()]
    assert names.count(metric.name) == 1


def test_tff_model_from_keras_model_resets_metrics():
    model = _model_fn()
    model.forward_pass(_test_batch(3))
    assert int(model.report_local_unfinalized_metrics()['num_examples'][0]) == 2
    model.reset_metrics()
    assert [float(np.asarray(v)) for v in model.local_variables] == [0.0] * 6


@pytest.mark.slow
def test_an_unbuilt_keras_3_model_is_built_from_the_input_spec():
    """Keras 3 builds ``Sequential([Embedding, GRU, Dense])`` at its first call (Keras 2,
    which TFF used, when it was made): from_keras_model builds it from `input_spec`, so
    that its weights are the model's trainable weights and FedAvg trains them."""
    spec = (tf.TensorSpec([None, 5], tf.int64), tf.TensorSpec([None, 5], tf.int64))

    def model_fn():
        km = tf.keras.Sequential(
            [
                tf.keras.layers.Embedding(12, 4),
                tf.keras.layers.GRU(6, return_sequences=True),
                tf.keras.layers.Dense(12),
            ]
        )
        assert not km.built
        return tff.learning.models.from_keras_model(
            km,
            input_spec=spec,
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )

    assert len(model_fn().trainable_variables) == 6
    process = tff.learning.algorithms.build_weighted_fed_avg(
        model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.5)
    )
    state = process.initialize()
    before = [np.asarray(w) for w in process.get_model_weights(state).trainable]
    data = [
        tf.data.Dataset.from_tensor_slices(
            (np.arange(20).reshape(4, 5) % 12, (np.arange(20).reshape(4, 5) + 1) % 12)
        ).batch(2)
    ]
    state = process.next(state, data).state
    after = [np.asarray(w) for w in process.get_model_weights(state).trainable]
    assert len(before) == 6 and any(not np.array_equal(a, b) for a, b in zip(before, after))


def test_a_model_that_cannot_be_built_from_the_spec_is_a_clear_error():
    class NeedsTwo(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = tf.keras.layers.Dense(2)

        def call(self, inputs):
            a, b = inputs  # two inputs; the spec gives one
            return self.dense(a) + self.dense(b)

    with pytest.raises(ValueError, match=r'no weights yet .* Give it an input shape'):
        tff.learning.models.from_keras_model(
            NeedsTwo(),
            input_spec=(tf.TensorSpec([None, 3]), tf.TensorSpec([None], tf.int32)),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )


def test_metrics_made_without_names_keep_tffs_names_in_every_build():
    # Keras 3 numbers default metric names across the process (a second build's AUC() is
    # `auc_1`); TFF's (Keras 2, a graph per build) are `auc`, `precision`, ... in every build,
    # and tff.learning matches one build's names against another's.
    spec = (tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None, 1], tf.float32))

    def model_fn():
        model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
        return tff.learning.models.from_keras_model(
            model,
            loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
            input_spec=spec,
            metrics=[
                tf.keras.metrics.AUC(from_logits=True),
                tf.keras.metrics.Precision(),
                tf.keras.metrics.AUC(curve='PR', from_logits=True),
                tf.keras.metrics.BinaryAccuracy(name='acc'),
            ],
        )

    names = ['auc', 'precision', 'auc_1', 'acc', 'loss', 'num_examples', 'num_batches']
    assert list(model_fn().report_local_unfinalized_metrics()) == names
    assert list(model_fn().metric_finalizers()) == names  # a later build: the same names
    process = tff.learning.algorithms.build_weighted_fed_avg(
        model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1)
    )
    data = tf.data.Dataset.from_tensor_slices(
        (np.ones((4, 4), np.float32), np.array([[0.0], [1.0], [1.0], [0.0]], np.float32))
    ).batch(2)
    out = process.next(process.initialize(), [data])
    assert list(out.metrics['client_work']['train']) == names
