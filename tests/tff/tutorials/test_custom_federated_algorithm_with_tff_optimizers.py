"""TFF ≤0.80's ``docs/tutorials/custom_federated_algorithm_with_tff_optimizers.ipynb``, renamed.

(The tutorial was in TFF up to about 0.80 and dropped before 0.87; taken at v0.80.0.)
EMNIST (a download) is replaced by `synthetic.emnist_like`; 2 clients of 12
examples and 3 rounds (tutorial: 20). Every other cell runs as written on the
default context: ``client_update`` / ``server_update`` as TF functions over a
``tff.learning.models.from_keras_model`` CNN and ``tff.learning.optimizers``,
``tff.structure.update_struct`` of an attrs ``ServerState``,
``tff.types.tensorflow_to_type``, the ``tff.tensorflow.computation`` /
``tff.federated_computation`` wrappers and the ``tff.templates.IterativeProcess``.
Left out: ``!pip``. Checks added at the end: the loss on the central test data
falls, and a first round equals the server's SGD-with-momentum step computed by
hand (the momentum starts at zero, so it is ``w + 0.05 * mean(client deltas)``).
"""


def test_custom_federated_algorithm_with_tff_optimizers_tutorial():
    # cell 6
    from typing import Any
    import functools

    import attrs
    import numpy as np
    import tensorflow as tf
    import simharness as tff

    # cell 8
    only_digits=True

    # Load dataset.
    from tests.tff.tutorials import synthetic as synth
    emnist_train, emnist_test = synth.emnist_like(2), synth.emnist_like(2, seed=1)

    # Define preprocessing functions.
    def preprocess_fn(dataset, batch_size=16):

      def batch_format_fn(element):
        return (tf.expand_dims(element['pixels'], -1), element['label'])

      return dataset.batch(batch_size).map(batch_format_fn)

    # Preprocess and sample clients for prototyping.
    train_client_ids = sorted(emnist_train.client_ids)
    train_data = emnist_train.preprocess(preprocess_fn)
    central_test_data = preprocess_fn(
        emnist_train.create_tf_dataset_for_client(train_client_ids[0]))

    # Define model.
    def create_keras_model():
      """The CNN model used in https://arxiv.org/abs/1602.05629."""
      data_format = 'channels_last'
      input_shape = [28, 28, 1]

      max_pool = functools.partial(
          tf.keras.layers.MaxPooling2D,
          pool_size=(2, 2),
          padding='same',
          data_format=data_format)
      conv2d = functools.partial(
          tf.keras.layers.Conv2D,
          kernel_size=5,
          padding='same',
          data_format=data_format,
          activation=tf.nn.relu)

      model = tf.keras.models.Sequential([
          conv2d(filters=32, input_shape=input_shape),
          max_pool(),
          conv2d(filters=64),
          max_pool(),
          tf.keras.layers.Flatten(),
          tf.keras.layers.Dense(512, activation=tf.nn.relu),
          tf.keras.layers.Dense(10 if only_digits else 62),
      ])

      return model

    # Wrap as `tff.learning.models.VariableModel`.
    def model_fn():
      keras_model = create_keras_model()
      return tff.learning.models.from_keras_model(
          keras_model,
          input_spec=central_test_data.element_spec,
          loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    # cell 12
    @tf.function
    def client_update(model, dataset, server_weights, client_optimizer):
      """Performs local training on the client's dataset."""
      # Initialize the client model with the current server weights.
      client_weights = model.trainable_variables
      # Assign the server weights to the client model.
      tf.nest.map_structure(lambda x, y: x.assign(y),
                            client_weights, server_weights)
      # Initialize the client optimizer.
      trainable_tensor_specs = tf.nest.map_structure(
              lambda v: tf.TensorSpec(v.shape, v.dtype), client_weights)
      optimizer_state = client_optimizer.initialize(trainable_tensor_specs)
      # Use the client_optimizer to update the local model.
      for batch in iter(dataset):
        with tf.GradientTape() as tape:
          # Compute a forward pass on the batch of data.
          outputs = model.forward_pass(batch)
        # Compute the corresponding gradient.
        grads = tape.gradient(outputs.loss, client_weights)
        # Apply the gradient using a client optimizer.
        optimizer_state, updated_weights = client_optimizer.next(
            optimizer_state, client_weights, grads)
        tf.nest.map_structure(lambda a, b: a.assign(b),
                              client_weights, updated_weights)
      # Return model deltas.
      return tf.nest.map_structure(tf.subtract, client_weights, server_weights)

    # cell 13
    @attrs.define(eq=False, frozen=True)
    class ServerState(object):
      trainable_weights: Any
      optimizer_state: Any

    @tf.function
    def server_update(server_state, mean_model_delta, server_optimizer):
      """Updates the server model weights."""
      # Use aggregated negative model delta as pseudo gradient.
      negative_weights_delta = tf.nest.map_structure(
          lambda w: -1.0 * w, mean_model_delta)
      new_optimizer_state, updated_weights = server_optimizer.next(
          server_state.optimizer_state, server_state.trainable_weights,
          negative_weights_delta)
      return tff.structure.update_struct(
          server_state,
          trainable_weights=updated_weights,
          optimizer_state=new_optimizer_state)

    # cell 15
    # 1. Server and client optimizer to be used.
    server_optimizer = tff.learning.optimizers.build_sgdm(
        learning_rate=0.05, momentum=0.9)
    client_optimizer = tff.learning.optimizers.build_sgdm(
        learning_rate=0.01)

    # 2. Functions return initial state on server.
    @tff.tensorflow.computation
    def server_init():
      model = model_fn()
      trainable_tensor_specs = tf.nest.map_structure(
            lambda v: tf.TensorSpec(v.shape, v.dtype), model.trainable_variables)
      optimizer_state = server_optimizer.initialize(trainable_tensor_specs)
      return ServerState(
          trainable_weights=model.trainable_variables,
          optimizer_state=optimizer_state)

    @tff.federated_computation
    def server_init_tff():
      return tff.federated_value(server_init(), tff.SERVER)

    # 3. One round of computation and communication.
    server_state_type = server_init.type_signature.result
    print('server_state_type:\n',
          server_state_type.formatted_representation())
    trainable_weights_type = server_state_type.trainable_weights
    print('trainable_weights_type:\n',
          trainable_weights_type.formatted_representation())

    # 3-1. Wrap server and client TF blocks with `tff.tensorflow.computation`.
    @tff.tensorflow.computation(server_state_type, trainable_weights_type)
    def server_update_fn(server_state, model_delta):
      return server_update(server_state, model_delta, server_optimizer)

    whimsy_model = model_fn()
    tf_dataset_type = tff.SequenceType(tff.types.tensorflow_to_type(whimsy_model.input_spec))
    print('tf_dataset_type:\n',
          tf_dataset_type.formatted_representation())
    @tff.tensorflow.computation(tf_dataset_type, trainable_weights_type)
    def client_update_fn(dataset, server_weights):
      model = model_fn()
      return client_update(model, dataset, server_weights, client_optimizer)

    # 3-2. Orchestration with `tff.federated_computation`.
    federated_server_type = tff.FederatedType(server_state_type, tff.SERVER)
    federated_dataset_type = tff.FederatedType(tf_dataset_type, tff.CLIENTS)
    @tff.federated_computation(federated_server_type, federated_dataset_type)
    def run_one_round(server_state, federated_dataset):
      # Server-to-client broadcast.
      server_weights_at_client = tff.federated_broadcast(
          server_state.trainable_weights)
      # Local client update.
      model_deltas = tff.federated_map(
          client_update_fn, (federated_dataset, server_weights_at_client))
      # Client-to-server upload and aggregation.
      mean_model_delta = tff.federated_mean(model_deltas)
      # Server update.
      server_state = tff.federated_map(
          server_update_fn, (server_state, mean_model_delta))
      return server_state

    # 4. Build the iterative process for FedAvg.
    fedavg_process = tff.templates.IterativeProcess(
        initialize_fn=server_init_tff, next_fn=run_one_round)
    print('type signature of `initialize`:\n',
          fedavg_process.initialize.type_signature.formatted_representation())
    print('type signature of `next`:\n',
          fedavg_process.next.type_signature.formatted_representation())

    # cell 18
    def evaluate(server_state):
      keras_model = create_keras_model()
      tf.nest.map_structure(
          lambda var, t: var.assign(t),
          keras_model.trainable_weights, server_state.trainable_weights)
      metric = tf.keras.metrics.SparseCategoricalAccuracy()
      for batch in iter(central_test_data):
        preds = keras_model(batch[0], training=False)
        metric.update_state(y_true=batch[1], y_pred=preds)
      return metric.result().numpy()

    # cell 19
    server_state = fedavg_process.initialize()
    acc = evaluate(server_state)
    print('Initial test accuracy', acc)

    # Evaluate after a few rounds
    CLIENTS_PER_ROUND=2
    sampled_clients = train_client_ids[:CLIENTS_PER_ROUND]
    sampled_train_data = [
        train_data.create_tf_dataset_for_client(client)
        for client in sampled_clients]
    for round in range(3):
      server_state = fedavg_process.next(server_state, sampled_train_data)
    acc = evaluate(server_state)
    print('Test accuracy', acc)

    # Checks (not in the tutorial).
    def central_loss(state):
        keras_model = create_keras_model()
        for var, t in zip(keras_model.trainable_weights, state.trainable_weights):
            var.assign(t)
        loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return float(np.mean([loss(y, keras_model(x)) for x, y in central_test_data]))

    initial = fedavg_process.initialize()
    assert isinstance(initial, ServerState)
    assert central_loss(server_state) < central_loss(initial)
    # Round 1 by hand: the clients' deltas from the broadcast weights, their mean, and the
    # server's first SGDM step on the negated mean (momentum buffer 0: w + lr * mean).
    one_round = fedavg_process.next(initial, sampled_train_data)
    deltas = [client_update_fn(d, initial.trainable_weights) for d in sampled_train_data]
    assert any(np.abs(d).max() > 0 for d in deltas[0])
    for i, w in enumerate(initial.trainable_weights):
        mean_delta = np.mean([d[i] for d in deltas], axis=0)
        np.testing.assert_allclose(
            one_round.trainable_weights[i], w + 0.05 * mean_delta, rtol=1e-4, atol=1e-6)
