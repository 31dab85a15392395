"""TFF's `concat_factory` (``aggregators/concat.py``).

```
clients: <float32[N], float32[P,Q]> -> float32[N + P*Q]      (one dtype, ints or floats)
inner_agg_factory aggregates the vector;  server: split and reshape back
state and measurements: the inner process's
```
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np
import tensorflow as tf

from simharness.aggregators import factory
from simharness.aggregators import tensor_utils as tu
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import Computation, federated_computation, tf_computation
from simharness.errors import SimharnessTypeError
from simharness.templates import AggregationProcess, MeasuredProcessOutput

__all__ = ['concat_factory', 'create_concat_fns']


def create_concat_fns(value_type: Any) -> Tuple[Any, Any]:
    """The (concat, unconcat) tf_computations of `value_type` (one dtype, ints or floats).

    Raises:
      TypeError: `value_type` is not a tensor or a struct (with a Python
        container) of tensors of one integer or float dtype.
    """
    if not (
        isinstance(value_type, T.TensorType)
        or (
            isinstance(value_type, T.StructType)
            and value_type.container is not None
            and factory.is_structure_of_tensors(value_type)
        )
    ):
        raise SimharnessTypeError(
            'Expected `value_type` to be `TensorType` or a struct with a Python container '
            f'containing only `TensorType`. Found type: {value_type!r}',
            actual=value_type,
        )
    leaves = T.flatten_type(value_type)
    dtypes = {np.dtype(leaf.dtype) for leaf in leaves}
    if len(dtypes) != 1:
        raise SimharnessTypeError(
            'Component tensors of the structure should have the same '
            f'dtype. Found dtypes: {dtypes}.',
            actual=value_type,
        )
    if not (
        factory.is_structure_of_floats(value_type) or factory.is_structure_of_integers(value_type)
    ):
        raise SimharnessTypeError(
            f'Components of `value_type` must all be integers or floats. Found {value_type}.',
            actual=value_type,
        )
    sizes = [int(np.prod(leaf.shape)) if leaf.shape else 1 for leaf in leaves]

    @tf_computation(value_type)
    def concat(struct):
        return tf.concat([tf.reshape(x, [-1]) for x in tu.flatten(struct)], axis=0)

    template = tu.tensor_specs(value_type)

    @tf_computation(concat.type_signature.result)
    def unconcat(vector):
        parts, start = [], 0
        for leaf, n in zip(leaves, sizes):
            parts.append(tf.reshape(vector[start : start + n], leaf.shape))
            start += n
        return tu.pack_sequence_as(template, parts)

    return concat, unconcat


def _next_impl(
    state: Any,
    value: Any,
    concat: Computation,
    unconcat: Computation,
    inner: AggregationProcess,
    weight: Optional[Any] = None,
) -> MeasuredProcessOutput:
    vector = intrinsics.federated_map(concat, value)
    output = inner.next(state, vector) if weight is None else inner.next(state, vector, weight)
    return MeasuredProcessOutput(
        state=output.state,
        result=intrinsics.federated_map(unconcat, output.result),
        measurements=output.measurements,
    )


class _UnweightedConcatFactory(factory.UnweightedAggregationFactory):
    def __init__(self, inner: factory.UnweightedAggregationFactory):
        self._inner = inner

    def create(self, value_type: factory.ValueType) -> AggregationProcess:
        concat, unconcat = create_concat_fns(value_type)
        inner = self._inner.create(concat.type_signature.result)
        next_fn = federated_computation(
            lambda state, value: _next_impl(state, value, concat, unconcat, inner),
            inner.initialize.type_signature.result,
            T.FederatedType(value_type, T.CLIENTS),
        )
        return AggregationProcess(inner.initialize, next_fn)


class _WeightedConcatFactory(factory.WeightedAggregationFactory):
    def __init__(self, inner: factory.WeightedAggregationFactory):
        self._inner = inner

    def create(
        self, value_type: factory.ValueType, weight_type: factory.ValueType
    ) -> AggregationProcess:
        concat, unconcat = create_concat_fns(value_type)
        inner = self._inner.create(concat.type_signature.result, weight_type)
        next_fn = federated_computation(
            lambda state, value, weight: _next_impl(state, value, concat, unconcat, inner, weight),
            inner.initialize.type_signature.result,
            T.FederatedType(value_type, T.CLIENTS),
            T.FederatedType(weight_type, T.CLIENTS),
        )
        return AggregationProcess(inner.initialize, next_fn)


def concat_factory(inner_agg_factory: factory.AggregationFactory) -> factory.AggregationFactory:
    """A factory that flattens and concatenates a structure into one vector for the inner factory.

    E.g. ``<float32[N],float32[P,Q]>`` reaches `inner_agg_factory` as
    ``float32[N + P * Q]``; the result is split back. The weightedness is the
    inner factory's.

    Raises:
      TypeError: `inner_agg_factory` is not a factory.
    """
    factory.check_factory(
        inner_agg_factory,
        (factory.UnweightedAggregationFactory, factory.WeightedAggregationFactory),
        'inner_agg_factory',
    )
    if isinstance(inner_agg_factory, factory.WeightedAggregationFactory):
        return _WeightedConcatFactory(inner_agg_factory)
    return _UnweightedConcatFactory(inner_agg_factory)
