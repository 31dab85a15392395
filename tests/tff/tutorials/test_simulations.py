"""TFF 0.88's ``docs/tutorials/simulations.ipynb`` ("High-performance simulations"), renamed.

EMNIST (``tff.simulation.datasets.emnist.load_data()``, a download) is
replaced by `synthetic.emnist_like` (3 clients of 12 examples, EMNIST's
element structure); 3 clients (tutorial: 10), 2 epochs (10), 2 rounds (10).
Default context. Left out: ``!pip`` and the ``%%time`` magic (timing only).
"""

import numpy as np


def test_simulations_tutorial():
    # cell 7
    import collections
    import time

    import tensorflow as tf
    import simharness as tff

    from tests.tff.tutorials import synthetic as synth
    source = synth.emnist_like(3)

    def map_fn(example):
      return collections.OrderedDict(
          x=tf.reshape(example['pixels'], [-1, 784]), y=example['label']
      )

    def client_data(n):
      ds = source.create_tf_dataset_for_client(source.client_ids[n])
      return ds.repeat(2).shuffle(500).batch(20).map(map_fn)

    train_data = [client_data(n) for n in range(3)]
    element_spec = train_data[0].element_spec

    keras_model = tf.keras.models.Sequential([
        tf.keras.layers.InputLayer(input_shape=(784,)),
        tf.keras.layers.Dense(units=10, kernel_initializer='zeros'),
        tf.keras.layers.Softmax(),
    ])
    tff_model = tff.learning.models.functional_model_from_keras(
        keras_model,
        loss_fn=tf.keras.losses.SparseCategoricalCrossentropy(),
        input_spec=element_spec,
        metrics_constructor=collections.OrderedDict(
            accuracy=tf.keras.metrics.SparseCategoricalAccuracy
        ),
    )

    trainer = tff.learning.algorithms.build_weighted_fed_avg(
        tff_model,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.02),
    )

    def evaluate(num_rounds=10):
      state = trainer.initialize()
      for _ in range(num_rounds):
        t1 = time.time()
        result = trainer.next(state, train_data)
        state = result.state
        train_metrics = result.metrics['client_work']['train']
        t2 = time.time()
        print(
            'train metrics {m}, round time {t:.2f} seconds'.format(
                m=train_metrics, t=t2 - t1
            )
        )

    # cell 9
    evaluate(2)

    # Checks (not in the tutorial): a round of the same trainer from its state reports
    # the metric it was built with, over every client.
    result = trainer.next(trainer.initialize(), train_data)
    assert set(result.metrics["client_work"]["train"]) == {"accuracy"}
    assert 0.0 <= result.metrics["client_work"]["train"]["accuracy"] <= 1.0
    assert np.isfinite(np.asarray(trainer.get_model_weights(result.state).trainable[0])).all()

