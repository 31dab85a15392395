"""Port of TFF's ``tensorflow_federated/python/aggregators/concat_test.py``.

Condensed: the sum and mean cases of one factory run in one test. Left out:
the tests of TFF's private ``_concat_impl``/``_unconcat_impl`` (the same
round trip is checked through ``create_concat_fns``).
"""

import collections

import numpy as np
import pytest

import simharness as tff
from simharness.aggregators import concat, factory, mean, sum_factory
from tests.tff.aggregators.aggregator_test_utils import assert_all_close

_nested_type = collections.OrderedDict(
    a=[np.float32, [(np.float32, (2, 2, 2))]], b=(np.float32, (3, 3))
)


def _nested(v):
    return collections.OrderedDict(
        a=[np.array(v, np.float32), [np.ones([2, 2, 2], np.float32) * v]],
        b=np.ones([3, 3], np.float32) * v,
    )


def test_type_properties():
    f = concat.concat_factory(sum_factory.SumFactory())
    assert isinstance(f, factory.UnweightedAggregationFactory)
    process = f.create(tff.to_type(_nested_type))
    assert process.next.type_signature.parameter[1] == tff.FederatedType(
        tff.to_type(_nested_type), tff.CLIENTS
    )
    assert process.next.type_signature.result.result == tff.FederatedType(
        tff.to_type(_nested_type), tff.SERVER
    )
    f = concat.concat_factory(mean.MeanFactory())
    assert isinstance(f, factory.WeightedAggregationFactory)
    concat_fn, _ = concat.create_concat_fns(tff.to_type(_nested_type))
    assert concat_fn.type_signature.result == tff.TensorType(np.float32, [1 + 8 + 9])


@pytest.mark.parametrize(
    'bad',
    [
        [np.int32, np.float32],
        [np.str_],
        [np.bool_],
        tff.StructType([('a', np.float32)]),
        tff.SequenceType(np.int32),
    ],
)
def test_raises_on_bad_types(bad):
    with pytest.raises(TypeError):
        concat.concat_factory(sum_factory.SumFactory()).create(
            bad if isinstance(bad, tff.Type) else tff.to_type(bad)
        )


def test_concat_sum(tff_stack):
    cases = [
        (np.int32, [1, 2, 3], 6),
        ((np.int32, [3]), [(1, 1, 1), (2, 2, 2)], (3, 3, 3)),
        ((np.int32, [2, 2]), [((1, 1), (1, 1)), ((2, 2), (2, 2))], ((3, 3), (3, 3))),
        (_nested_type, [_nested(1.0), _nested(2.0)], _nested(3.0)),
    ]
    for value_type, client_data, expected in cases:
        process = concat.concat_factory(sum_factory.SumFactory()).create(tff.to_type(value_type))
        state = process.initialize()
        assert state == ()
        output = process.next(state, client_data)
        assert output.state == () and output.measurements == ()
        assert_all_close(output.result, expected, atol=0, rtol=0)


def test_concat_mean(tff_stack):
    cases = [
        (np.float32, [1.0, 2.0, 3.0], [3.0, 4.0, 5.0], 26.0 / 12.0),
        (
            (np.float32, [2, 2]),
            [((1.0, 1.0), (1.0, 1.0)), ((5.0, 5.0), (5.0, 5.0))],
            [3.0, 1.0],
            ((2.0, 2.0), (2.0, 2.0)),
        ),
        (_nested_type, [_nested(1.0), _nested(5.0)], [3.0, 1.0], _nested(2.0)),
    ]
    empty_state = collections.OrderedDict(value_sum_process=(), weight_sum_process=())
    for value_type, client_data, weights, expected in cases:
        process = concat.concat_factory(mean.MeanFactory()).create(
            tff.to_type(value_type), tff.TensorType(np.float32)
        )
        state = process.initialize()
        assert state == empty_state
        output = process.next(state, client_data, weights)
        assert output.state == empty_state
        assert output.measurements == collections.OrderedDict(mean_value=(), mean_weight=())
        assert_all_close(output.result, expected)
