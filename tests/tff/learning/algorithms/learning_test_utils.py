"""Helpers of the learning algorithm tests: client datasets, intrinsics used, the lowering check."""

from __future__ import annotations

import collections
import importlib
import importlib.util
from typing import Any, List, Set

import numpy as np
import pytest
import tensorflow as tf

from simharness.core import building_blocks as bb
from simharness.core import types as T
from simharness.executors.leaf import sequence_lowering

#: Skips a case that needs `simharness.aggregators.encoded` (quantization) until it exists.
NEEDS_ENCODED = pytest.mark.skipif(
    importlib.util.find_spec('simharness.aggregators.encoded') is None,
    reason='simharness.aggregators.encoded (EncodedSumFactory) is not there yet',
)

#: Skips a case that needs D's `secure_sum_then_finalize` until it exists.
NEEDS_SECURE_METRICS = pytest.mark.skipif(
    not hasattr(
        importlib.import_module('simharness.learning.metrics.aggregator'),
        'secure_sum_then_finalize',
    ),
    reason='simharness.learning.metrics.aggregator.secure_sum_then_finalize is not there yet',
)

#: Intrinsics that reveal client values to the server in the clear (TFF's static_assert list).
UNSECURE_AGGREGATIONS = frozenset(
    {
        'federated_aggregate',
        'federated_mean',
        'federated_sum',
        'federated_weighted_mean',
        'federated_collect',
    }
)


def linear_datasets(
    num_clients: int = 2, sizes=(3, 5), batch_size: int = 2, feature_dims: int = 2
) -> List[tf.data.Dataset]:
    """Datasets of ``OrderedDict(x, y)`` for `LinearRegression` (y = sum(x) + 1), batched."""
    out = []
    for k in range(num_clients):
        n = sizes[k % len(sizes)]
        x = np.arange(n * feature_dims, dtype=np.float32).reshape(n, feature_dims) / (10.0 + k)
        y = x.sum(axis=1, keepdims=True) + 1.0
        out.append(
            tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y)).batch(batch_size)
        )
    return out


def tuple_datasets(datasets: List[tf.data.Dataset]) -> List[tf.data.Dataset]:
    """The same batches as ``(x, y)`` tuples (a `FunctionalModel`'s input)."""
    return [d.map(lambda b: (b['x'], b['y'])) for d in datasets]


def _children(block: Any) -> List[Any]:
    out = []
    for name in ('fn', 'arg', 'result', 'source', 'locals', 'elements', '_elements', '_locals'):
        v = getattr(block, name, None)
        for x in v if isinstance(v, (list, tuple)) else [v]:
            if isinstance(x, tuple) and len(x) == 2:
                x = x[1]
            if isinstance(x, bb.ComputationBuildingBlock):
                out.append(x)
    return out


def building_blocks(comp: Any) -> List[Any]:
    """Every building block inside `comp` (a computation), once each."""
    seen: Set[int] = set()
    out: List[Any] = []
    stack = [comp.to_building_block()]
    while stack:
        b = stack.pop()
        if id(b) in seen:
            continue
        seen.add(id(b))
        out.append(b)
        stack.extend(_children(b))
    return out


def intrinsic_uris(comp: Any) -> Set[str]:
    return {b.uri for b in building_blocks(comp) if isinstance(b, bb.Intrinsic)}


def assert_not_contains_unsecure_aggregation(comp: Any) -> None:
    """As TFF's ``static_assert.assert_not_contains_unsecure_aggregation``."""
    found = intrinsic_uris(comp) & UNSECURE_AGGREGATIONS
    assert not found, f'the computation aggregates in the clear: {sorted(found)}'


def _flat_params(t: Any) -> List[Any]:
    if isinstance(t, T.StructType):
        return [leaf for e in t for leaf in _flat_params(e)]
    return [t]


def assert_client_loops_lowered(process: Any, batch_size: int = 2) -> int:
    """Every client computation over datasets lowers to tensor loops (no tf.data op left).

    Returns:
      How many such computations there are (at least one).
    """
    comps = [
        b
        for b in building_blocks(process.next)
        if isinstance(b, bb.CompiledComputation)
        and any(isinstance(t, T.SequenceType) for t in _flat_params(b.type_signature.parameter))
    ]
    assert comps, 'no client computation takes a dataset'
    for comp in comps:
        graph = comp.graph
        gd = tf.compat.v1.GraphDef()
        gd.ParseFromString(graph.graph_def)
        for i, t in enumerate(_flat_params(comp.type_signature.parameter)):
            if not isinstance(t, T.SequenceType):
                continue
            dtypes = [tf.as_dtype(leaf.dtype) for leaf in _flat_params(t.element)]
            spec = sequence_lowering.SourceSpec(dtypes, batch_size, False)
            gd, _ = sequence_lowering.lower_graph(
                gd, graph.input_names[i], spec, graph.output_names
            )
        ops = {n.op for n in gd.node} | {n.op for f in gd.library.function for n in f.node_def}
        left = sorted(op for op in ops if 'Dataset' in op or 'Iterator' in op)
        assert not left, f'tf.data ops left after lowering: {left}'
    return len(comps)


def flat_arrays(value: Any) -> List[np.ndarray]:
    """The leaves of a (nested) result as numpy arrays."""
    if isinstance(value, dict):
        return [a for v in value.values() for a in flat_arrays(v)]
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in flat_arrays(v)]
    return [np.asarray(value)]


def assert_same_bits_on_stacks(stack_registry: Any, run: Any, stacks=('local', 'process-2')) -> Any:
    """Runs ``run()`` on each stack; every leaf of the results is bit-identical. Returns one."""
    results = []
    for name in stacks:
        with stack_registry.open(name):
            results.append(run())
    first = flat_arrays(results[0])
    for name, other in zip(stacks[1:], results[1:]):
        leaves = flat_arrays(other)
        assert len(leaves) == len(first)
        for a, b in zip(first, leaves):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (stacks[0], name, a, b)
    return results[0]


def build_functional_linear_regression(feature_dim: int = 2, has_unconnected: bool = False) -> Any:
    """TFF's ``test_models.build_functional_linear_regression``: ``x @ kernel + bias``.

    Loss: the mean squared error; metrics ``loss`` (sum of squares over
    examples, finalized as the mean) and ``num_examples``.
    """
    import simharness as tff  # pylint: disable=import-outside-toplevel

    n_trainable = 3 if has_unconnected else 2
    initial_trainable = (
        np.zeros([feature_dim, 1], np.float32),
        *[np.zeros([1], np.float32)] * (n_trainable - 1),
    )

    @tf.function
    def predict_on_batch(weights, x, training=True):
        del training
        kernel, bias = weights[0][0], weights[0][1]
        return x @ kernel + bias

    def loss(output, label, sample_weight=None):
        del sample_weight
        return tf.math.reduce_mean(tf.math.pow(output - label, 2.0))

    @tf.function
    def initialize_metrics():
        return collections.OrderedDict(
            loss=tf.constant(0.0, tf.float32), num_examples=tf.constant(0, tf.int32)
        )

    @tf.function
    def update_metrics_state(state, labels, batch_output, sample_weight=None):
        del sample_weight
        squares = tf.math.reduce_sum(tf.math.pow(batch_output.predictions - labels, 2.0))
        return collections.OrderedDict(
            loss=state['loss'] + squares, num_examples=state['num_examples'] + tf.shape(labels)[0]
        )

    @tf.function
    def finalize_metrics(state):
        return collections.OrderedDict(
            loss=tf.math.divide_no_nan(state['loss'], tf.cast(state['num_examples'], tf.float32)),
            num_examples=state['num_examples'],
        )

    return tff.learning.models.FunctionalModel(
        initial_weights=(initial_trainable, ()),
        predict_on_batch_fn=predict_on_batch,
        loss_fn=loss,
        metrics_fns=(initialize_metrics, update_metrics_state, finalize_metrics),
        input_spec=(
            tf.TensorSpec([None, feature_dim], tf.float32),
            tf.TensorSpec([None, 1], tf.float32),
        ),
    )
