"""Port of TFF's ``tensorflow_federated/python/core/backends/native/mergeable_comp_compiler_test.py``.
No case left out.

TFF runs the compiled forms in a `MergeableCompExecutionContext` over one async context on
its C++ stack with a TensorFlow leaf executor; here over one async thread-stack context
(`tff.backends.test.create_async_test_cpp_execution_context()`), shared by the module and
closed at its end.

Cases of our own follow TFF's (``test_subrounds_*``): each runs a computation compiled to
`MergeableCompForm` in a `MergeableCompExecutionContext` over 2-3 async thread-stack
contexts in several subrounds, and checks it gives what the computation gives called
directly on `tff.backends.test.create_sync_test_cpp_execution_context()` (integer data, so
both are exact).
"""

from __future__ import annotations

import collections
from typing import Any, Iterator, List

import numpy as np
import pytest
import tensorflow as tf

import simharness as federated_language
import simharness as tff

mergeable_comp_compiler = tff.backends.native


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope='module')
def async_contexts() -> Iterator[List[Any]]:
    """Three async thread-stack contexts (default_num_clients=2), closed with the module."""
    made = [
        tff.backends.test.create_async_test_cpp_execution_context(default_num_clients=2)
        for _ in range(3)
    ]
    yield made
    for ctx in made:
        ctx.close()


@pytest.fixture
def mergeable_context(async_contexts) -> Iterator[tff.framework.MergeableCompExecutionContext]:
    """TFF's test context: a `MergeableCompExecutionContext` over one async context."""
    ctx = tff.framework.MergeableCompExecutionContext(async_contexts[:1])
    yield ctx
    ctx.close()


def _invoke(ctx: Any, mergeable_form: Any, arg: Any) -> Any:
    return ctx.invoke(mergeable_form, arg)


# ----------------------------------------------------- TFF's computations


def build_whimsy_computation_with_aggregation_and_after(server_arg_type, clients_arg_type):
    @tff.tensorflow.computation(server_arg_type.member, clients_arg_type.member)
    def compute_sum(x, y):
        return x + y

    @federated_language.federated_computation(server_arg_type, clients_arg_type)
    def aggregation_comp(server_arg, client_arg):
        summed = federated_language.federated_sum(client_arg)
        return federated_language.federated_map(compute_sum, (server_arg, summed))

    return aggregation_comp


def build_whimsy_computation_with_before_aggregation_work(server_arg_type, clients_arg_type):
    @tff.tensorflow.computation(clients_arg_type.member)
    def compute_tuple_sum(x):
        return x[0] + x[1]

    @tff.tensorflow.computation(server_arg_type.member, clients_arg_type.member[0])
    def compute_sum(x, y):
        return x + y

    @federated_language.federated_computation(server_arg_type, clients_arg_type)
    def aggregation_comp(server_arg, client_arg):
        client_sums = federated_language.federated_map(compute_tuple_sum, client_arg)
        summed = federated_language.federated_sum(client_sums)
        return federated_language.federated_map(compute_sum, (server_arg, summed))

    return aggregation_comp


def build_whimsy_computation_with_false_aggregation_dependence(server_arg_type, clients_arg_type):
    @tff.tensorflow.computation(clients_arg_type.member)
    def compute_tuple_sum(x):
        return x[0] + x[1]

    @tff.tensorflow.computation(server_arg_type.member, clients_arg_type.member[0])
    def compute_sum(x, y):
        return x + y

    @federated_language.federated_computation
    def package_args_as_tuple(x, y):
        return [x, y]

    @federated_language.federated_computation(server_arg_type, clients_arg_type)
    def aggregation_comp(server_arg, client_arg):
        client_sums = federated_language.federated_map(compute_tuple_sum, client_arg)
        summed = federated_language.federated_sum(client_sums)
        broadcast_sum = federated_language.federated_broadcast(summed)
        # A call of a federated computation: the second sum depends on the first only
        # through a selection that inlining resolves.
        client_tuple = package_args_as_tuple(client_sums, broadcast_sum)
        summed = federated_language.federated_sum(client_tuple[0])
        return federated_language.federated_map(compute_sum, (server_arg, summed))

    return aggregation_comp


@tff.tensorflow.computation(np.int32, np.int32)
def tf_multiply_int(x, y):
    return x * y


@federated_language.federated_computation(np.int32, np.int32)
def return_list(x, y):
    return [x, y]


@federated_language.federated_computation(
    federated_language.FederatedType([np.int32, np.int32], federated_language.SERVER)
)
def server_placed_mult(arg):
    return federated_language.federated_map(tf_multiply_int, arg)


def _server(dtype=np.int32):
    return federated_language.FederatedType(dtype, federated_language.SERVER)


def _clients(dtype=np.int32):
    return federated_language.FederatedType(dtype, federated_language.CLIENTS)


def _return_server_value():
    @federated_language.federated_computation()
    def return_server_value():
        return federated_language.federated_value(0, federated_language.SERVER)

    return return_server_value


# ------------------------------------------------------------- TFF's cases


def test_raises_two_dependent_aggregates():
    @federated_language.federated_computation(_server())
    def dependent_agg_comp(server_arg):
        arg_at_clients = federated_language.federated_broadcast(server_arg)
        sum_result = federated_language.federated_sum(arg_at_clients)
        rebroadcast_sum = federated_language.federated_broadcast(sum_result)
        return federated_language.federated_sum(rebroadcast_sum)

    with pytest.raises(ValueError, match='one aggregate dependent on another'):
        mergeable_comp_compiler.compile_to_mergeable_comp_form(dependent_agg_comp)


def test_preserves_python_containers_in_after_merge():
    mergeable_form = mergeable_comp_compiler.compile_to_mergeable_comp_form(return_list)
    assert isinstance(mergeable_form, tff.framework.MergeableCompForm)
    assert mergeable_form.after_merge.type_signature.result == return_list.type_signature.result


def test_compiles_standalone_tensorflow_computation():
    mergeable_form = mergeable_comp_compiler.compile_to_mergeable_comp_form(tf_multiply_int)
    assert isinstance(mergeable_form, tff.framework.MergeableCompForm)


def test_compilation_preserves_semantics_standalone_tf(mergeable_context):
    mergeable_form = mergeable_comp_compiler.compile_to_mergeable_comp_form(tf_multiply_int)
    assert _invoke(mergeable_context, mergeable_form, (1, 0)) == 0
    assert _invoke(mergeable_context, mergeable_form, (1, 2)) == 2
    assert _invoke(mergeable_context, mergeable_form, (2, 3)) == 6


def test_compiles_simple_noarg_computation():
    mergeable_form = mergeable_comp_compiler.compile_to_mergeable_comp_form(_return_server_value())
    assert isinstance(mergeable_form, tff.framework.MergeableCompForm)


def test_preserves_semantics_of_noarg_computation(mergeable_context):
    mergeable_form = mergeable_comp_compiler.compile_to_mergeable_comp_form(_return_server_value())
    assert _invoke(mergeable_context, mergeable_form, None) == 0


def test_compiles_server_placed_computation():
    mergeable_form = mergeable_comp_compiler.compile_to_mergeable_comp_form(server_placed_mult)
    assert isinstance(mergeable_form, tff.framework.MergeableCompForm)


def test_compilation_preserves_semantics_server_placed_computation(mergeable_context):
    mergeable_form = mergeable_comp_compiler.compile_to_mergeable_comp_form(server_placed_mult)
    assert _invoke(mergeable_context, mergeable_form, (1, 0)) == 0
    assert _invoke(mergeable_context, mergeable_form, (1, 2)) == 2
    assert _invoke(mergeable_context, mergeable_form, (2, 3)) == 6


def test_compiles_computation_with_aggregation_and_after():
    incoming_comp = build_whimsy_computation_with_aggregation_and_after(_server(), _clients())
    mergeable_form = mergeable_comp_compiler.compile_to_mergeable_comp_form(incoming_comp)
    assert isinstance(mergeable_form, tff.framework.MergeableCompForm)


def test_compilation_preserves_semantics_aggregation_and_after(mergeable_context):
    incoming_comp = build_whimsy_computation_with_aggregation_and_after(_server(), _clients())
    mergeable_form = mergeable_comp_compiler.compile_to_mergeable_comp_form(incoming_comp)
    result = _invoke(mergeable_context, mergeable_form, (100, list(range(100))))
    # 100 + 0 + 1 + ... + 99: the integers from 0 to 100.
    assert result == 101 * 100 / 2


def test_compiles_computation_with_before_aggregation_work():
    incoming_comp = build_whimsy_computation_with_before_aggregation_work(
        _server(), _clients([np.int32, np.int32])
    )
    mergeable_form = mergeable_comp_compiler.compile_to_mergeable_comp_form(incoming_comp)
    assert isinstance(mergeable_form, tff.framework.MergeableCompForm)


def test_compiles_computation_with_false_aggregation_dependence():
    incoming_comp = build_whimsy_computation_with_false_aggregation_dependence(
        _server(), _clients([np.int32, np.int32])
    )
    mergeable_form = mergeable_comp_compiler.compile_to_mergeable_comp_form(incoming_comp)
    assert isinstance(mergeable_form, tff.framework.MergeableCompForm)


def test_compilation_preserves_semantics_before_agg_work(mergeable_context):
    incoming_comp = build_whimsy_computation_with_before_aggregation_work(
        _server(), _clients([np.int32, np.int32])
    )
    mergeable_form = mergeable_comp_compiler.compile_to_mergeable_comp_form(incoming_comp)
    result = _invoke(mergeable_context, mergeable_form, (100, [(x, x) for x in range(100)]))
    # 2 * (0 + ... + 99) + 100.
    assert result == 99 * 100 + 100


# ------------------------------------------------------------- our cases


@pytest.fixture(scope='module')
def sync_context() -> Iterator[Any]:
    """The direct run: a sync thread-stack context."""
    ctx = tff.backends.test.create_sync_test_cpp_execution_context()
    yield ctx
    ctx.close()


#: (async contexts, subrounds): as many subrounds as contexts, and more than contexts.
SUBROUNDS = [(2, None), (3, 5)]


def _in(ctx: Any, comp: Any, args: tuple) -> Any:
    with federated_language.framework.get_context_stack().install(ctx):
        return comp(*args)


def _assert_same(direct: Any, merged: Any) -> None:
    assert type(merged) is type(direct), (direct, merged)
    if isinstance(direct, (list, tuple)):
        assert len(merged) == len(direct), (direct, merged)
        for d, m in zip(direct, merged):
            _assert_same(d, m)
    elif isinstance(direct, dict):
        assert list(merged) == list(direct), (direct, merged)
        for k in direct:
            _assert_same(direct[k], merged[k])
    else:
        np.testing.assert_array_equal(merged, direct)
        assert np.asarray(merged).dtype == np.asarray(direct).dtype, (direct, merged)


@pytest.fixture(params=SUBROUNDS, ids=lambda p: f'{p[0]}_contexts_{p[1] or "inferred"}_subrounds')
def check_subrounds(request, async_contexts, sync_context):
    """``check(comp, *args)``: `comp`'s result in a mergeable context over the fixture's
    contexts and subrounds is that of a direct call."""
    num_contexts, num_subrounds = request.param
    made = []

    def check(comp, *args):
        direct = _in(sync_context, comp, args)
        ctx = tff.backends.native.create_mergeable_comp_execution_context(
            async_contexts[:num_contexts], num_subrounds=num_subrounds
        )
        made.append(ctx)
        merged = _in(ctx, comp, args)
        _assert_same(direct, merged)
        return merged

    yield check
    for ctx in made:
        ctx.close()


CLIENT_INTS = [3, 1, 4, 1, 5, 9, 2, 6, 5]


def test_subrounds_federated_sum(check_subrounds):
    @federated_language.federated_computation(_clients())
    def comp(x):
        return federated_language.federated_sum(x)

    assert check_subrounds(comp, CLIENT_INTS) == sum(CLIENT_INTS)


def test_subrounds_federated_sum_of_struct(check_subrounds):
    @federated_language.federated_computation(
        _clients(collections.OrderedDict(a=np.int32, b=(np.int64, (2,))))
    )
    def comp(x):
        return federated_language.federated_sum(x)

    data = [collections.OrderedDict(a=v, b=np.array([v, -2 * v], np.int64)) for v in CLIENT_INTS]
    result = check_subrounds(comp, data)
    assert result['a'] == sum(CLIENT_INTS)


def test_subrounds_federated_mean(check_subrounds):
    @federated_language.federated_computation(_clients(np.float32))
    def comp(x):
        return federated_language.federated_mean(x)

    values = [float(v) for v in [1, 2, 3, 4, 5, 6, 7, 8]]
    assert check_subrounds(comp, values) == 4.5


def test_subrounds_federated_weighted_mean(check_subrounds):
    @federated_language.federated_computation(_clients(np.float32), _clients(np.float32))
    def comp(x, w):
        return federated_language.federated_mean(x, w)

    values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    weights = [1.0, 1.0, 2.0, 0.0, 2.0, 1.0, 1.0]
    expected = sum(v * w for v, w in zip(values, weights)) / sum(weights)
    assert check_subrounds(comp, values, weights) == expected


def test_subrounds_federated_weighted_mean_of_struct_with_int_weights(check_subrounds):
    @federated_language.federated_computation(
        _clients([np.float32, (np.float64, (2,))]), _clients(np.int32)
    )
    def comp(x, w):
        return federated_language.federated_mean(x, w)

    values = [(float(v), np.array([v, 2 * v], np.float64)) for v in range(1, 8)]
    weights = [1, 1, 2, 0, 2, 1, 1]
    check_subrounds(comp, values, weights)


def test_subrounds_federated_min_and_max(check_subrounds):
    @federated_language.federated_computation(_clients())
    def comp_min(x):
        return federated_language.federated_min(x)

    @federated_language.federated_computation(_clients())
    def comp_max(x):
        return federated_language.federated_max(x)

    assert check_subrounds(comp_min, CLIENT_INTS) == 1
    assert check_subrounds(comp_max, CLIENT_INTS) == 9


def test_subrounds_federated_aggregate_with_custom_accumulator(check_subrounds):
    accumulator = collections.OrderedDict(total=np.int32, count=np.int32, largest=np.int32)

    @tff.tensorflow.computation
    def zero():
        return collections.OrderedDict(
            total=np.int32(0), count=np.int32(0), largest=np.int32(np.iinfo(np.int32).min)
        )

    @tff.tensorflow.computation(accumulator, np.int32)
    def accumulate(acc, x):
        return collections.OrderedDict(
            total=acc['total'] + x, count=acc['count'] + 1, largest=tf.maximum(acc['largest'], x)
        )

    @tff.tensorflow.computation(accumulator, accumulator)
    def merge(a, b):
        return collections.OrderedDict(
            total=a['total'] + b['total'],
            count=a['count'] + b['count'],
            largest=tf.maximum(a['largest'], b['largest']),
        )

    @tff.tensorflow.computation(accumulator)
    def report(acc):
        return (acc['total'] * 100 + acc['count'], acc['largest'])

    @federated_language.federated_computation(_clients())
    def comp(x):
        return federated_language.federated_aggregate(x, zero(), accumulate, merge, report)

    result = check_subrounds(comp, CLIENT_INTS)
    assert tuple(result) == (sum(CLIENT_INTS) * 100 + len(CLIENT_INTS), 9)


def test_subrounds_secure_sums(check_subrounds):
    @federated_language.federated_computation(_clients())
    def secure_sum(x):
        return federated_language.federated_secure_sum(x, 15)

    @federated_language.federated_computation(_clients())
    def secure_sum_bitwidth(x):
        return federated_language.federated_secure_sum_bitwidth(x, 8)

    @federated_language.federated_computation(_clients())
    def secure_modular_sum(x):
        return federated_language.federated_secure_modular_sum(x, 7)

    assert check_subrounds(secure_sum, CLIENT_INTS) == sum(CLIENT_INTS)
    assert check_subrounds(secure_sum_bitwidth, CLIENT_INTS) == sum(CLIENT_INTS)
    # Each subround's sum is reduced mod 7, and so is their merge.
    assert check_subrounds(secure_modular_sum, CLIENT_INTS) == sum(CLIENT_INTS) % 7


def test_subrounds_secure_modular_sum_of_struct(check_subrounds):
    @federated_language.federated_computation(_clients([np.int32, np.int32]))
    def comp(x):
        return federated_language.federated_secure_modular_sum(x, (5, 11))

    data = [(v, 2 * v) for v in CLIENT_INTS]
    result = check_subrounds(comp, data)
    assert list(result) == [sum(CLIENT_INTS) % 5, 2 * sum(CLIENT_INTS) % 11]


def test_subrounds_two_parallel_aggregations(check_subrounds):
    @tff.tensorflow.computation(np.int32)
    def square(x):
        return x * x

    @tff.tensorflow.computation(np.int32, np.int32)
    def subtract(x, y):
        return x - y

    @federated_language.federated_computation(_clients())
    def comp(x):
        total = federated_language.federated_sum(x)
        squares = federated_language.federated_sum(federated_language.federated_map(square, x))
        largest = federated_language.federated_max(x)
        return (federated_language.federated_map(subtract, (squares, total)), largest)

    result = check_subrounds(comp, CLIENT_INTS)
    assert result == (sum(v * v for v in CLIENT_INTS) - sum(CLIENT_INTS), 9)


def test_subrounds_aggregation_in_called_federated_computation(check_subrounds):
    @tff.tensorflow.computation(np.int32)
    def double(x):
        return 2 * x

    @federated_language.federated_computation(_clients())
    def inner(x):
        return federated_language.federated_sum(federated_language.federated_map(double, x))

    @tff.tensorflow.computation(np.int32, np.int32)
    def add(x, y):
        return x + y

    @federated_language.federated_computation(_server(), _clients())
    def outer(s, x):
        return federated_language.federated_map(add, (s, inner(x)))

    assert check_subrounds(outer, 1000, CLIENT_INTS) == 1000 + 2 * sum(CLIENT_INTS)


def test_subrounds_result_with_client_placed_values(check_subrounds):
    @tff.tensorflow.computation(np.int32, np.int32)
    def add(x, y):
        return x + y

    @federated_language.federated_computation(_clients(), _clients(np.float32))
    def comp(x, unused):
        total = federated_language.federated_sum(x)
        shifted = federated_language.federated_map(
            add, (x, federated_language.federated_broadcast(total))
        )
        return collections.OrderedDict(total=total, shifted=shifted, unused=unused)

    unused = [float(-v) for v in CLIENT_INTS]
    result = check_subrounds(comp, CLIENT_INTS, unused)
    # Client values come back in the order of the argument's clients.
    assert result['shifted'] == [v + sum(CLIENT_INTS) for v in CLIENT_INTS]
    assert result['unused'] == unused


def test_subrounds_no_aggregation(check_subrounds):
    @tff.tensorflow.computation(np.int32)
    def negate(x):
        return -x

    @federated_language.federated_computation(_server(), _clients())
    def comp(s, x):
        return (
            federated_language.federated_map(negate, s),
            federated_language.federated_map(negate, x),
        )

    result = check_subrounds(comp, 7, CLIENT_INTS)
    assert result == (-7, [-v for v in CLIENT_INTS])


def test_subrounds_struct_argument_and_all_equal_result(check_subrounds):
    @tff.tensorflow.computation(np.int32, np.int32)
    def add(x, y):
        return x + y

    @federated_language.federated_computation(collections.OrderedDict(s=_server(), c=_clients()))
    def comp(arg):
        shifted = federated_language.federated_map(
            add, (arg['c'], federated_language.federated_broadcast(arg['s']))
        )
        total = federated_language.federated_sum(shifted)
        # Placed at clients, all equal: one value, from one subround.
        return federated_language.federated_broadcast(total), arg['s']

    result = check_subrounds(comp, collections.OrderedDict(s=10, c=CLIENT_INTS))
    assert result == (sum(CLIENT_INTS) + 10 * len(CLIENT_INTS), 10)


@pytest.mark.parametrize('num_contexts', [2, 3])
def test_subrounds_no_argument(async_contexts, num_contexts):
    @federated_language.federated_computation()
    def count_clients():
        ones = federated_language.federated_value(1, federated_language.CLIENTS)
        return (federated_language.federated_sum(ones), federated_language.federated_max(ones))

    # Without an argument every context runs one subround on its own default clients (2
    # each, as TFF): the direct run gets as many.
    sync_context = tff.backends.test.create_sync_test_cpp_execution_context(
        default_num_clients=2 * num_contexts
    )
    ctx = tff.backends.native.create_mergeable_comp_execution_context(
        async_contexts[:num_contexts], num_subrounds=5
    )
    try:
        direct = _in(sync_context, count_clients, ())
        merged = _in(ctx, count_clients, ())
    finally:
        ctx.close()
        sync_context.close()
    _assert_same(direct, merged)
    assert merged == (2 * num_contexts, 1)


def test_subrounds_raises_dependent_aggregations():
    @federated_language.federated_computation(_clients())
    def comp(x):
        total = federated_language.federated_sum(x)
        return federated_language.federated_max(federated_language.federated_broadcast(total))

    with pytest.raises(ValueError):
        tff.backends.native.compile_to_mergeable_comp_form(comp)
