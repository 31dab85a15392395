"""TFF programs written from memory give what TFF 0.87 gave.

Each program below was written as a TFF user writes one (TFF 0.87's names), run once under
TFF 0.87.0 itself (TF 2.14.1, its default C++ context) and once under simharness (the
import renamed), on the same machine (AMD EPYC, AVX2 + FMA). What TFF printed is in
``tff087_programs.json`` (``python tests/conformance/test_tff087_programs.py`` in a TFF 0.87
environment prints it again). They cover what the conformance files do not take together: FedProx
with clipping and a server Adam, `build_fed_eval` on weights set from training,
`run_training_process` with a sampling function, evaluation every other round and a CSV
release manager, a hand-written `federated_aggregate` algorithm in an
`IterativeProcess`, FedSGD, unweighted FedAvg of a functional model with Adagrad and
Yogi, and unweighted FedAvg of a Keras model with TFF's robust aggregator (its adaptive
zeroing and clipping norms and counts, round by round), seeded shuffles, evaluation of
every client and a hand-written computation's `federated_sum` / `federated_max`, and Mime
Lite composed with a dataset computation that makes each client's data from its id in TF,
its weights halved through `get_model_weights` / `set_model_weights` halfway and the final
weights assigned to a Keras model (`ModelWeights.assign_weights_to`).

The values agree to the last printed digit (7-9) on this machine and a few differ in the
last bit of a weight (TF 2.21 under simharness, TF 2.14 under TFF; Keras 3 against
tf_keras): they are compared to a relative 1e-5, which any error in what a program
computes (a clipping norm, a proximal term, a weighting, an evaluation on the wrong
weights) exceeds by far; counts and keys are compared exactly.
"""

from __future__ import annotations

import collections
import json
import os
import tempfile

import numpy as np

OD = collections.OrderedDict


def _classifier(tff, tf, keras_model, input_spec):
    """`keras_model` (logits) as a `tff.learning` model: cross-entropy, accuracy."""
    return tff.learning.models.from_keras_model(
        keras_model,
        input_spec=input_spec,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy()],
    )


def _fedprox_program(tff, tf) -> dict:
    rng = np.random.default_rng(42)
    raw = OD()
    for i in range(12):
        n = int(rng.integers(15, 40))
        raw[f'client_{i}'] = OD(
            pixels=rng.random((n, 8, 8, 1)).astype(np.float32),
            label=rng.integers(0, 5, n).astype(np.int64),
        )
    cd = tff.simulation.datasets.TestClientData(raw)
    train, test = tff.simulation.datasets.ClientData.train_test_client_split(cd, 3, seed=7)
    train = train.preprocess(
        lambda ds: ds.shuffle(50, seed=3).batch(8).map(lambda e: (e['pixels'], e['label']))
    )
    test = test.preprocess(lambda ds: ds.batch(16).map(lambda e: (e['pixels'], e['label'])))
    r0 = np.random.default_rng(0)
    w0 = [r0.normal(0, 0.2, s).astype(np.float32) for s in [(3, 3, 1, 4), (4,), (144, 5), (5,)]]
    const = tf.keras.initializers.Constant

    def model_fn():
        km = tf.keras.Sequential(
            [
                tf.keras.Input(shape=(8, 8, 1)),
                tf.keras.layers.Conv2D(
                    4,
                    3,
                    activation='relu',
                    kernel_initializer=const(w0[0]),
                    bias_initializer=const(w0[1]),
                ),
                tf.keras.layers.Flatten(),
                tf.keras.layers.Dense(
                    5, kernel_initializer=const(w0[2]), bias_initializer=const(w0[3])
                ),
            ]
        )
        return _classifier(tff, tf, km, train.element_type_structure)

    proc = tff.learning.algorithms.build_weighted_fed_prox(
        model_fn,
        proximal_strength=0.1,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.05, momentum=0.9),
        server_optimizer_fn=tff.learning.optimizers.build_adam(0.01),
        model_aggregator=tff.aggregators.clipping_factory(2.0, tff.aggregators.MeanFactory()),
    )
    ev = tff.learning.algorithms.build_fed_eval(model_fn)
    state = proc.initialize()
    ids = sorted(train.client_ids)
    out: dict = OD(test_ids=sorted(test.client_ids), rounds=[])
    for r in range(4):
        cohort = ids[r % 3 * 3 : r % 3 * 3 + 4]
        result = proc.next(state, [train.create_tf_dataset_for_client(c) for c in cohort])
        state = result.state
        m = result.metrics['client_work']['train']
        out['rounds'].append(
            OD(
                loss=float(m['loss']),
                accuracy=float(m['sparse_categorical_accuracy']),
                aggregator=sorted(result.metrics['aggregator']),
                clipped=int(result.metrics['aggregator']['clipped_count']),
            )
        )
    es = ev.set_model_weights(ev.initialize(), proc.get_model_weights(state))
    eo = ev.next(es, [test.create_tf_dataset_for_client(c) for c in sorted(test.client_ids)])
    out['eval'] = {
        k: float(v) for k, v in eo.metrics['client_work']['eval']['current_round_metrics'].items()
    }
    out['weights'] = [
        np.asarray(w).ravel()[:6].tolist() for w in proc.get_model_weights(state).trainable
    ]
    return out


def _aggregate_program(tff, tf) -> dict:
    comp = tff.tensorflow.computation
    point = tff.StructType([('x', np.float32), ('w', np.float32)])

    @comp
    def zero():
        return OD(s=tf.constant(0.0), w=tf.constant(0.0), n=tf.constant(0, tf.int32))

    acc_t = zero.type_signature.result

    @comp(acc_t, point)
    def accumulate(acc, p):
        return OD(s=acc['s'] + p['x'] * p['w'], w=acc['w'] + p['w'], n=acc['n'] + 1)

    @comp(acc_t, acc_t)
    def merge(a, b):
        return OD(s=a['s'] + b['s'], w=a['w'] + b['w'], n=a['n'] + b['n'])

    @comp(acc_t)
    def report(a):
        return OD(mean=a['s'] / a['w'], count=a['n'])

    @comp(np.float32, tff.SequenceType(np.float32))
    def local(shift, ds):
        total = ds.reduce(tf.constant(0.0), lambda a, b: a + b)
        n = ds.reduce(tf.constant(0.0), lambda a, b: a + 1.0)
        return OD(x=total / n + shift, w=n)

    @comp(np.float32, report.type_signature.result)
    def update(s, r):
        return s + r['mean'] * 0.1

    server_t = tff.FederatedType(np.float32, tff.SERVER)
    data_t = tff.FederatedType(tff.SequenceType(np.float32), tff.CLIENTS)

    @tff.federated_computation
    def init():
        return tff.federated_value(0.5, tff.SERVER)

    @tff.federated_computation(server_t, data_t)
    def next_fn(state, data):
        points = tff.federated_map(local, (tff.federated_broadcast(state), data))
        agg = tff.federated_aggregate(points, zero(), accumulate, merge, report)
        count = tff.federated_sum(tff.federated_value(1, tff.CLIENTS))
        return tff.federated_map(update, (state, agg)), agg, count

    proc = tff.templates.IterativeProcess(init, next_fn)
    out: dict = OD(signature=str(proc.next.type_signature), rounds=[])
    state = proc.initialize()
    data = [list(np.arange(k + 2, dtype=np.float32) * 0.3) for k in range(5)]
    for _ in range(3):
        state, agg, count = proc.next(state, data)
        out['rounds'].append(
            OD(state=float(state), mean=float(agg['mean']), n=int(agg['count']), count=int(count))
        )
    return out


def _fedsgd_and_functional_program(tff, tf) -> dict:
    rng = np.random.default_rng(1)
    xs = [rng.normal(size=(12, 3)).astype(np.float32) for _ in range(4)]
    ys = [(x @ np.array([1.0, -2.0, 0.5], np.float32) + 0.3).reshape(-1, 1) for x in xs]
    data = [tf.data.Dataset.from_tensor_slices((x, y)).batch(5) for x, y in zip(xs, ys)]
    const = tf.keras.initializers.Constant
    kernel = np.array([[0.1], [0.2], [0.3]], np.float32)

    def keras_model():
        return tf.keras.Sequential(
            [
                tf.keras.Input((3,)),
                tf.keras.layers.Dense(
                    1, kernel_initializer=const(kernel), bias_initializer=const(0.05)
                ),
            ]
        )

    spec = data[0].element_spec

    def model_fn():
        return tff.learning.models.from_keras_model(
            keras_model(), input_spec=spec, loss=tf.keras.losses.MeanSquaredError()
        )

    out: dict = OD(fedsgd=[], unweighted=[])
    sgd = tff.learning.algorithms.build_fed_sgd(
        model_fn, server_optimizer_fn=tff.learning.optimizers.build_sgdm(0.5)
    )
    s = sgd.initialize()
    for _ in range(3):
        o = sgd.next(s, data)
        s = o.state
        out['fedsgd'].append(float(o.metrics['client_work']['train']['loss']))
    fm = tff.learning.models.functional_model_from_keras(
        keras_model(),
        loss_fn=tf.keras.losses.MeanSquaredError(),
        input_spec=spec,
        metrics_constructor=OD(mae=tf.keras.metrics.MeanAbsoluteError),
    )
    ua = tff.learning.algorithms.build_unweighted_fed_avg(
        fm,
        client_optimizer_fn=tff.learning.optimizers.build_adagrad(0.1),
        server_optimizer_fn=tff.learning.optimizers.build_yogi(0.05),
    )
    s = ua.initialize()
    for r in range(3):
        o = ua.next(s, data[r:] + data[:r])
        s = o.state
        out['unweighted'].append(float(o.metrics['client_work']['train']['mae']))
    out['weights'] = [np.asarray(w).ravel().tolist() for w in ua.get_model_weights(s).trainable]
    return out


def _training_loop_program(tff, tf) -> dict:
    rng = np.random.default_rng(5)
    raw = OD()
    for i in range(20):
        x = rng.normal(size=(int(rng.integers(5, 30)), 4)).astype(np.float32)
        raw[f'u{i}'] = OD(x=x, y=(x[:, 0] > 0).astype(np.int32))
    cd = tff.simulation.datasets.TestClientData(raw).preprocess(
        lambda ds: ds.batch(4).map(lambda e: (e['x'], e['y']))
    )
    kernel = np.linspace(-0.5, 0.5, 8, dtype=np.float32).reshape(4, 2)

    def model_fn():
        km = tf.keras.Sequential(
            [
                tf.keras.Input((4,)),
                tf.keras.layers.Dense(
                    2,
                    kernel_initializer=tf.keras.initializers.Constant(kernel),
                    bias_initializer='zeros',
                ),
            ]
        )
        return _classifier(tff, tf, km, cd.element_type_structure)

    proc = tff.learning.algorithms.build_weighted_fed_avg(
        model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0, momentum=0.5),
    )
    ev = tff.learning.algorithms.build_fed_eval(model_fn)
    ids = cd.client_ids
    sample = tff.simulation.build_uniform_sampling_fn(ids, random_seed=11)

    def evaluate(state, round_num):
        es = ev.set_model_weights(ev.initialize(), proc.get_model_weights(state))
        out = ev.next(es, [cd.create_tf_dataset_for_client(c) for c in ids[:6]])
        return out.metrics['client_work']['eval']['current_round_metrics']

    with tempfile.TemporaryDirectory() as d:
        csv = tff.program.CSVFileReleaseManager(os.path.join(d, 'metrics.csv'))
        state = tff.simulation.run_training_process(
            training_process=proc,
            training_selection_fn=lambda r: [
                cd.create_tf_dataset_for_client(c) for c in sample(r, 5)
            ],
            total_rounds=4,
            evaluation_fn=evaluate,
            evaluation_selection_fn=lambda r: r,
            rounds_per_evaluation=2,
            program_state_manager=tff.program.FileProgramStateManager(os.path.join(d, 'state')),
            metrics_managers=[csv],
        )
        with open(os.path.join(d, 'metrics.csv')) as f:
            lines = f.read().splitlines()
    header = lines[0].split(',')
    keep = [
        'key',
        'evaluation/loss',
        'evaluation/num_examples',
        'client_work/train/loss',
        'client_work/train/num_examples',
    ]
    rows = [dict(zip(header, line.split(','))) for line in lines[1:]]
    return OD(
        header=header,
        rows=[[float(r[k]) if r.get(k) else None for k in keep] for r in rows],
        weights=[np.asarray(w).ravel().tolist() for w in proc.get_model_weights(state).trainable],
    )


def _robust_aggregator_program(tff, tf) -> dict:
    rng = np.random.default_rng(2)
    raw = OD()
    for i in range(8):
        n = 10 + 3 * i
        raw[f'c{i}'] = OD(
            x=rng.normal(size=(n, 6)).astype(np.float32),
            y=rng.integers(0, 4, size=(n, 1)).astype(np.int64),
        )
    cd = tff.simulation.datasets.TestClientData(raw).preprocess(
        lambda ds: ds.repeat(2).shuffle(16, seed=3).batch(5).map(lambda e: (e['x'], e['y']))
    )
    glorot = tf.keras.initializers.GlorotUniform

    def model_fn():
        km = tf.keras.Sequential(
            [
                tf.keras.Input(shape=(6,)),
                tf.keras.layers.Dense(8, activation='relu', kernel_initializer=glorot(seed=1)),
                tf.keras.layers.Dense(4, kernel_initializer=glorot(seed=2)),
            ]
        )
        return tff.learning.models.from_keras_model(
            km,
            input_spec=cd.element_type_structure,
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[
                tf.keras.metrics.SparseCategoricalAccuracy(),
                tf.keras.metrics.MeanSquaredError(),
            ],
        )

    proc = tff.learning.algorithms.build_unweighted_fed_avg(
        model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.2, momentum=0.9),
        server_optimizer_fn=tff.learning.optimizers.build_yogi(0.05),
        model_aggregator=tff.learning.robust_aggregator(
            zeroing=True, clipping=True, weighted=False
        ),
    )
    sample = tff.simulation.build_uniform_sampling_fn(cd.client_ids, random_seed=7)
    state = proc.initialize()
    out: dict = OD(rounds=[])
    for r in range(4):
        ids = sample(r, 4)
        o = proc.next(state, [cd.create_tf_dataset_for_client(c) for c in ids])
        state = o.state
        train = o.metrics['client_work']['train']
        agg = o.metrics['aggregator']
        out['rounds'].append(
            [
                list(ids),
                [float(train[k]) for k in sorted(train)],
                [
                    float(agg['zeroing_norm']),
                    int(agg['zeroed_count']),
                    float(agg['zeroing']['clipping_norm']),
                    int(agg['zeroing']['clipped_count']),
                ],
            ]
        )
    ev = tff.learning.algorithms.build_fed_eval(model_fn)
    es = ev.set_model_weights(ev.initialize(), proc.get_model_weights(state))
    metrics = ev.next(es, [cd.create_tf_dataset_for_client(c) for c in cd.client_ids]).metrics
    current = metrics['client_work']['eval']['current_round_metrics']
    out['evaluation'] = OD((k, float(current[k])) for k in sorted(current))
    element = (tff.TensorType(np.float32, [None, 6]), tff.TensorType(np.int64, [None, 1]))

    @tff.tensorflow.computation(tff.SequenceType(element))
    def count(ds):
        return ds.reduce(np.int32(0), lambda n, e: n + tf.shape(e[0])[0])

    @tff.federated_computation(tff.FederatedType(tff.SequenceType(element), tff.CLIENTS))
    def total_and_most(datasets):
        counts = tff.federated_map(count, datasets)
        return tff.federated_sum(counts), tff.federated_max(counts)

    datasets = [cd.create_tf_dataset_for_client(c) for c in cd.client_ids[:5]]
    out['counts'] = [int(v) for v in total_and_most(datasets)]
    return out


def _mime_lite_by_id_program(tff, tf) -> dict:
    # Client datasets made in TF from the client's id, composed with the learning process
    @tff.tensorflow.computation(tf.string)
    def make_dataset(client_id):
        k = tf.strings.to_number(client_id, out_type=tf.int64)

        def row(i):
            x = tf.stack(
                [
                    tf.cast((i * 7 + k * 3) % 11, tf.float32) / 10.0,
                    tf.cast((i * 5 + k) % 13, tf.float32) / 12.0,
                    tf.cast((i + k * k) % 7, tf.float32) / 6.0,
                ]
            )
            return OD(x=x, y=tf.cast((i + k) % 3, tf.int32))

        return tf.data.Dataset.range(12 + 3 * k).map(row).batch(4)

    def keras_model():
        return tf.keras.Sequential(
            [
                tf.keras.Input(shape=(3,)),
                tf.keras.layers.Dense(
                    8,
                    activation='relu',
                    kernel_initializer=tf.keras.initializers.GlorotUniform(seed=5),
                ),
                tf.keras.layers.Dense(3, kernel_initializer='zeros'),
            ]
        )

    def model_fn():
        return _classifier(
            tff,
            tf,
            keras_model(),
            OD(x=tf.TensorSpec([None, 3], tf.float32), y=tf.TensorSpec([None], tf.int32)),
        )

    mime = tff.learning.algorithms.build_weighted_mime_lite(
        model_fn,
        base_optimizer=tff.learning.optimizers.build_sgdm(learning_rate=0.1, momentum=0.9),
        server_optimizer=tff.learning.optimizers.build_sgdm(learning_rate=1.0),
    )
    process = tff.simulation.compose_dataset_computation_with_learning_process(make_dataset, mime)
    state = process.initialize()
    out: dict = OD(rounds=[])
    for r, ids in enumerate([['0', '3', '5'], ['1', '2', '7', '4'], ['6', '0', '2'], ['5', '1']]):
        o = process.next(state, ids)
        state = o.state
        train = o.metrics['client_work']['train']
        out['rounds'].append([float(train[k]) for k in sorted(train)])
        if r == 1:  # a warm start halfway: the weights halved and set in the state
            w = process.get_model_weights(state)
            halved = tff.learning.models.ModelWeights(
                trainable=[np.asarray(v) * 0.5 for v in w.trainable],
                non_trainable=list(w.non_trainable),
            )
            state = process.set_model_weights(state, halved)
    model = keras_model()
    process.get_model_weights(state).assign_weights_to(model)
    out['logits'] = [
        float(v) for v in np.ravel(model(np.array([[0.1, 0.2, 0.3], [0.9, 0.5, 0.0]], np.float32)))
    ]
    return out


def run_programs(tff, tf) -> dict:
    """The six programs' results, as plain data."""
    return OD(
        fedprox=_fedprox_program(tff, tf),
        aggregate=_aggregate_program(tff, tf),
        fedsgd_functional=_fedsgd_and_functional_program(tff, tf),
        training_loop=_training_loop_program(tff, tf),
        robust_aggregator=_robust_aggregator_program(tff, tf),
        mime_lite_by_id=_mime_lite_by_id_program(tff, tf),
    )


def _assert_close(got, want, path='') -> None:
    if isinstance(want, dict):
        assert sorted(got) == sorted(want), path
        for k in want:
            _assert_close(got[k], want[k], f'{path}/{k}')
    elif isinstance(want, list):
        assert len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_close(g, w, f'{path}[{i}]')
    elif isinstance(want, float):
        assert isinstance(got, float) and np.isclose(got, want, rtol=1e-5, atol=1e-7), (
            f'{path}: {got!r}, TFF 0.87: {want!r}'
        )
    else:
        assert got == want, f'{path}: {got!r}, TFF 0.87: {want!r}'


def test_programs_written_from_memory_give_tff_s_results():
    import tensorflow as tf

    import simharness as tff

    with open(os.path.join(os.path.dirname(__file__), 'tff087_programs.json')) as f:
        recorded = json.load(f)
    del recorded['how_recorded']
    _assert_close(json.loads(json.dumps(run_programs(tff, tf))), recorded)


if __name__ == '__main__':  # under TFF 0.87: prints what tff087_programs.json holds
    import tensorflow as tf
    import tensorflow_federated as tff

    print(json.dumps(run_programs(tff, tf), indent=1))
