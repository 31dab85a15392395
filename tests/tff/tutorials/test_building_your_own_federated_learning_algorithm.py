"""TFF 0.88's ``docs/tutorials/building_your_own_federated_learning_algorithm.ipynb``, renamed.

EMNIST (a download) is replaced by `synthetic.emnist_like`; 3 clients
(tutorial: 10) and 2 rounds (15). Every other cell runs as written on the
default context: ``client_update`` / ``server_update`` as TF functions, the
``tff.tensorflow.computation`` and ``federated_computation`` wrappers, the
``tff.templates.IterativeProcess`` and the Keras evaluation. Left out:
``!pip``. Checks added at the end: the central loss after training is below
the initial one, and a round equals the average of the clients' local
training (FedAvg by hand).
"""

def test_building_your_own_federated_learning_algorithm_tutorial():
    # cell 5
    import collections

    import simharness as federated_language
    import numpy as np
    import tensorflow as tf
    import simharness as tff

    # cell 9
    from tests.tff.tutorials import synthetic as synth
    emnist_train, emnist_test = synth.emnist_like(3), synth.emnist_like(3, seed=1)

    # cell 11
    NUM_CLIENTS = 3
    BATCH_SIZE = 20

    def preprocess(dataset):

      def batch_format_fn(element):
        """Flatten a batch of EMNIST data and return a (features, label) tuple."""
        return (
            tf.reshape(element['pixels'], [-1, 784]),
            tf.reshape(element['label'], [-1, 1]),
        )

      return dataset.batch(BATCH_SIZE).map(batch_format_fn)

    # cell 13
    client_ids = sorted(emnist_train.client_ids)[:NUM_CLIENTS]
    federated_train_data = [
        preprocess(emnist_train.create_tf_dataset_for_client(x)) for x in client_ids
    ]

    # cell 16
    def create_keras_model():
      initializer = tf.keras.initializers.GlorotNormal(seed=0)
      return tf.keras.models.Sequential([
          tf.keras.layers.Input(shape=(784,)),
          tf.keras.layers.Dense(10, kernel_initializer=initializer),
          tf.keras.layers.Softmax(),
      ])

    # cell 18
    keras_model = create_keras_model()
    tff_model = tff.learning.models.functional_model_from_keras(
        keras_model,
        loss_fn=tf.keras.losses.SparseCategoricalCrossentropy(),
        input_spec=federated_train_data[0].element_spec,
        metrics_constructor=collections.OrderedDict(
            accuracy=tf.keras.metrics.SparseCategoricalAccuracy
        ),
    )

    # cell 23
    def initialize_fn():
      trainable_weights, _ = tff_model.initial_weights
      return trainable_weights

    # cell 25
    def next_fn(server_weights, federated_dataset):
      # Broadcast the server weights to the clients.
      server_weights_at_client = broadcast(server_weights)

      # Each client computes their updated weights.
      client_weights = client_update(federated_dataset, server_weights_at_client)

      # The server averages these updates.
      mean_client_weights = mean(client_weights)

      # The server updates its model.
      server_weights = server_update(mean_client_weights)

      return server_weights

    # cell 29
    @tf.function
    def client_update(model, dataset, initial_weights, client_optimizer):
      """Performs training (using the server model weights) on the client's dataset."""
      # Initialize the client model with the current server weights and the optimizer
      # state.
      client_weights = initial_weights.trainable
      optimizer_state = client_optimizer.initialize(
          tf.nest.map_structure(tf.TensorSpec.from_tensor, client_weights)
      )

      # Use the client_optimizer to update the local model.
      for batch in dataset:
        x, y = batch
        with tf.GradientTape() as tape:
          tape.watch(client_weights)
          # Compute a forward pass on the batch of data
          outputs = model.predict_on_batch(
              model_weights=(client_weights, ()), x=x, training=True
          )
          loss = model.loss(output=outputs, label=y)

        # Compute the corresponding gradient
        grads = tape.gradient(loss, client_weights)

        # Apply the gradient using a client optimizer.
        optimizer_state, client_weights = client_optimizer.next(
            optimizer_state, weights=client_weights, gradients=grads
        )

      return tff.learning.models.ModelWeights(client_weights, non_trainable=())

    # cell 31
    @tf.function
    def server_update(model, mean_client_weights):
      """Updates the server model weights as the average of the client model weights."""
      del model  # Unused, just take the mean_client_weights.
      return mean_client_weights

    # cell 36
    federated_float_on_clients = federated_language.FederatedType(
        np.float32, federated_language.CLIENTS
    )

    # cell 38
    str(federated_float_on_clients)

    # cell 42
    @federated_language.federated_computation(
        federated_language.FederatedType(np.float32, federated_language.CLIENTS)
    )
    def get_average_temperature(client_temperatures):
      return federated_language.federated_mean(client_temperatures)

    # cell 44
    str(get_average_temperature.type_signature)

    # cell 46
    get_average_temperature([68.5, 70.3, 69.8])

    # cell 49
    @tff.tensorflow.computation(np.float32)
    def add_half(x):
      return tf.add(x, 0.5)

    # cell 51
    str(add_half.type_signature)

    # cell 53
    @federated_language.federated_computation(
        federated_language.FederatedType(np.float32, federated_language.CLIENTS)
    )
    def add_half_on_clients(x):
      return federated_language.federated_map(add_half, x)

    # cell 55
    str(add_half_on_clients.type_signature)

    # cell 60
    @tff.tensorflow.computation
    def server_init():
      return tff.learning.models.ModelWeights(*tff_model.initial_weights)

    # cell 62
    @federated_language.federated_computation
    def initialize_fn():
      return federated_language.federated_eval(
          server_init, federated_language.SERVER
      )

    # cell 64
    tf_dataset_type = federated_language.SequenceType(
        tff.tensorflow.to_type(tff_model.input_spec)
    )

    # cell 66
    str(tf_dataset_type)

    # cell 68
    model_weights_type = server_init.type_signature.result

    # cell 70
    str(model_weights_type)

    # cell 72
    @tff.tensorflow.computation(tf_dataset_type, model_weights_type)
    def client_update_fn(tf_dataset, server_weights):
      client_optimizer = tff.learning.optimizers.build_sgdm(learning_rate=0.01)
      return client_update(tff_model, tf_dataset, server_weights, client_optimizer)

    # cell 74
    @tff.tensorflow.computation(model_weights_type)
    def server_update_fn(mean_client_weights):
      return server_update(tff_model, mean_client_weights)

    # cell 76
    federated_server_type = federated_language.FederatedType(
        model_weights_type, federated_language.SERVER
    )
    federated_dataset_type = federated_language.FederatedType(
        tf_dataset_type, federated_language.CLIENTS
    )

    # cell 78
    @federated_language.federated_computation(
        federated_server_type, federated_dataset_type
    )
    def next_fn(server_weights, federated_dataset):
      # Broadcast the server weights to the clients.
      server_weights_at_client = federated_language.federated_broadcast(
          server_weights
      )

      # Each client computes their updated weights.
      client_weights = federated_language.federated_map(
          client_update_fn, (federated_dataset, server_weights_at_client)
      )

      # The server averages these updates.
      mean_client_weights = federated_language.federated_mean(client_weights)

      # The server updates its model.
      server_weights = federated_language.federated_map(
          server_update_fn, mean_client_weights
      )

      return server_weights

    # cell 80
    federated_algorithm = tff.templates.IterativeProcess(
        initialize_fn=initialize_fn, next_fn=next_fn
    )

    # cell 82
    str(federated_algorithm.initialize.type_signature)

    # cell 84
    str(federated_algorithm.next.type_signature)

    # cell 88
    central_emnist_test = emnist_test.create_tf_dataset_from_all_clients()
    central_emnist_test = preprocess(central_emnist_test)

    # cell 90
    def evaluate(model_weights):
      keras_model = create_keras_model()
      keras_model.compile(
          loss=tf.keras.losses.SparseCategoricalCrossentropy(),
          metrics=[tf.keras.metrics.SparseCategoricalAccuracy()],
      )
      model_weights.assign_weights_to(keras_model)
      keras_model.evaluate(central_emnist_test)

    # cell 92
    server_state = federated_algorithm.initialize()
    evaluate(server_state)

    # cell 94
    for _ in range(2):
      server_state = federated_algorithm.next(server_state, federated_train_data)

    # cell 95
    evaluate(server_state)


    # Checks (not in the tutorial).
    def central_loss(model_weights):
        keras_model = create_keras_model()
        keras_model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy())
        model_weights.assign_weights_to(keras_model)
        return keras_model.evaluate(central_emnist_test, verbose=0)

    initial = federated_algorithm.initialize()
    assert central_loss(server_state) < central_loss(initial)
    # One round = the mean of the clients' locally trained weights (uniform weights, as in
    # the tutorial's federated_mean), each from the broadcast model.
    one_round = federated_algorithm.next(initial, federated_train_data)
    locals_ = [client_update_fn(d, initial) for d in federated_train_data]
    for i, w in enumerate(one_round.trainable):
        np.testing.assert_allclose(w, np.mean([l.trainable[i] for l in locals_], axis=0), rtol=1e-5, atol=1e-6)
