"""`IbltFactory`: string and value aggregation by IBLT (TFF's ``iblt/iblt_factory.py``).

Clients hold datasets of ``OrderedDict(key=string, value=int64[d])``; each
encodes an IBLT tensor, the sketches and value tables are summed by inner
factories (`SumFactory` by default), and the server decodes
``ServerOutput(output_strings, string_values, num_not_decoded)``. State is
``<sketch state, value state>``; measurements
``OrderedDict(num_not_decoded, sketch, value_tensor)``.
"""

from __future__ import annotations

import collections
from typing import Any, NamedTuple, Optional

import numpy as np
import tensorflow as tf

from simharness.aggregators import factory, sum_factory
from simharness.analytics import data_processing
from simharness.analytics.heavy_hitters.iblt import chunkers, iblt_tensor
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import federated_computation, tf_computation
from simharness.templates import AggregationProcess, MeasuredProcessOutput

__all__ = ['DATASET_KEY', 'DATASET_VALUE', 'IbltFactory', 'ServerOutput']

_CharacterEncoding = chunkers.CharacterEncoding

DATASET_KEY = 'key'
DATASET_VALUE = 'value'


class ServerOutput(NamedTuple):
    output_strings: Any
    string_values: Any
    num_not_decoded: Any


@tf.function
def _parse_client_dict(
    dataset: tf.data.Dataset, string_max_bytes: int
) -> tuple[tf.Tensor, tf.Tensor]:
    """``(strings, values)`` stacked from a dataset of ``{key, value}`` dicts.

    Fails (`tf.errors.InvalidArgumentError` on execution) on a string longer
    than `string_max_bytes`.
    """
    parsed = data_processing.to_stacked_tensor(dataset)
    input_strings = parsed[DATASET_KEY]
    string_values = parsed[DATASET_VALUE]
    tf.debugging.Assert(
        tf.math.logical_not(
            tf.math.reduce_any(tf.greater(tf.strings.length(input_strings), string_max_bytes))
        ),
        data=[
            f'IbltFactory: Input strings must be truncated to {string_max_bytes=}',
            input_strings,
        ],
        name='CHECK_STRING_LENGTH',
    )
    return input_strings, string_values


class IbltFactory(factory.UnweightedAggregationFactory):
    """Aggregates strings and their value tensors by IBLT.

    Args:
      capacity: the IBLT's capacity (>= 1).
      string_max_bytes: the longest string in bytes (>= 1).
      encoding: the strings' `CharacterEncoding`.
      repetitions: the number of IBLT repetitions (>= 3).
      seed: the hash functions' seed.
      sketch_agg_factory: sums the sketches (default `SumFactory`; a
        `SecureSumFactory` needs ``upper_bound_threshold >= 2**32 - 1``).
      value_tensor_agg_factory: sums the value tensors (default `SumFactory`).

    Raises:
      ValueError: an argument out of range.
    """

    def __init__(
        self,
        *,
        capacity: int,
        string_max_bytes: int,
        encoding: _CharacterEncoding = _CharacterEncoding.UTF8,
        repetitions: int,
        seed: int = 0,
        sketch_agg_factory: Optional[factory.UnweightedAggregationFactory] = None,
        value_tensor_agg_factory: Optional[factory.UnweightedAggregationFactory] = None,
    ) -> None:
        if capacity < 1:
            raise ValueError(f'capacity should be at least 1, got {capacity}')
        if string_max_bytes < 1:
            raise ValueError(f'string_max_bytes should be at least 1, got {string_max_bytes}')
        if repetitions < 3:
            raise ValueError(f'repetitions should be at least 3, got {repetitions}')
        self._sketch_agg_factory = (
            sum_factory.SumFactory() if sketch_agg_factory is None else sketch_agg_factory
        )
        self._value_tensor_agg_factory = (
            sum_factory.SumFactory()
            if value_tensor_agg_factory is None
            else value_tensor_agg_factory
        )
        self._capacity = capacity
        self._string_max_bytes = string_max_bytes
        self._encoding = encoding
        self._repetitions = repetitions
        self._seed = seed

    def create(self, value_type: T.SequenceType) -> AggregationProcess:
        """The aggregation process of client datasets of `value_type`.

        Args:
          value_type: a sequence type assignable to
            ``SequenceType(OrderedDict(key=str, value=int64[None]))``.

        Raises:
          ValueError: `value_type` is not of that kind.
        """
        expected_value_type = T.SequenceType(
            collections.OrderedDict(
                [(DATASET_KEY, np.str_), (DATASET_VALUE, T.TensorType(np.int64, [None]))]
            )
        )
        if not expected_value_type.is_assignable_from(value_type):
            raise ValueError(
                f'value_shape must be compatible with {expected_value_type}. '
                f'Found {value_type} instead.'
            )
        self._value_shape = tuple(value_type.element[DATASET_VALUE].shape)
        value_shape = self._value_shape

        @tf_computation(value_type)
        def encode_iblt(dataset):
            input_strings, string_values = _parse_client_dict(dataset, self._string_max_bytes)
            encoder = iblt_tensor.IbltTensorEncoder(
                capacity=self._capacity,
                string_max_bytes=self._string_max_bytes,
                encoding=self._encoding,
                repetitions=self._repetitions,
                value_shape=value_shape,
                seed=self._seed,
            )
            return encoder.compute_iblt(input_strings, string_values)

        @tf_computation(encode_iblt.type_signature.result)
        @tf.function
        def decode_iblt(sketch, value_tensor):
            decoder = iblt_tensor.IbltTensorDecoder(
                iblt=sketch,
                iblt_values=value_tensor,
                value_shape=value_shape,
                capacity=self._capacity,
                string_max_bytes=self._string_max_bytes,
                encoding=self._encoding,
                repetitions=self._repetitions,
                seed=self._seed,
            )
            output_strings, _, string_values, num_not_decoded = decoder.get_freq_estimates_tf()
            return output_strings, string_values, num_not_decoded

        sketch_process = self._sketch_agg_factory.create(encode_iblt.type_signature.result[0])
        value_process = self._value_tensor_agg_factory.create(encode_iblt.type_signature.result[1])

        @federated_computation()
        def init_fn():
            return intrinsics.federated_zip(
                (sketch_process.initialize(), value_process.initialize())
            )

        @federated_computation(
            init_fn.type_signature.result, T.FederatedType(value_type, T.CLIENTS)
        )
        def next_fn(state, dataset):
            sketch_state, value_tensor_state = state
            sketch, value_tensor = intrinsics.federated_map(encode_iblt, dataset)
            sketch_output = sketch_process.next(sketch_state, sketch)
            value_output = value_process.next(value_tensor_state, value_tensor)
            output_strings, string_values, num_not_decoded = intrinsics.federated_map(
                decode_iblt, (sketch_output.result, value_output.result)
            )
            result = intrinsics.federated_zip(
                ServerOutput(
                    output_strings=output_strings,
                    string_values=string_values,
                    num_not_decoded=num_not_decoded,
                )
            )
            updated_state = intrinsics.federated_zip((sketch_output.state, value_output.state))
            measurements = intrinsics.federated_zip(
                collections.OrderedDict(
                    num_not_decoded=num_not_decoded,
                    sketch=sketch_output.measurements,
                    value_tensor=value_output.measurements,
                )
            )
            return MeasuredProcessOutput(updated_state, result, measurements)

        return AggregationProcess(init_fn, next_fn)
