import numpy as np
import simharness as tff        # was: import tensorflow_federated as tff
import tensorflow as tf

def model_fn():
    model = tf.keras.Sequential(
        [tf.keras.Input((8,)), tf.keras.layers.Dense(2)])
    spec = (tf.TensorSpec([None, 8]), tf.TensorSpec([None], tf.int32))
    return tff.learning.models.from_keras_model(
        model, input_spec=spec,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

rng = np.random.default_rng(0)
def client_data():
    x = rng.normal(size=(40, 8)).astype(np.float32)
    y = rng.integers(0, 2, 40).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(10)

clients = [client_data() for _ in range(10)]
process = tff.learning.algorithms.build_weighted_fed_avg(
    model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1))
state = process.initialize()
for round_num in range(5):
    result = process.next(state, clients)
    state = result.state
    print(round_num, result.metrics['client_work']['train']['loss'])
