"""Unit tests of EagerTFExecutor, used directly (no threads, no federating layer)."""

from __future__ import annotations

import asyncio
import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from simharness.core import types as T
from simharness.core.reduction import Partial
from simharness.core.structure import Struct
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.executors.leaf.eager_tf import EagerTFExecutor, EagerValue, FunctionCache


def run(coro):
    return asyncio.run(coro)


def compiled(comp):
    return comp.to_building_block()


@sh.tf_computation(tf.float32)
def add_one(x):
    return x + 1.0


@sh.tf_computation(tf.int32)
def int_identity(x):
    return x


@sh.tf_computation
def seven():
    return tf.constant(7, tf.int32)


@sh.tf_computation(tf.float32, (tf.int32, [2]))
def pair_fn(a, b):
    return collections.OrderedDict(s=a * 2.0, v=b + 1)


@sh.tf_computation((tf.float32, [4, 3]), (tf.float32, [4]))
def dense(w, x):
    return tf.tanh(tf.linalg.matvec(w, x, transpose_a=True)) * tf.reduce_sum(x * x)


@sh.tf_computation(sh.SequenceType(tf.float32))
def dataset_sum(ds):
    return ds.reduce(tf.constant(0.0), lambda a, x: a + x)


@sh.tf_computation(tf.int64)
def make_range(n):
    return tf.data.Dataset.range(n)


@pytest.fixture
def ex():
    with EagerTFExecutor() as executor:
        yield executor


class TestValuesAndCalls:
    def test_create_value_and_compute(self, ex):
        v = run(ex.create_value([1.0, 2.0], (tf.float32, [2])))
        assert v.type_signature == T.TensorType(tf.float32, [2])
        out = run(v.compute())
        assert isinstance(out, tf.Tensor) and out.dtype == tf.float32
        np.testing.assert_array_equal(out.numpy(), [1.0, 2.0])
        inferred = run(ex.create_value(np.int64(3)))
        assert str(inferred.type_signature) == 'int64'

    def test_create_call(self, ex):
        fn = run(ex.create_value(compiled(add_one)))
        assert fn.type_signature == add_one.type_signature
        out = run(ex.create_call(fn, run(ex.create_value(1.5, tf.float32))))
        assert out.type_signature == T.TensorType(tf.float32)
        assert run(out.compute()).numpy() == 2.5
        no_arg = run(ex.create_call(run(ex.create_value(compiled(seven)))))
        assert run(no_arg.compute()).numpy() == 7

    def test_struct_arguments_and_results(self, ex):
        fn = run(ex.create_value(compiled(pair_fn)))
        arg = run(ex.create_value([1.5, [1, 2]], pair_fn.type_signature.parameter))
        out = run(ex.create_call(fn, arg))
        assert str(out.type_signature) == '<s=float32,v=int32[2]>'
        value = run(out.compute())
        assert isinstance(value, Struct) and value.names == ('s', 'v')
        assert value.s.numpy() == 3.0
        np.testing.assert_array_equal(value.v.numpy(), [2, 3])

    def test_create_struct_and_selection(self, ex):
        a = run(ex.create_value(1.0, tf.float32))
        b = run(ex.create_value(2, tf.int32))
        s = run(ex.create_struct([('a', a), ('b', b)]))
        assert str(s.type_signature) == '<a=float32,b=int32>'
        sel = run(ex.create_selection(s, 1))
        assert sel.type_signature == T.TensorType(tf.int32) and run(sel.compute()).numpy() == 2
        unnamed = run(ex.create_struct([a, b]))
        assert unnamed.type_signature.names == (None, None)
        with pytest.raises(SimharnessTypeError, match='cannot select from a value of type float32'):
            run(ex.create_selection(a, 0))

    def test_create_values_stacks_a_block(self, ex):
        vals = run(ex.create_values([1.0, 2.0, 3.0], tf.float32))
        assert len(vals) == 3 and all(isinstance(v, EagerValue) for v in vals)
        assert [float(x) for x in run(ex.compute_many(vals))] == [1.0, 2.0, 3.0]
        assert run(vals[1].compute()).numpy() == 2.0


class TestTypeValidation:
    def test_call_with_an_argument_of_another_type(self, ex):
        fn = run(ex.create_value(compiled(int_identity)))
        arg = run(ex.create_value(1.0, tf.float32))
        with pytest.raises(SimharnessTypeError, match='float32 is not assignable .* int32'):
            run(ex.create_call(fn, arg))

    def test_call_arity(self, ex):
        fn = run(ex.create_value(compiled(add_one)))
        with pytest.raises(SimharnessTypeError, match=r'needs an argument of type float32'):
            run(ex.create_call(fn))
        no_arg = run(ex.create_value(compiled(seven)))
        with pytest.raises(SimharnessTypeError, match='takes no argument'):
            run(ex.create_call(no_arg, run(ex.create_value(1.0, tf.float32))))

    def test_calling_a_non_function(self, ex):
        v = run(ex.create_value(1.0, tf.float32))
        with pytest.raises(SimharnessTypeError, match='float32 is not a function'):
            run(ex.create_call(v, v))

    @pytest.mark.parametrize(
        'value, spec, error, message',
        [
            (1.5, tf.int32, TypeError, 'float64 is not assignable to int32'),
            (
                [1.0, 2.0, 3.0],
                (tf.float32, [2]),
                TypeError,
                r'shape \(3,\) is not assignable to float32\[2\]',
            ),
            (True, tf.float32, TypeError, 'bool is not assignable to float32'),
            ('abc', tf.int32, TypeError, 'not assignable to int32'),
            (2**40, tf.int32, ValueError, 'out of the range'),
            (tf.constant(1.0), tf.float64, TypeError, 'dtype float32 is not assignable to float64'),
            (
                {'a': 1.0},
                tf.float32,
                TypeError,
                r'\(dict\) is not assignable to tensor type float32',
            ),
            ([1.0], [tf.float32, tf.float32], TypeError, '1 elements does not match'),
        ],
    )
    def test_create_value_rejects(self, ex, value, spec, error, message):
        with pytest.raises(error, match=message):
            run(ex.create_value(value, spec))

    def test_functions_must_be_compiled(self, ex):
        with pytest.raises(SimharnessTypeError, match='compiled TF computation'):
            run(ex.create_value(lambda x: x, T.FunctionType(tf.float32, tf.float32)))

    def test_closed_executor_is_reinitialized_on_use(self):
        # As TFF's executors: close() frees what the executor holds; the next use starts afresh.
        executor = EagerTFExecutor()
        executor.close()
        executor.close()  # idempotent
        v = run(executor.create_value(1.0, tf.float32))
        assert float(run(v.compute()).numpy()) == 1.0
        executor.close()


class TestFunctionCache:
    def test_bounded_lru(self):
        executor = EagerTFExecutor(cache_size=2)

        def embed(comp):
            return run(executor.create_value(compiled(comp))).internal

        fa, fi = embed(add_one), embed(int_identity)
        assert embed(add_one) is fa  # a hit; add_one is now the most recent
        fs = embed(seven)  # evicts int_identity, the least recent
        assert executor.cache_info == {'size': 2, 'max_size': 2}
        assert embed(add_one) is fa and embed(seven) is fs
        again = embed(int_identity)  # embedded anew; evicts add_one
        assert again is not fi and executor.cache_info['size'] == 2
        assert embed(seven) is fs and embed(add_one) is not fa
        out = run(
            executor.create_call(
                run(executor.create_value(compiled(int_identity))),
                run(executor.create_value(4, tf.int32)),
            )
        )
        assert run(out.compute()).numpy() == 4

    def test_shared_cache(self):
        cache = FunctionCache(max_size=8)
        a, b = EagerTFExecutor(function_cache=cache), EagerTFExecutor(function_cache=cache)
        fa = run(a.create_value(compiled(add_one))).internal
        assert run(b.create_value(compiled(add_one))).internal is fa
        assert len(cache) == 1
        cache.clear()
        assert len(cache) == 0

    @pytest.mark.parametrize('size', [0, -1])
    def test_size_must_be_positive(self, size):
        with pytest.raises(
            SimharnessValueError, match=r'cache size \(max_size\) must be an int >= 1'
        ):
            FunctionCache(size)

    @pytest.mark.parametrize('size', [1.5, '8', True, None])
    def test_size_must_be_an_int(self, size):
        # The same rule, and error types, as every other "int >= 1" argument (validation.check_int).
        with pytest.raises(SimharnessTypeError, match=r'cache size \(max_size\) must be an int'):
            FunctionCache(size)


class TestBatchedMap:
    def _inputs(self, n=5):
        rng = np.random.default_rng(0)
        w = rng.normal(size=(4, 3)).astype(np.float32)
        xs = [rng.normal(size=4).astype(np.float32) * 10.0 ** rng.uniform(-3, 3) for _ in range(n)]
        return w, xs

    def test_batched_map_gives_the_same_bits_as_per_client_calls(self, ex):
        w, xs = self._inputs()
        fn = run(ex.create_value(compiled(dense)))
        param = dense.type_signature.parameter
        args = run(ex.create_values([[w, x] for x in xs], param))
        batched = run(ex.create_map(fn, args))
        assert all(v._block is not None for v in batched)  # one TF call for the block
        single = [run(ex.create_call(fn, run(ex.create_value([w, x], param)))) for x in xs]
        got = run(ex.compute_many(batched))
        want = [run(v.compute()).numpy() for v in single]
        assert len(got) == len(want) == 5
        for g, s in zip(got, want):
            assert g.dtype == np.float32 and g.tobytes() == s.tobytes()

    def test_shared_inputs_are_passed_once(self, ex):
        w, xs = self._inputs()
        fn = run(ex.create_value(compiled(dense)))
        wv = run(ex.create_value(w, (tf.float32, [4, 3])))
        xv = run(ex.create_values(xs, (tf.float32, [4])))
        rows = run(ex.create_structs([[wv, x] for x in xv], [None, None]))
        assert [k for k, _ in rows[0]._block.leaves] == ['shared', 'stacked']
        out = run(ex.compute_many(run(ex.create_map(fn, rows))))
        single = run(
            ex.create_call(fn, run(ex.create_value([w, xs[3]], dense.type_signature.parameter)))
        )
        assert out[3].tobytes() == run(single.compute()).numpy().tobytes()

    def test_map_over_mixed_values_and_no_argument_map(self, ex):
        fn = run(ex.create_value(compiled(add_one)))
        args = [run(ex.create_value(float(i), tf.float32)) for i in range(3)]
        assert [float(v) for v in run(ex.compute_many(run(ex.create_map(fn, args))))] == [
            1.0,
            2.0,
            3.0,
        ]
        sev = run(ex.create_value(compiled(seven)))
        assert [int(v) for v in run(ex.compute_many(run(ex.create_map(sev, None, count=3))))] == [
            7,
            7,
            7,
        ]

    def test_selections_of_a_block(self, ex):
        rows = run(
            ex.create_values([[1.0, [1, 2]], [2.0, [3, 4]]], pair_fn.type_signature.parameter)
        )
        sel = run(ex.create_selections(rows, 1))
        assert sel[0].type_signature == T.TensorType(tf.int32, [2])
        assert [v.tolist() for v in run(ex.compute_many(sel))] == [[1, 2], [3, 4]]


class TestDatasets:
    def test_lists_and_datasets_in(self, ex):
        seq = sh.SequenceType(tf.float32)
        fn = run(ex.create_value(compiled(dataset_sum)))
        from_list = run(ex.create_value([1.0, 2.0, 3.5], seq))
        assert isinstance(from_list.internal_representation, tf.data.Dataset)
        assert run(run(ex.create_call(fn, from_list)).compute()).numpy() == 6.5
        ds = tf.data.Dataset.from_tensor_slices(np.array([1.0, 2.0], np.float32))
        assert run(run(ex.create_call(fn, run(ex.create_value(ds, seq)))).compute()).numpy() == 3.0
        empty = run(ex.create_value([], seq))
        assert run(run(ex.create_call(fn, empty)).compute()).numpy() == 0.0

    def test_dataset_of_another_type(self, ex):
        ds = tf.data.Dataset.from_tensor_slices(np.array([1, 2], np.int32))
        with pytest.raises(SimharnessTypeError, match=r'int32\* is not assignable to float32\*'):
            run(ex.create_value(ds, sh.SequenceType(tf.float32)))

    def test_datasets_out(self, ex):
        fn = run(ex.create_value(compiled(make_range)))
        out = run(ex.create_call(fn, run(ex.create_value(3, tf.int64))))
        assert str(out.type_signature) == 'int64*'
        ds = run(out.compute())
        assert isinstance(ds, tf.data.Dataset) and list(ds.as_numpy_iterator()) == [0, 1, 2]
        many = run(ex.create_map(fn, run(ex.create_values([1, 2], tf.int64))))
        computed = run(ex.compute_many(many))
        assert all(isinstance(d, tf.data.Dataset) for d in computed)
        assert [list(d.as_numpy_iterator()) for d in computed] == [[0], [0, 1]]

    def test_sequence_ops(self, ex):
        seq = run(ex.create_values([[1.0, 2.0], [3.0]], sh.SequenceType(tf.float32)))
        fn = run(ex.create_value(compiled(add_one)))
        mapped = run(ex.create_sequence_op('sequence_map', seq, {'fn': fn}))
        assert [list(d.as_numpy_iterator()) for d in run(ex.compute_many(mapped))] == [
            [2.0, 3.0],
            [4.0],
        ]
        sums = run(ex.create_sequence_op('sequence_sum', seq, {}))
        assert [float(v) for v in run(ex.compute_many(sums))] == [3.0, 3.0]
        with pytest.raises(SimharnessValueError, match='unknown sequence operation'):
            run(ex.create_sequence_op('sequence_fold', seq, {}))


@sh.tf_computation([tf.float32, tf.int32], tf.float32)
def acc_sum_count(acc, x):
    return [acc[0] + x, acc[1] + 1]


@sh.tf_computation([tf.float32, tf.int32], [tf.float32, tf.int32])
def merge_sum_count(a, b):
    return [a[0] + b[0], a[1] + b[1]]


class TestReductions:
    def test_sum_partials_combine_to_the_single_block_bits(self, ex):
        rng = np.random.default_rng(3)
        xs = list((rng.choice([-1.0, 1.0], 40) * 10.0 ** rng.uniform(-6, 6, 40)).astype(np.float32))
        vals = run(ex.create_values(xs, tf.float32))
        whole = run(ex.create_partial_reduction('sum', vals, 0, 40, {}))
        one = run(ex.create_reduction_result('sum', [whole], 40, {}, T.TensorType(tf.float32)))
        parts = [
            run(ex.create_partial_reduction('sum', vals[lo:hi], lo, 40, {}))
            for lo, hi in [(0, 5), (5, 17), (17, 40)]
        ]
        split = run(ex.create_reduction_result('sum', parts, 40, {}, T.TensorType(tf.float32)))
        assert run(one.compute()).numpy().tobytes() == run(split.compute()).numpy().tobytes()

    def test_aggregate_partials_with_heads_of_the_member_type(self, ex):
        n = 20
        vals = run(ex.create_values([float(i) for i in range(n)], tf.float32))
        at = acc_sum_count.type_signature.result

        def params():
            return {
                'zero': run(ex.create_value([0.0, 0], at)),
                'accumulate': run(ex.create_value(compiled(acc_sum_count))),
                'merge': run(ex.create_value(compiled(merge_sum_count))),
            }

        parts = [
            run(ex.create_partial_reduction('aggregate', vals[lo:hi], lo, n, params()))
            for lo, hi in [(0, 3), (3, 18), (18, 20)]
        ]
        assert isinstance(parts[1], Partial) and parts[1].head  # a block that begins inside a chunk
        out = run(ex.create_reduction_result('aggregate', parts, n, params(), at))
        total, count = run(out.compute())
        assert total.numpy() == sum(range(n)) and count.numpy() == n

    def test_unknown_kind(self, ex):
        vals = run(ex.create_values([1.0, 2.0], tf.float32))
        with pytest.raises(SimharnessValueError, match="unknown reduction kind 'median'"):
            run(ex.create_partial_reduction('median', vals, 0, 2, {}))


def test_a_computation_that_passes_parameters_through_runs_no_tf_call():
    # `lambda s: s.weights` and the like: the results are the parameter tensors; a graph
    # that computes anything, or carries a side effect, still runs in TF.
    from simharness.executors.leaf.embedded_function import EmbeddedFunction

    spec = collections.OrderedDict(w=tf.TensorSpec([2], tf.float32), b=tf.TensorSpec([], tf.int32))

    @sh.tf_computation(spec)
    def pick(s):
        return s['b'], s['w'], s['w']

    @sh.tf_computation(spec)
    def computes(s):
        return s['w'] * 2.0

    @sh.tf_computation(spec)
    def asserts(s):
        with tf.control_dependencies([tf.debugging.assert_positive(s['b'])]):
            return tf.identity(s['w'])

    fn = EmbeddedFunction(compiled(pick))
    assert fn.selection == (1, 0, 0)
    w, b = tf.constant([1.5, 2.5]), tf.constant(3)
    out = fn.call_flat([w, b])
    assert out[0] is b and out[1] is w and out[2] is w
    ex = EagerTFExecutor()
    arg = run(
        ex.create_value(
            collections.OrderedDict(w=np.array([1.5, 2.5], np.float32), b=np.int32(3)),
            pick.type_signature.parameter,
        )
    )
    result = run(run(ex.create_call(run(ex.create_value(pick)), arg)).compute())
    assert [np.asarray(r).tolist() for r in result] == [3, [1.5, 2.5], [1.5, 2.5]]
    assert EmbeddedFunction(compiled(computes)).selection is None
    checked = EmbeddedFunction(compiled(asserts))
    assert checked.selection is None
    with pytest.raises(tf.errors.InvalidArgumentError):
        checked.call_flat([w, tf.constant(-1)])
