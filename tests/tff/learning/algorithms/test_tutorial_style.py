"""A TFF 0.88 tutorial program, renamed (ours: "Federated Learning for Image Classification").

Synthetic 28x28 "digits" in a ``tff.simulation.datasets.TestClientData`` in place
of EMNIST; otherwise the tutorial's steps as written: ``preprocess`` (repeat,
batch, map to ``OrderedDict(x=flattened, y=label)``), a Keras model through
``tff.learning.models.from_keras_model(keras_model, input_spec=..., loss=...,
metrics=[...])``, ``build_weighted_fed_avg`` with ``build_sgdm`` client and
server optimizers, ``process.next(state, federated_train_data)`` and the
metrics at ``metrics['client_work']['train']``, then ``build_fed_eval`` with
``set_model_weights``. The loss goes down and evaluation agrees with training.
"""

import collections

import numpy as np
import tensorflow as tf

import simharness as tff

NUM_CLIENTS = 3
NUM_EPOCHS = 2
BATCH_SIZE = 5


def _client_data():
    rng = np.random.default_rng(0)
    clients = collections.OrderedDict()
    for k in range(NUM_CLIENTS):
        labels = rng.integers(0, 10, size=12).astype(np.int32)
        pixels = (rng.random((12, 28, 28)) * 0.1 + labels[:, None, None] / 10.0).astype(np.float32)
        clients[f'client_{k}'] = collections.OrderedDict(pixels=pixels, label=labels)
    return tff.simulation.datasets.TestClientData(clients)


def preprocess(dataset):
    def batch_format_fn(element):
        return collections.OrderedDict(
            x=tf.reshape(element['pixels'], [-1, 784]), y=tf.reshape(element['label'], [-1, 1])
        )

    return dataset.repeat(NUM_EPOCHS).batch(BATCH_SIZE).map(batch_format_fn)


def test_image_classification_tutorial(tff_stack):
    emnist_train = _client_data()
    example_dataset = emnist_train.create_tf_dataset_for_client(emnist_train.client_ids[0])
    preprocessed_example_dataset = preprocess(example_dataset)
    federated_train_data = [
        preprocess(emnist_train.create_tf_dataset_for_client(x)) for x in emnist_train.client_ids
    ]

    def create_keras_model():
        return tf.keras.models.Sequential(
            [
                tf.keras.layers.InputLayer(input_shape=(784,)),
                tf.keras.layers.Dense(10, kernel_initializer='zeros'),
                tf.keras.layers.Softmax(),
            ]
        )

    def model_fn():
        keras_model = create_keras_model()
        return tff.learning.models.from_keras_model(
            keras_model,
            input_spec=preprocessed_example_dataset.element_spec,
            loss=tf.keras.losses.SparseCategoricalCrossentropy(),
            metrics=[tf.keras.metrics.SparseCategoricalAccuracy()],
        )

    training_process = tff.learning.algorithms.build_weighted_fed_avg(
        model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.02),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=1.0),
    )
    train_state = training_process.initialize()
    losses = []
    for _ in range(3):
        result = training_process.next(train_state, federated_train_data)
        train_state = result.state
        train_metrics = result.metrics['client_work']['train']
        assert set(train_metrics) >= {'sparse_categorical_accuracy', 'loss', 'num_examples'}
        assert train_metrics['num_examples'] == NUM_CLIENTS * 12 * NUM_EPOCHS
        losses.append(train_metrics['loss'])
    assert losses[-1] < losses[0]

    evaluation_process = tff.learning.algorithms.build_fed_eval(model_fn)
    evaluation_state = evaluation_process.initialize()
    model_weights = training_process.get_model_weights(train_state)
    evaluation_state = evaluation_process.set_model_weights(evaluation_state, model_weights)
    evaluation_output = evaluation_process.next(evaluation_state, federated_train_data)
    eval_metrics = evaluation_output.metrics['client_work']['eval']['current_round_metrics']
    assert eval_metrics['num_examples'] == NUM_CLIENTS * 12 * NUM_EPOCHS
    assert eval_metrics['loss'] < losses[0]
