"""TFF 0.88's ``docs/tutorials/working_with_client_data.ipynb``, renamed.

EMNIST (``tff.simulation.datasets.emnist.load_data()``, a download) is
replaced by `synthetic.emnist_like` (EMNIST's element structure); 3 clients
(tutorial: 10) and 2 rounds per loop (5). Default context.

Left out / changed: ``!pip``; cell 30 decorates ``new_next`` with
``@federated_language(...)`` -- the module itself, which is not callable in
TFF 0.88 either (a tutorial bug): here ``@federated_language.federated_computation(...)``.
Added at the end: one round of the hand-composed process, whose type and
results must equal ``compose_dataset_computation_with_iterative_process``'s.
"""

import numpy as np


def test_working_with_client_data_tutorial():
    # cell 7
    import collections
    import time

    import simharness as federated_language
    import tensorflow as tf
    import simharness as tff

    # cell 9
    from tests.tff.tutorials import synthetic as synth
    client_data = synth.emnist_like()

    # cell 11
    first_client_id = client_data.client_ids[0]
    first_client_dataset = client_data.create_tf_dataset_for_client(first_client_id)
    print(first_client_dataset.element_spec)
    # This information is also available as a `ClientData` property:
    assert client_data.element_type_structure == first_client_dataset.element_spec

    # cell 13
    def preprocess_dataset(dataset):
      """Create batches of 5 examples, and limit to 3 batches."""

      def map_fn(input):
        return collections.OrderedDict(
            x=tf.reshape(input['pixels'], shape=(-1, 784)),
            y=tf.cast(tf.reshape(input['label'], shape=(-1, 1)), tf.int64),
        )

      return (
          dataset.batch(5)
          .map(map_fn, num_parallel_calls=tf.data.experimental.AUTOTUNE)
          .take(5)
      )

    preprocessed_client_data = client_data.preprocess(preprocess_dataset)

    # Notice that we have both reshaped and renamed the elements of the ordered dict.
    first_client_dataset = preprocessed_client_data.create_tf_dataset_for_client(
        first_client_id
    )
    print(first_client_dataset.element_spec)

    # cell 15
    def preprocess_and_shuffle(dataset):
      """Applies `preprocess_dataset` above and shuffles the result."""
      preprocessed = preprocess_dataset(dataset)
      return preprocessed.shuffle(buffer_size=5)

    preprocessed_and_shuffled = client_data.preprocess(preprocess_and_shuffle)

    # The type signature will remain the same, but the batches will be shuffled.
    first_client_dataset = preprocessed_and_shuffled.create_tf_dataset_for_client(
        first_client_id
    )
    print(first_client_dataset.element_spec)

    # cell 17
    keras_model = tf.keras.models.Sequential([
        tf.keras.layers.InputLayer(input_shape=(784,)),
        tf.keras.layers.Dense(10, kernel_initializer='zeros'),
    ])
    tff_model = tff.learning.models.functional_model_from_keras(
        keras_model,
        loss_fn=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        # Note: input spec is the _batched_ shape, and includes the
        # label tensor which will be passed to the loss function. This model is
        # therefore configured to accept data _after_ it has been preprocessed.
        input_spec=collections.OrderedDict(
            x=tf.TensorSpec(shape=[None, 784], dtype=tf.float32),
            y=tf.TensorSpec(shape=[None, 1], dtype=tf.int64),
        ),
        metrics_constructor=collections.OrderedDict(
            loss=lambda: tf.keras.metrics.SparseCategoricalCrossentropy(
                from_logits=True
            ),
            accuracy=tf.keras.metrics.SparseCategoricalAccuracy,
        ),
    )

    trainer = tff.learning.algorithms.build_weighted_fed_avg(
        tff_model,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.01),
    )

    # cell 20
    selected_client_ids = preprocessed_and_shuffled.client_ids[:3]

    preprocessed_data_for_clients = [
        preprocessed_and_shuffled.create_tf_dataset_for_client(
            selected_client_ids[i]
        )
        for i in range(3)
    ]

    state = trainer.initialize()
    for _ in range(2):
      t1 = time.time()
      result = trainer.next(state, preprocessed_data_for_clients)
      state = result.state
      train_metrics = result.metrics['client_work']['train']
      t2 = time.time()
      print(f'loss {train_metrics["loss"]:.2f}, round time {t2 - t1:.2f} seconds')

    # cell 23
    print('dataset computation without preprocessing:')
    print(client_data.dataset_computation.type_signature)
    print('\n')
    print('dataset computation with preprocessing:')
    print(preprocessed_and_shuffled.dataset_computation.type_signature)

    # cell 25
    trainer_accepting_ids = (
        tff.simulation.compose_dataset_computation_with_iterative_process(
            preprocessed_and_shuffled.dataset_computation, trainer
        )
    )

    # cell 27
    for _ in range(2):
      t1 = time.time()
      result = trainer_accepting_ids.next(state, selected_client_ids)
      state = result.state
      train_metrics = result.metrics['client_work']['train']
      t2 = time.time()
      print(f'loss {train_metrics["loss"]:.2f}, round time {t2 - t1:.2f} seconds')

    # cell 30
    selected_clients_type = federated_language.FederatedType(
        preprocessed_and_shuffled.dataset_computation.type_signature.parameter,
        federated_language.CLIENTS,
    )

    @federated_language.federated_computation(
        trainer.next.type_signature.parameter[0], selected_clients_type
    )
    def new_next(server_state, selected_clients):
      preprocessed_data = federated_language.federated_map(
          preprocessed_and_shuffled.dataset_computation, selected_clients
      )
      return trainer.next(server_state, preprocessed_data)

    manual_trainer_with_preprocessing = tff.templates.IterativeProcess(
        initialize_fn=trainer.initialize, next_fn=new_next
    )

    # cell 32
    print(trainer_accepting_ids.next.type_signature)
    print(manual_trainer_with_preprocessing.next.type_signature)


    # Checks (not in the tutorial).
    assert str(client_data.dataset_computation.type_signature) == '(str -> <label=int32,pixels=float32[28,28]>*)'
    assert str(preprocessed_and_shuffled.dataset_computation.type_signature) == (
        '(str -> <x=float32[?,784],y=int64[?,1]>*)')
    assert (trainer_accepting_ids.next.type_signature.result
            == manual_trainer_with_preprocessing.next.type_signature.result)
    start = trainer.initialize()
    by_ids = trainer_accepting_ids.next(start, selected_client_ids)
    by_hand = manual_trainer_with_preprocessing.next(start, selected_client_ids)
    # No shuffle in the check: the same batches either way.
    unshuffled = tff.simulation.compose_dataset_computation_with_iterative_process(
        preprocessed_client_data.dataset_computation, trainer)
    a = unshuffled.next(start, selected_client_ids)
    b = trainer.next(start, [preprocessed_client_data.create_tf_dataset_for_client(c)
                             for c in selected_client_ids])
    np.testing.assert_array_equal(a.metrics['client_work']['train']['loss'],
                                  b.metrics['client_work']['train']['loss'])
    for x, y in zip(trainer.get_model_weights(a.state).trainable, trainer.get_model_weights(b.state).trainable):
        np.testing.assert_array_equal(x, y)
    assert by_ids.metrics['client_work']['train']['loss'] > 0
    assert by_hand.metrics['client_work']['train']['loss'] > 0
