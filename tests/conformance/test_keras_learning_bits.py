"""``tff.learning`` FedAvg over a Keras ``model_fn``: compiled, equal to the variable path, same bits
on the stacks.

A model of ``from_keras_model`` trains without reading its variables
(`KerasModel.stateless_forward_pass`: Keras 3's ``stateless_call`` and
``stateless_update_state``; FedAvg's and FedProx's client work), so the
variables leave the traced graph
(`core.tf_serialization._drop_unread_variables`) and the XLA rule
(`core.xla`) compiles the lowered client update like any other. Checked here:
the rule's decision, the results against the variable path (the same model
through `VariableModel.forward_pass` and its variables, TFF's way) with a
dropout layer (its seed state is a non-trainable variable) and an L2
regularizer (``model.losses``), and the bits on the local and process stacks
against one client per thread (the gRPC and Ray workers run the same worker
service; `test_xla_bits.py` checks compiled blocks on all five). Seven
clients of 8 to 12 rows in batches of 4: full batches (compiled) and a partial
last batch (graph runtime) in one round; and seven of 37 to 52 rows, as real
clients are (10 to 13 batches: one `tf.while_loop` shared by every length).
"""

from __future__ import annotations


import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
import simharness.stacks
from simharness.core import building_blocks as bb
from simharness.core.sequences import TensorBatches
from simharness.executors.leaf.embedded_function import EmbeddedFunction
from simharness.learning.models import keras_utils

ROWS = [8, 8, 10, 12, 8, 8, 12]
BATCH = 4
SPEC = (tf.TensorSpec([None, 256], tf.float32), tf.TensorSpec([None], tf.int32))


def _model_fn(dropout: bool = False):
    def model_fn():
        layers = [
            tf.keras.layers.Input((256,)),
            tf.keras.layers.Dense(
                256,
                activation='relu',
                kernel_initializer=tf.keras.initializers.GlorotUniform(3),
                kernel_regularizer=tf.keras.regularizers.L2(1e-3),
            ),
        ]
        if dropout:
            layers.append(tf.keras.layers.Dropout(0.25, seed=5))
        layers.append(
            tf.keras.layers.Dense(10, kernel_initializer=tf.keras.initializers.GlorotUniform(4))
        )
        return tff.learning.models.from_keras_model(
            tf.keras.Sequential(layers),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            input_spec=SPEC,
            metrics=[tf.keras.metrics.SparseCategoricalAccuracy()],
        )

    return model_fn


def _process(dropout: bool = False, algorithm: str = 'fed_avg'):
    if algorithm == 'fed_prox':
        return tff.learning.algorithms.build_weighted_fed_prox(
            _model_fn(dropout),
            proximal_strength=0.5,
            client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
            server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
        )
    return tff.learning.algorithms.build_weighted_fed_avg(
        _model_fn(dropout),
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
    )


#: Clients of longer loops than `sequence_lowering.UNROLL_LIMIT` (10 to 13 batches), each of
#: its own number of rows: they share one lowered function (a `tf.while_loop`).
RAGGED_ROWS = [37, 50, 41, 45, 52, 38, 44]


def _datasets(rows=ROWS):
    rng = np.random.default_rng(17)
    return [
        tf.data.Dataset.from_tensor_slices(
            (rng.normal(size=(r, 256)).astype(np.float32), rng.integers(0, 10, r).astype(np.int32))
        ).batch(BATCH)
        for r in rows
    ]


@pytest.fixture(scope='module')
def process():
    return _process()


def _leaves(x):
    return [np.asarray(v) for v in tf.nest.flatten(x)]


def _round(process, rows=ROWS):
    state, metrics = process.next(process.initialize(), _datasets(rows))
    return _leaves(process.get_model_weights(state)) + _leaves(metrics)


def _client_update(process) -> bb.CompiledComputation:
    found = []

    def walk(c):
        if isinstance(c, bb.CompiledComputation) and c.name == 'client_update_computation':
            found.append(c)
        for child in c.children():
            walk(child)

    walk(process.next.to_building_block())
    assert len(found) == 1, found
    return found[0]


def _assert_no_variable(comp: bb.CompiledComputation) -> None:
    graph = tf.compat.v1.GraphDef.FromString(comp.graph.graph_def)
    ops = {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}
    assert not ops & {'VarHandleOp', 'ReadVariableOp', 'AssignVariableOp'}, ops


def test_fed_prox_s_keras_client_update_has_no_variable():
    _assert_no_variable(_client_update(_process(algorithm='fed_prox')))


def test_the_keras_client_update_has_no_variable_and_compiles(process):
    comp = _client_update(process)
    _assert_no_variable(comp)
    fn = EmbeddedFunction(comp)
    element = comp.type_signature.parameter[-1].element
    seq_index = fn.sequence_params[0]
    lowered = fn.lowered(
        {
            seq_index: TensorBatches(
                [tf.zeros([8, 256]), tf.zeros([8], tf.int32)], BATCH, False, element
            )
        }
    )
    assert lowered.xla.compiled, lowered.xla
    partial = fn.lowered(
        {
            seq_index: TensorBatches(
                [tf.zeros([10, 256]), tf.zeros([10], tf.int32)], BATCH, False, element
            )
        }
    )
    assert not partial.xla.compiled
    # a block of clients gives each client the bits of its own compiled call
    rng = np.random.default_rng(2)
    leaves = tff.to_type(lowered.type_signature.parameter)
    shared = [
        tf.constant(rng.normal(size=t.shape).astype(np.float32) * 0.05) for t in list(leaves)[:-2]
    ]
    xs = tf.constant(rng.normal(size=(3, 8, 256)).astype(np.float32))
    ys = tf.constant(rng.integers(0, 10, (3, 8)).astype(np.int32))
    block = lowered.call_batched(tuple([True] * len(shared) + [False, False]), shared, [xs, ys], 3)
    for i in range(3):
        single = lowered.call_flat(shared + [xs[i], ys[i]])
        assert [b[i].numpy().tobytes() for b in block] == [s.numpy().tobytes() for s in single]


@pytest.mark.parametrize('algorithm', ['fed_avg', 'fed_prox'])
def test_the_stateless_path_computes_what_the_variables_compute(monkeypatch, algorithm):
    """Dropout and a regularizer (FedAvg's client work and FedProx's proximal one), in the graph
    runtime (`jit_compile=False`), where both paths run the same kernels."""

    def run():
        process = _process(dropout=True, algorithm=algorithm)
        with tff.execution_context(tff.stacks.local_executor_factory(), jit_compile=False):
            return _round(process)

    stateless = run()
    monkeypatch.setattr(keras_utils.KerasModel, 'runs_stateless', lambda self: False)
    with_variables = run()
    assert len(stateless) == len(with_variables)
    for a, b in zip(stateless, with_variables):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


_ONE_CLIENT_PER_THREAD: dict = {}


@pytest.mark.parametrize('rows', [ROWS, RAGGED_ROWS], ids=['short', 'ragged'])
@pytest.mark.parametrize('stack_name', ['local', 'process-2-cpw3'])
def test_a_keras_round_gives_the_same_bits_on_every_layout(
    stack_name, stack_registry, process, rows
):
    with stack_registry.open(stack_name):
        got = _round(process, rows)
    key = tuple(rows)
    if key not in _ONE_CLIENT_PER_THREAD:
        factory = stack_registry.make_factory('thread-1')
        try:
            with tff.execution_context(factory):
                _ONE_CLIENT_PER_THREAD[key] = _round(process, rows)
        finally:
            factory.close()
    want = _ONE_CLIENT_PER_THREAD[key]
    assert [a.tobytes() for a in got] == [b.tobytes() for b in want]
    assert all(np.all(np.isfinite(a)) for a in got if a.dtype.kind == 'f')
