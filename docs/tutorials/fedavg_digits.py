"""Tutorial 1: FedAvg on scikit-learn's digits with the Python API.

A Keras model, TFF's FedAvg builder (`build_weighted_fed_avg`), 20 non-IID
clients (Dirichlet label skew), 10 of them per round, on 2 worker processes.
Run it: `python docs/tutorials/fedavg_digits.py` (12-22 s on a shared 2-core
machine; nothing is downloaded: scikit-learn's digits ship with simharness).
"""
import collections

import numpy as np

# simharness above TensorFlow and Keras: it keeps TF's start-up lines quiet.
import simharness as tff
from simharness.data import load_digits_federated, sample_cohort

import keras
import tensorflow as tf

ROUNDS = 5
# One TF thread per op, as in the workers, before any TF op:
# bit-identical results on every stack.
tf.config.threading.set_intra_op_parallelism_threads(1)

# 20 clients, label skew Dirichlet(0.5); 20 % of the digits held out.
clients, (test_x, test_y) = load_digits_federated(
    num_clients=20, partition='dirichlet', alpha=0.5)


def model_fn():
    return tff.learning.models.functional_model_from_keras(
        keras.Sequential([keras.Input((64,)),
                          keras.layers.Dense(64, activation='relu'),
                          keras.layers.Dense(10)]),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=(tf.TensorSpec([None, 64]), tf.TensorSpec([None], tf.int32)),
        metrics_constructor=collections.OrderedDict(
            accuracy=lambda: keras.metrics.SparseCategoricalAccuracy(
                name='accuracy')))


model = model_fn()
process = tff.learning.algorithms.build_weighted_fed_avg(
    model, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1))


def dataset(client_id):
    a = clients.client_arrays(client_id)
    return tf.data.Dataset.from_tensor_slices((a['x'], a['y'])).batch(10)


# The same program runs on the default thread stack; here on 2 worker processes.
with tff.framework.process_executor_factory(num_workers=2) as factory:
    with tff.execution_context(factory):
        state = process.initialize()
        for round_num in range(ROUNDS):
            cohort = sample_cohort(clients.client_ids, 10, round_num, seed=0)
            state, metrics = process.next(state, [dataset(c) for c in cohort])
            train = metrics['client_work']['train']
            print(f"round {round_num}: train accuracy {train['accuracy']:.4f}")

# Central evaluation of the final weights on the held-out digits.
weights = process.get_model_weights(state)
logits = model.predict_on_batch(
    (tuple(weights.trainable), tuple(weights.non_trainable)),
    tf.constant(test_x), training=False)
test_accuracy = float(np.mean(np.argmax(logits, axis=-1) == test_y))
print(f'test accuracy after {ROUNDS} rounds: {test_accuracy:.4f}')
assert test_accuracy > 0.5, test_accuracy
