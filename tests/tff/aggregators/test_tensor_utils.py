"""Our helpers for the aggregators' TF bodies (no TFF counterpart: TFF uses ``tf.nest``).

Client values reach a tf_computation as Python containers (lists, tuples,
dicts, namedtuples, attrs classes such as ``ModelWeights``) or `Struct`s; the
aggregators map over all of them as ``tf.nest`` maps over the containers.
"""

import collections

import attrs
import numpy as np
import tensorflow as tf

import simharness as tff
from simharness.aggregators import tensor_utils as tu


@attrs.define
class _Weights:
    trainable: list
    non_trainable: list


def test_map_flatten_pack_over_every_container():
    nt = collections.namedtuple('NT', ['a', 'b'])
    value = collections.OrderedDict(
        s=tff.Struct([('x', tf.constant(1.0)), (None, tf.constant([2.0, 3.0]))]),
        w=_Weights([tf.constant(4.0)], [tf.constant(5.0)]),
        t=nt(tf.constant(6.0), [7.0]),
    )
    doubled = tu.map_structure(lambda x: x * 2, value)
    assert isinstance(doubled['s'], tff.Struct) and isinstance(doubled['w'], _Weights)
    assert isinstance(doubled['t'], nt)
    flat = [float(np.asarray(x).sum()) for x in tu.flatten(doubled)]
    assert flat == [2.0, 10.0, 8.0, 10.0, 12.0, 14.0]
    rebuilt = tu.pack_sequence_as(value, tu.flatten(value))
    assert tu.flatten(rebuilt) == tu.flatten(value)


def test_cond_over_a_struct():
    value = tff.Struct([('a', tf.constant([3.0, 4.0])), ('b', tf.constant(0.0))])
    out = tu.cond(
        tf.constant(True), lambda: tu.map_structure(tf.zeros_like, value), lambda: value, value
    )
    assert isinstance(out, tff.Struct) and float(tf.reduce_sum(out.a)) == 0.0
    assert float(tu.global_l2_norm(value)) == 5.0


def test_clipping_of_attrs_model_weights(tff_stack):
    vt = tff.to_type(
        _Weights(
            trainable=[tff.TensorType(np.float32, [2])], non_trainable=[tff.TensorType(np.float32)]
        )
    )
    process = tff.aggregators.clipping_factory(1.0, tff.aggregators.MeanFactory()).create(
        vt, tff.TensorType(np.float32)
    )
    result = process.next(
        process.initialize(),
        [_Weights([np.array([3.0, 4.0], np.float32)], [np.float32(0.0)])],
        [1.0],
    ).result
    assert isinstance(result, _Weights)
    np.testing.assert_allclose(result.trainable[0], [0.6, 0.8], rtol=1e-6)
