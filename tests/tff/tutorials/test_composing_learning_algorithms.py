"""TFF 0.88's ``docs/tutorials/composing_learning_algorithms.ipynb``, renamed.

EMNIST (a download) is replaced by `synthetic.emnist_like`; 3 clients
(tutorial: 10). Every other cell runs as written on the default context (the
custom client work with gradient clipping, ``build_broadcast_process``,
``build_apply_optimizer_finalizer``, ``compose_learning_process``), and the
values the tutorial shows (client_work and finalizer state, the metrics'
structure) are asserted. Left out: ``!pip``.
"""

def test_composing_learning_algorithms_tutorial():
    # cell 6
    import collections

    import simharness as federated_language
    import numpy as np
    import tensorflow as tf
    import simharness as tff

    # cell 14
    @tf.function
    def client_update(
        model: tff.learning.models.FunctionalModel,
        dataset: tf.data.Dataset,
        initial_weights: tff.learning.models.ModelWeights,
        client_optimizer: tff.learning.optimizers.Optimizer,
    ):
      """Performs training (using the initial server model weights) on the client's dataset."""
      # Keep track of the number of examples.
      num_examples = 0.0
      # Use the client_optimizer to update the local model.
      trainable_weights, non_trainable_weights = (
          initial_weights.trainable,
          initial_weights.non_trainable,
      )
      optimizer_state = client_optimizer.initialize(
          tf.nest.map_structure(lambda x: tf.TensorSpec, trainable_weights)
      )
      for batch in dataset:
        x, y = batch
        with tf.GradientTape() as tape:
          tape.watch(trainable_weights)
          logits = model.predict_on_batch(
              model_weights=(trainable_weights, non_trainable_weights),
              x=x,
              training=True,
          )
          num_examples += tf.cast(tf.shape(y)[0], tf.float32)
          loss = model.loss(output=logits, label=y)

        # Compute the corresponding gradient
        grads = tape.gradient(loss, trainable_weights)

        # Compute the gradient norm and clip
        gradient_norm = tf.linalg.global_norm(grads)
        if gradient_norm > 1:
          grads = tf.nest.map_structure(lambda x: x / gradient_norm, grads)

        # Apply the gradient using a client optimizer.
        optimizer_state, trainable_weights = client_optimizer.next(
            optimizer_state, trainable_weights, grads
        )

      # Compute the difference between the initial weights and the client weights
      client_update = tf.nest.map_structure(
          tf.subtract, trainable_weights, initial_weights[0]
      )

      return tff.learning.templates.ClientResult(
          update=client_update, update_weight=num_examples
      )

    # cell 18
    def build_gradient_clipping_client_work(
        model: tff.learning.models.FunctionalModel,
        optimizer: tff.learning.optimizers.Optimizer,
    ) -> tff.learning.templates.ClientWorkProcess:
      """Creates a client work process that uses gradient clipping."""
      data_type = federated_language.SequenceType(
          tff.tensorflow.to_type(model.input_spec)
      )
      model_weights_type = federated_language.to_type(
          tf.nest.map_structure(
              lambda arr: federated_language.TensorType(
                  shape=arr.shape, dtype=arr.dtype
              ),
              tff.learning.models.ModelWeights(*model.initial_weights),
          )
      )

      @federated_language.federated_computation
      def initialize_fn():
        return federated_language.federated_value((), federated_language.SERVER)

      @tff.tensorflow.computation(model_weights_type, data_type)
      def client_update_computation(model_weights, dataset):
        return client_update(model, dataset, model_weights, optimizer)

      @federated_language.federated_computation(
          initialize_fn.type_signature.result,
          federated_language.FederatedType(
              model_weights_type, federated_language.CLIENTS
          ),
          federated_language.FederatedType(data_type, federated_language.CLIENTS),
      )
      def next_fn(state, model_weights, client_dataset):
        client_result = federated_language.federated_map(
            client_update_computation, (model_weights, client_dataset)
        )
        # Return empty measurements, though a more complete algorithm might
        # measure something here.
        measurements = federated_language.federated_value(
            (), federated_language.SERVER
        )
        return tff.templates.MeasuredProcessOutput(
            state, client_result, measurements
        )

      return tff.learning.templates.ClientWorkProcess(initialize_fn, next_fn)

    # cell 21
    from tests.tff.tutorials import synthetic as synth
    emnist_train, emnist_test = synth.emnist_like(3), synth.emnist_like(3, seed=1)

    # cell 23
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

    client_ids = sorted(emnist_train.client_ids)[:NUM_CLIENTS]
    federated_train_data = [
        preprocess(emnist_train.create_tf_dataset_for_client(x)) for x in client_ids
    ]

    # cell 26
    initializer = tf.keras.initializers.GlorotNormal(seed=0)
    keras_model = tf.keras.models.Sequential([
        tf.keras.layers.Input(shape=(784,)),
        tf.keras.layers.Dense(10, kernel_initializer=initializer),
        tf.keras.layers.Softmax(),
    ])

    tff_model = tff.learning.models.functional_model_from_keras(
        keras_model,
        loss_fn=tf.keras.losses.SparseCategoricalCrossentropy(),
        input_spec=federated_train_data[0].element_spec,
        metrics_constructor=collections.OrderedDict(
            accuracy=tf.keras.metrics.SparseCategoricalAccuracy
        ),
    )

    # cell 28
    client_optimizer = tff.learning.optimizers.build_sgdm(learning_rate=0.01)
    server_optimizer = tff.learning.optimizers.build_sgdm(learning_rate=1.0)

    # cell 30
    @tff.tensorflow.computation
    def initial_model_weights_fn():
      return tff.learning.models.ModelWeights(*tff_model.initial_weights)

    model_weights_type = initial_model_weights_fn.type_signature.result

    distributor = tff.learning.templates.build_broadcast_process(model_weights_type)
    client_work = build_gradient_clipping_client_work(tff_model, client_optimizer)

    # TFF aggregators use a factory pattern, which create an aggregator
    # based on the output type of the client work. This also uses a float (the number
    # of examples) to govern the weight in the average being computed.)
    aggregator_factory = tff.aggregators.MeanFactory()
    aggregator = aggregator_factory.create(
        model_weights_type.trainable, federated_language.TensorType(np.float32)
    )
    finalizer = tff.learning.templates.build_apply_optimizer_finalizer(
        server_optimizer, model_weights_type
    )

    # cell 32
    fed_avg_with_clipping = tff.learning.templates.compose_learning_process(
        initial_model_weights_fn, distributor, client_work, aggregator, finalizer
    )

    # cell 34
    state = fed_avg_with_clipping.initialize()

    state.client_work

    # cell 36
    state.finalizer

    # cell 38
    learning_process_output = fed_avg_with_clipping.next(
        state, federated_train_data
    )

    # cell 40
    learning_process_output.state.finalizer

    # cell 42
    learning_process_output.metrics


    # What the tutorial's cells 34-42 show.
    assert state.client_work == ()
    assert state.finalizer == collections.OrderedDict(learning_rate=1.0)
    assert learning_process_output.state.finalizer == collections.OrderedDict(learning_rate=1.0)
    metrics = learning_process_output.metrics
    assert list(metrics) == ['distributor', 'client_work', 'aggregator', 'finalizer']
    assert metrics['client_work'] == ()
    assert metrics['aggregator'] == collections.OrderedDict(mean_value=(), mean_weight=())
    assert metrics['finalizer'] == collections.OrderedDict(update_non_finite=0)
    before = fed_avg_with_clipping.get_model_weights(state)
    after = fed_avg_with_clipping.get_model_weights(learning_process_output.state)
    assert not np.array_equal(before.trainable[0], after.trainable[0])
