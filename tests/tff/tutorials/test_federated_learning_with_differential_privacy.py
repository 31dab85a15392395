"""TFF 0.88's ``docs/tutorials/federated_learning_with_differential_privacy.ipynb``, renamed.

EMNIST (a download) is replaced by `synthetic.emnist_like` (6 training
clients, 2 test clients); 2 rounds (tutorial: 100), 20 clients per round
(every client is sampled), noise multipliers 0.0 and 0.5 (tutorial: 0.0 to
1.0). ``dp_accounting``'s calibration runs as written. Default context.

Left out / changed (tutorial bugs; they fail in TFF 0.88 as well):
- ``!pip`` and the plotting cells (matplotlib / seaborn).
- cell 7: ``@tff.tensorflow_computation`` -> ``@tff.tensorflow.computation``.
- cell 15: ``tff.learning.build_federated_evaluation`` was removed before
  TFF 0.88; a 6-line stand-in over ``tff.learning.algorithms.build_fed_eval``
  returning ``{'eval': current_round_metrics}``.
- ``pandas.DataFrame.append`` (removed in pandas 2): ``pd.concat``.
- cell 23 sets ``total_clients = 3383`` for the accountant and then trains
  with it, indexing past the synthetic clients: reset before the last run.
With fewer than ~10 clients per round TFF's adaptive clipping refuses the
noise (``clipped_count_stddev`` too low), as here: hence 20.
"""


def test_federated_learning_with_differential_privacy_tutorial():
    # cell 7
    import collections

    import dp_accounting
    import numpy as np
    import pandas as pd
    import tensorflow as tf
    import simharness as tff

    def _append(df, row, ignore_index=True):  # PATCHED: DataFrame.append was removed in pandas 2
      return pd.concat([df, pd.DataFrame([row])], ignore_index=True)

    def _build_federated_evaluation(model_fn):  # PATCHED: TFF 0.88 has build_fed_eval only
      process = tff.learning.algorithms.build_fed_eval(model_fn)
      def evaluate(model_weights, data):
        state = process.set_model_weights(process.initialize(), model_weights)
        m = process.next(state, data).metrics['client_work']['eval']['current_round_metrics']
        return {'eval': dict(m)}
      return evaluate

    # cell 9
    @tff.tensorflow.computation
    def hello_world():
      return 'Hello, World!'

    hello_world()

    # cell 11
    def get_emnist_dataset():
      from tests.tff.tutorials import synthetic as synth
      emnist_train, emnist_test = synth.emnist_like(6), synth.emnist_like(2, seed=1)

      def element_fn(element):
        return collections.OrderedDict(
            x=tf.expand_dims(element['pixels'], -1), y=element['label']
        )

      def preprocess_train_dataset(dataset):
        # Use buffer_size same as the maximum client dataset size,
        # 418 for Federated EMNIST
        return (
            dataset.map(element_fn)
            .shuffle(buffer_size=418)
            .repeat(1)
            .batch(32, drop_remainder=False)
        )

      def preprocess_test_dataset(dataset):
        return dataset.map(element_fn).batch(128, drop_remainder=False)

      emnist_train = emnist_train.preprocess(preprocess_train_dataset)
      emnist_test = preprocess_test_dataset(
          emnist_test.create_tf_dataset_from_all_clients()
      )
      return emnist_train, emnist_test

    train_data, test_data = get_emnist_dataset()

    # cell 13
    def my_model_fn():
      model = tf.keras.models.Sequential([
          tf.keras.layers.Reshape(input_shape=(28, 28, 1), target_shape=(28 * 28,)),
          tf.keras.layers.Dense(200, activation=tf.nn.relu),
          tf.keras.layers.Dense(200, activation=tf.nn.relu),
          tf.keras.layers.Dense(10),
      ])
      return tff.learning.models.from_keras_model(
          keras_model=model,
          loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
          input_spec=test_data.element_spec,
          metrics=[tf.keras.metrics.SparseCategoricalAccuracy()],
      )

    # cell 15
    total_clients = len(train_data.client_ids)

    def train(rounds, noise_multiplier, clients_per_round, data_frame):
      # Using the `dp_aggregator` here turns on differential privacy with adaptive
      # clipping.
      aggregation_factory = tff.learning.model_update_aggregator.dp_aggregator(
          noise_multiplier, clients_per_round
      )

      # We use Poisson subsampling which gives slightly tighter privacy guarantees
      # compared to having a fixed number of clients per round. The actual number of
      # clients per round is stochastic with mean clients_per_round.
      sampling_prob = clients_per_round / total_clients

      # Build a federated averaging process.
      # Typically a non-adaptive server optimizer is used because the noise in the
      # updates can cause the second moment accumulators to become very large
      # prematurely.
      learning_process = tff.learning.algorithms.build_unweighted_fed_avg(
          my_model_fn,
          client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.01),
          server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0, momentum=0.9),
          model_aggregator=aggregation_factory,
      )

      eval_process = _build_federated_evaluation(my_model_fn)  # PATCHED: removed in TFF 0.88

      # Training loop.
      state = learning_process.initialize()
      for round in range(rounds):
        if round % 5 == 0:
          model_weights = learning_process.get_model_weights(state)
          metrics = eval_process(model_weights, [test_data])['eval']
          if round < 25 or round % 25 == 0:
            print(f'Round {round:3d}: {metrics}')
          data_frame = _append(data_frame, 
              {'Round': round, 'NoiseMultiplier': noise_multiplier, **metrics},
              ignore_index=True,
          )

        # Sample clients for a round. Note that if your dataset is large and
        # sampling_prob is small, it would be faster to use gap sampling.
        x = np.random.uniform(size=total_clients)
        sampled_clients = [
            train_data.client_ids[i]
            for i in range(total_clients)
            if x[i] < sampling_prob
        ]
        sampled_train_data = [
            train_data.create_tf_dataset_for_client(client)
            for client in sampled_clients
        ]

        # Use selected clients for update.
        result = learning_process.next(state, sampled_train_data)
        state = result.state
        metrics = result.metrics

      model_weights = learning_process.get_model_weights(state)
      metrics = eval_process(model_weights, [test_data])['eval']
      print(f'Round {rounds:3d}: {metrics}')
      data_frame = _append(data_frame, 
          {'Round': rounds, 'NoiseMultiplier': noise_multiplier, **metrics},
          ignore_index=True,
      )

      return data_frame

    # cell 16
    data_frame = pd.DataFrame()
    rounds = 2
    clients_per_round = 20

    for noise_multiplier in [0.0, 0.5]:
      print(f'Starting training with noise multiplier: {noise_multiplier}')
      data_frame = train(rounds, noise_multiplier, clients_per_round, data_frame)
      print()

    # cell 18

    def make_plot(data_frame):
      plt.figure(figsize=(15, 5))

      dff = data_frame.rename(
          columns={'sparse_categorical_accuracy': 'Accuracy', 'loss': 'Loss'}
      )

      plt.subplot(121)
      sns.lineplot(
          data=dff, x='Round', y='Accuracy', hue='NoiseMultiplier', palette='dark'
      )
      plt.subplot(122)
      sns.lineplot(
          data=dff, x='Round', y='Loss', hue='NoiseMultiplier', palette='dark'
      )

    # cell 19
    pass  # make_plot(data_frame)

    # cell 21
    total_clients = 3383
    noise_to_clients_ratio = 0.01
    target_delta = 1e-5
    target_eps = 2

    # Initialize arguments to dp_accounting.calibrate_dp_mechanism.

    # No-arg callable that returns a fresh accountant.
    make_fresh_accountant = dp_accounting.rdp.RdpAccountant

    # Create function that takes expected clients per round and returns a
    # dp_accounting.DpEvent representing the full training process.
    def make_event_from_param(clients_per_round):
      q = clients_per_round / total_clients
      noise_multiplier = clients_per_round * noise_to_clients_ratio
      gaussian_event = dp_accounting.GaussianDpEvent(noise_multiplier)
      sampled_event = dp_accounting.PoissonSampledDpEvent(q, gaussian_event)
      composed_event = dp_accounting.SelfComposedDpEvent(sampled_event, rounds)
      return composed_event

    # Create object representing the search range [1, 3383].
    bracket_interval = dp_accounting.ExplicitBracketInterval(1, total_clients)

    # Perform search for smallest clients_per_round achieving the target privacy.
    clients_per_round = dp_accounting.calibrate_dp_mechanism(
        make_fresh_accountant,
        make_event_from_param,
        target_eps,
        target_delta,
        bracket_interval,
        discrete=True,
    )

    noise_multiplier = clients_per_round * noise_to_clients_ratio
    print(
        f'To get ({target_eps}, {target_delta})-DP, use {clients_per_round} '
        f'clients with noise multiplier {noise_multiplier}.'
    )

    # cell 23
    rounds = 2
    noise_multiplier = 1.2
    clients_per_round = 20

    total_clients = len(train_data.client_ids)  # PATCHED: the 3383 above is for the accountant
    data_frame = pd.DataFrame()
    data_frame = train(rounds, noise_multiplier, clients_per_round, data_frame)

    pass  # make_plot(data_frame)


    # Checks (not in the tutorial).
    assert set(data_frame['NoiseMultiplier']) == {1.2}
    assert list(data_frame['Round']) == [0, 2]
    assert data_frame['num_examples'].iloc[-1] == 24
    assert isinstance(clients_per_round, int) or float(clients_per_round) == int(clients_per_round)
