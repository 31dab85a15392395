"""The loop of TFF's text-generation tutorial: client datasets the program builds itself.

The program, as TFF's "federated learning for text generation" tutorial writes it
(with ``import simharness as tff``): Shakespeare-like clients (4-8 snippets of 250-450
characters each, the tutorial's 86-character vocabulary) in a
``ClientData.from_clients_and_tf_fn``; the tutorial's preprocessing applied by the
program to each client's dataset (a ``StaticHashTable`` lookup of the characters,
``unbatch``, ``batch(101, drop_remainder=True)``, ``shuffle(100, seed=1)``,
``batch(8, drop_remainder=True)``, ``map(split_input_target)``); a Keras character
model (Embedding 8, GRU 64, Dense 86) through ``tff.learning.models.from_keras_model``;
``build_weighted_fed_avg`` with ``build_sgdm(0.02)``; 5 clients a round. Two ways to
hand a round its data, each timed as one round:

* ``fresh``: a new random cohort each round, its datasets built in the round by the
  program (``[preprocess(train.create_tf_dataset_for_client(c)) for c in cohort]``);
* ``reused``: the same datasets every round.

The datasets' graphs differ only in their arrays: they are read by one traced reader
(`simharness.core.dataset_templates`). Checked before timing: a round over them gives
the bits of the same round over datasets read as fresh copies of their graphs (TFF's
executors' way), and a finite loss. TFF 0.87 cannot run in this suite:
docs/benchmarks.md gives its times for this program on the same machine. With
``--benchmark-disable`` (CI) each case runs once on the thread stack; the
``process-2`` cases are timing only.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

from .helpers import check_then_time, median_seconds

NUM_CLIENTS = 60
COHORT = 5
GROUP = 'the text tutorial: datasets the program builds per client, process.next'
VOCAB = list(
    'dhlptx@DHLPTX $(,048cgkoswCGKOSW[_#\'/37;?bfjnrvzBFJNRVZ"&*.26:\naeimquyAEIMQUY]!%)-159\r'
)


@pytest.fixture(scope='module')
def text_loop():
    import tensorflow as tf
    import simharness as tff

    rng = np.random.default_rng(0)
    ids = [f'speaker_{i:03d}' for i in range(NUM_CLIENTS)]
    snippets = {
        c: np.array(
            [
                ''.join(rng.choice(VOCAB, size=int(rng.integers(250, 450)))).encode()
                for _ in range(int(rng.integers(4, 9)))
            ],
            dtype=object,
        )
        for c in ids
    }
    train = tff.simulation.datasets.ClientData.from_clients_and_tf_fn(
        ids,
        lambda c: tf.data.Dataset.from_tensor_slices(collections.OrderedDict(snippets=snippets[c])),
    )
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            keys=VOCAB, values=tf.constant(list(range(len(VOCAB))), dtype=tf.int64)
        ),
        default_value=0,
    )

    def to_ids(x):
        return table.lookup(tf.strings.bytes_split(tf.reshape(x['snippets'], [1])).values)

    def split_input_target(chunk):
        return (tf.map_fn(lambda x: x[:-1], chunk), tf.map_fn(lambda x: x[1:], chunk))

    def preprocess(ds):
        return (
            ds.map(to_ids)
            .unbatch()
            .batch(101, drop_remainder=True)
            .shuffle(100, seed=1)
            .batch(8, drop_remainder=True)
            .map(split_input_target)
        )

    spec = preprocess(train.create_tf_dataset_for_client(ids[0])).element_spec

    def model_fn():
        km = tf.keras.Sequential(
            [
                tf.keras.layers.InputLayer(shape=(None,), dtype=tf.int64),
                tf.keras.layers.Embedding(
                    86, 8, embeddings_initializer=(tf.keras.initializers.RandomUniform(seed=1))
                ),
                tf.keras.layers.GRU(
                    64,
                    return_sequences=True,
                    kernel_initializer=tf.keras.initializers.GlorotUniform(seed=2),
                    recurrent_initializer=tf.keras.initializers.Orthogonal(seed=3),
                ),
                tf.keras.layers.Dense(
                    86, kernel_initializer=tf.keras.initializers.GlorotUniform(seed=4)
                ),
            ]
        )
        return tff.learning.models.from_keras_model(
            km,
            input_spec=spec,
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[tf.keras.metrics.SparseCategoricalAccuracy()],
        )

    process = tff.learning.algorithms.build_weighted_fed_avg(
        model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.02)
    )
    return dict(tf=tf, train=train, preprocess=preprocess, process=process, ids=ids)


@pytest.mark.parametrize('case', ['fresh', 'reused'])
@pytest.mark.parametrize(
    'simharness_stack',
    ['thread', pytest.param('process-2', marks=pytest.mark.timing_only)],
    indirect=True,
)
def test_tff_text_loop(simharness_benchmark, simharness_stack, text_loop, case):
    from simharness.core.tf_sequences import keep_recipe

    loop = text_loop
    tf, train, preprocess, process = loop['tf'], loop['train'], loop['preprocess'], loop['process']
    bench = simharness_benchmark
    bench.group = GROUP
    state = process.initialize()
    ids = loop['ids']
    rng = np.random.default_rng(1)

    def build(cohort_ids):
        return [preprocess(train.create_tf_dataset_for_client(c)) for c in cohort_ids]

    fixed = build(ids[:COHORT])

    def fresh_round():
        return process.next(state, build(list(rng.choice(ids, COHORT, replace=False))))

    rounds = {'fresh': fresh_round, 'reused': lambda: process.next(state, fixed)}

    def check(out):
        copies = build(ids[:COHORT])
        for ds in copies:
            keep_recipe(ds, None)  # no template: each read rebuilds the dataset's graph
        a, b = process.next(state, fixed), process.next(state, copies)
        for x, y in zip(tf.nest.flatten(a.state), tf.nest.flatten(b.state)):
            assert np.asarray(x).tobytes() == np.asarray(y).tobytes()
        assert np.isfinite(float(out.metrics['client_work']['train']['loss']))

    check_then_time(bench, rounds[case], (), check, rounds=8, min_rounds=4)
    t = median_seconds(bench)
    if t is None:
        return
    bench.extra_info.update(case=case, cohort=COHORT, clients_per_second=COHORT / t)
