"""TFF's `EncodedSumFactory` (``aggregators/encoded.py``).

```
state: per value leaf, its encoder's state (here always ())    measurements: ()
server: get_params(state) -> encode / decode_before_sum params broadcast
clients: encode(x)  ->  federated_aggregate: accumulate decodes the part that does not commute
         with sum and adds (counting the summands), merge adds, state update tensors by mode
server: decode_after_sum(sum, params, num_summands); update_state
```
The encoders are our `simharness.aggregators.encoders` (te's interface; see
that module for why te itself is not used and how its math is matched).
"""

from __future__ import annotations

import collections
from typing import Any, Callable

import tensorflow as tf

from simharness.aggregators import encoders as te_encoders
from simharness.aggregators import factory
from simharness.aggregators import tensor_utils as tu
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import federated_computation, tf_computation
from simharness.errors import SimharnessTypeError
from simharness.templates import AggregationProcess, MeasuredProcessOutput

__all__ = ['EncodedSumFactory']

EncoderConstructor = Callable[[tf.TensorSpec], te_encoders.GatherEncoder]


def _check_threshold(threshold: Any) -> None:
    if isinstance(threshold, bool) or not isinstance(threshold, int):
        raise TypeError(f'Expected `threshold` to be an int, found {type(threshold).__name__}.')
    if threshold < 0:
        raise ValueError(f'The threshold must be nonnegative. Provided threshold: {threshold}')


def _check_quantization_bits(quantization_bits: Any) -> None:
    if isinstance(quantization_bits, bool) or not isinstance(quantization_bits, int):
        raise TypeError(
            f'Expected `quantization_bits` to be an int, found {type(quantization_bits).__name__}.'
        )
    if not 1 <= quantization_bits <= 16:
        raise ValueError(
            'The quantization_bits must be in range [1, 16]. '
            f'Provided quantization_bits: {quantization_bits}'
        )


class EncodedSumFactory(factory.UnweightedAggregationFactory):
    """Sums values encoded on clients by a `GatherEncoder` per tensor, decoded on the server.

    Args:
      encoder_fn: maps a `tf.TensorSpec` to the `GatherEncoder` of that tensor.
    """

    def __init__(self, encoder_fn: EncoderConstructor):
        if not callable(encoder_fn):
            raise TypeError(f'Expected `encoder_fn` to be callable, found {type(encoder_fn)!r}.')
        self._encoder_fn = encoder_fn

    @classmethod
    def quantize_above_threshold(
        cls, quantization_bits: int = 8, threshold: int = 20000, **kwargs: Any
    ) -> 'EncodedSumFactory':
        """Uniform quantization (stochastic rounding) of tensors of more than `threshold` elements.

        ``t = round((t - min(t)) / (max(t) - min(t)) * (2**quantization_bits - 1))``;
        smaller tensors are summed unchanged. `kwargs` go to
        `encoders.uniform_quantization`.
        """
        _check_quantization_bits(quantization_bits)
        _check_threshold(threshold)

        def encoder_fn(value_spec: tf.TensorSpec) -> te_encoders.GatherEncoder:
            if value_spec.shape.num_elements() > threshold:
                return te_encoders.as_gather_encoder(
                    te_encoders.uniform_quantization(quantization_bits, **kwargs), value_spec
                )
            return te_encoders.as_gather_encoder(te_encoders.identity(), value_spec)

        return cls(encoder_fn)

    def create(self, value_type: factory.ValueType) -> AggregationProcess:
        value_type = T.to_type(value_type)
        if not (
            isinstance(value_type, T.TensorType)
            or (
                isinstance(value_type, T.StructType) and factory.is_structure_of_tensors(value_type)
            )
        ):
            raise SimharnessTypeError(
                f'Expected `value_type` to be a tensor or a structure of tensors, found '
                f'{value_type!r}.',
                actual=value_type,
            )
        specs = tu.tensor_specs(value_type)
        encoders = tu.map_structure(self._encoder_fn, specs)
        for enc in tu.flatten(encoders):
            if not isinstance(enc, te_encoders.GatherEncoder):
                raise TypeError(f'`encoder_fn` must return a `GatherEncoder`, got {type(enc)!r}.')
        return _build_process(value_type, encoders)


def _slice(encoders: Any, nested: Any, idx: int) -> Any:
    return tu.pack_sequence_as(encoders, [t[idx] for t in _per_leaf(encoders, nested)])


def _per_leaf(encoders: Any, nested: Any) -> list:
    """The parts of `nested` (laid out as `encoders`, each leaf any structure) per encoder."""
    if not tu._is_nest(encoders):  # pylint: disable=protected-access
        return [nested]
    out: list = []
    for e, n in zip(tu._children(encoders), tu._children(nested)):  # pylint: disable=protected-access
        out.extend(_per_leaf(e, n))
    return out


def _map_up_to(encoders: Any, fn: Callable[..., Any], *nested: Any) -> Any:
    leaves = tu.flatten(encoders)
    parts = [_per_leaf(encoders, n) for n in nested]
    return tu.pack_sequence_as(
        encoders, [fn(e, *[p[i] for p in parts]) for i, e in enumerate(leaves)]
    )


def _accumulate_state_update(a: Any, b: Any, mode: te_encoders.StateAggregationMode) -> Any:
    if mode == te_encoders.StateAggregationMode.SUM:
        return a + b
    if mode == te_encoders.StateAggregationMode.MIN:
        return tf.minimum(a, b)
    if mode == te_encoders.StateAggregationMode.MAX:
        return tf.maximum(a, b)
    if mode == te_encoders.StateAggregationMode.STACK:
        raise NotImplementedError('StateAggregationMode.STACK is not supported yet.')
    raise ValueError(f'Not supported state aggregation mode: {mode}')


def _build_process(value_type: T.Type, encoders: Any) -> AggregationProcess:
    flat_encoders = tu.flatten(encoders)

    @tf_computation()
    def init_tf():
        return tu.pack_sequence_as(encoders, [e.initial_state() for e in flat_encoders])

    @federated_computation()
    def init_fn():
        return intrinsics.federated_eval(init_tf, T.SERVER)

    state_type = init_fn.type_signature.result.member

    @tf_computation(state_type)
    def get_params_fn(state):
        params = _map_up_to(encoders, lambda e, s: e.get_params(s), state)
        return tuple(_slice(encoders, params, i) for i in range(3))

    encode_params_type, before_params_type, after_params_type = [
        get_params_fn.type_signature.result[i] for i in range(3)
    ]

    @tf_computation(value_type, encode_params_type, before_params_type)
    def encode_fn(x, encode_params, before_params):
        encoded = _map_up_to(encoders, lambda e, v, p: e.encode(v, p), x, encode_params)
        return _slice(encoders, encoded, 0), before_params, _slice(encoders, encoded, 1)

    encoded_type = encode_fn.type_signature.result
    update_tensors_type = encoded_type[2]
    value_specs = tu.tensor_specs(value_type)
    update_specs = tu.tensor_specs(update_tensors_type)
    modes = [tuple(e.state_update_aggregation_modes) for e in flat_encoders]

    def decode_before_sum(encoded_x, params):
        part = _map_up_to(encoders, lambda e, v, p: e.decode_before_sum(v, p), encoded_x, params)
        return part, tf.constant((1,), tf.int32)

    def zeros_like_specs(specs):
        return tu.map_structure(lambda s: tf.zeros(s.shape, s.dtype), specs)

    def combine_updates(a, b):
        return _map_up_to(
            encoders,
            lambda e, x, y, m: tu.pack_sequence_as(
                x,
                [
                    _accumulate_state_update(u, v, mode)
                    for u, v, mode in zip(tu.flatten(x), tu.flatten(y), m)
                ],
            ),
            a,
            b,
            tu.pack_sequence_as(encoders, modes),
        )

    @tf_computation()
    def zero_fn():
        values = (zeros_like_specs(value_specs), tf.zeros([1], tf.int32))
        return collections.OrderedDict(
            values=values, state_update_tensors=zeros_like_specs(update_specs)
        )

    acc_type = zero_fn.type_signature.result

    @tf_computation(acc_type, encoded_type)
    def accumulate_fn(acc, encoded):
        value, params, updates = encoded
        part, one = decode_before_sum(value, params)
        summed = tu.map_structure(tf.add, acc['values'][0], part)
        return collections.OrderedDict(
            values=(summed, acc['values'][1] + one),
            state_update_tensors=combine_updates(acc['state_update_tensors'], updates),
        )

    @tf_computation(acc_type, acc_type)
    def merge_fn(a, b):
        return collections.OrderedDict(
            values=(
                tu.map_structure(tf.add, a['values'][0], b['values'][0]),
                a['values'][1] + b['values'][1],
            ),
            state_update_tensors=combine_updates(
                a['state_update_tensors'], b['state_update_tensors']
            ),
        )

    @tf_computation(acc_type)
    def report_fn(acc):
        return acc

    @tf_computation(acc_type['values'], after_params_type)
    def decode_after_sum_fn(summed_values, after_params):
        part, num_summands = summed_values
        return _map_up_to(
            encoders, lambda e, v, p: e.decode_after_sum(v, p, num_summands), part, after_params
        )

    @tf_computation(state_type, update_tensors_type)
    def update_state_fn(state, updates):
        return _map_up_to(encoders, lambda e, s, u: e.update_state(s, u), state, updates)

    @federated_computation(init_fn.type_signature.result, T.FederatedType(value_type, T.CLIENTS))
    def next_fn(state, value):
        params = intrinsics.federated_map(get_params_fn, state)
        encode_params = intrinsics.federated_broadcast(params[0])
        before_params = intrinsics.federated_broadcast(params[1])
        encoded_values = intrinsics.federated_map(encode_fn, (value, encode_params, before_params))
        aggregated = intrinsics.federated_aggregate(
            encoded_values, zero_fn(), accumulate_fn, merge_fn, report_fn
        )
        decoded = intrinsics.federated_map(decode_after_sum_fn, (aggregated['values'], params[2]))
        new_state = intrinsics.federated_map(
            update_state_fn, (state, aggregated['state_update_tensors'])
        )
        return MeasuredProcessOutput(
            state=new_state, result=decoded, measurements=intrinsics.federated_value((), T.SERVER)
        )

    return AggregationProcess(init_fn, next_fn)
