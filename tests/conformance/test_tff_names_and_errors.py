"""Porting is renaming: TFF's names exist under `simharness.` and behave, and errors are TFF's classes.

Tests taking `stack` run on every stack of `tests/stacks.py`; the others do
not depend on the stack (tracing, types, argument checks) and run once.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from simharness import framework as fw
from simharness import structure as S
from simharness import templates
from simharness.errors import SimharnessError, SimharnessTypeError, SimharnessValueError

I32_AT_C = sh.type_at_clients(tf.int32)
I32_AT_S = sh.type_at_server(tf.int32)


# ---------------------------------------------------------------- names


@pytest.mark.parametrize(
    'module, name',
    [
        (sh, n)
        for n in [
            'federated_secure_sum',
            'federated_secure_sum_bitwidth',
            'check_returns_type',
            'structure',
            'templates',
            'framework',
            'learning',
        ]
    ]
    + [
        (fw, n)
        for n in [
            'ExecutionContext',
            'get_context_stack',
            'set_default_context',
            'ResourceManagingExecutorFactory',
            'EagerTFExecutor',
            'local_executor_factory',
            'thread_debugging_executor_factory',
        ]
    ]
    + [(templates, n) for n in ['IterativeProcess', 'MeasuredProcess', 'MeasuredProcessOutput']]
    + [
        (S, n)
        for n in [
            'Struct',
            'to_odict',
            'to_odict_or_tuple',
            'from_container',
            'name_list',
            'name_list_with_nones',
            'to_elements',
            'iter_elements',
            'map_structure',
            'flatten',
            'pack_sequence_as',
            'update_struct',
            'has_field',
            'is_same_structure',
            'name_to_index_map',
        ]
    ],
    ids=lambda x: getattr(x, '__name__', x),
)
def test_tff_name_exists(module, name):
    assert hasattr(module, name)
    assert name in module.__all__


@pytest.mark.xdist_group('fresh-import')
def test_subpackages_are_attributes_after_a_plain_import():
    # A fresh interpreter: `import simharness`, then simharness.learning, .framework,
    # .templates and .structure are attributes (tests/fresh_import.py, step 1; the same
    # process is test_cli_friction's quiet start-up check).
    from fresh_import import fresh_import_run  # tests/fresh_import.py

    out = fresh_import_run()
    assert out.stdout.splitlines()[:1] == ['subpackages ok'], (out.stdout, out.stderr[-2000:])
    assert out.returncode == 0, out.stderr[-2000:]


def test_no_federated_map_all_equal_as_in_tff():
    # TFF's public API has no `federated_map_all_equal` (only an internal intrinsic): its
    # `federated_map` of an all-equal client value gives `{U}@CLIENTS`, and so does ours.
    assert not hasattr(sh, 'federated_map_all_equal')

    @sh.tf_computation(tf.int32)
    def inc(x):
        return x + 1

    @sh.federated_computation(I32_AT_S)
    def bcast_inc(x):
        return sh.federated_map(inc, sh.federated_broadcast(x))

    assert str(bcast_inc.type_signature.result) == '{int32}@CLIENTS'


# ---------------------------------------------------------------- placements and type strings


def test_placements_print_as_in_tff():
    assert (str(sh.CLIENTS), str(sh.SERVER)) == ('CLIENTS', 'SERVER')
    assert repr(sh.CLIENTS) == "PlacementLiteral('clients')"
    assert (sh.CLIENTS.uri, sh.SERVER.uri, sh.CLIENTS.name) == ('clients', 'server', 'CLIENTS')
    assert f'{I32_AT_C}' == '{int32}@CLIENTS'
    assert sh.type_at_clients(tf.int32, all_equal=True).compact_representation() == 'int32@CLIENTS'
    assert I32_AT_S.compact_representation() == 'int32@SERVER'
    ft = sh.FunctionType(I32_AT_C, I32_AT_S)
    assert ft.compact_representation() == '({int32}@CLIENTS -> int32@SERVER)' == str(ft)
    assert (
        sh.to_type([('a', tf.float32), ('b', (tf.int32, [2]))]).compact_representation()
        == '<a=float32,b=int32[2]>'
    )


# ---------------------------------------------------------------- federated_secure_sum


@sh.federated_computation(I32_AT_C)
def secure_sum_5(xs):
    return sh.federated_secure_sum(xs, 5)


@sh.federated_computation(sh.type_at_clients((tf.int32, tf.int64)))
def secure_sum_pair(xs):
    return sh.federated_secure_sum(xs, (3, 1000))


@sh.federated_computation(sh.type_at_clients(collections.OrderedDict(a=tf.int32, b=tf.int32)))
def secure_sum_one_max(xs):
    return sh.federated_secure_sum(xs, 7)  # one int for every leaf


@sh.federated_computation(I32_AT_C)
def secure_sum_bitwidth_keyword(xs):
    return sh.federated_secure_sum(xs, bitwidth=3)  # TFF 0.17-0.19's spelling


def test_federated_secure_sum(stack):
    assert str(secure_sum_5.type_signature) == '({int32}@CLIENTS -> int32@SERVER)'
    result = secure_sum_5([1, 2, 5, 5, 0])
    assert result == 13 and isinstance(result, np.int32)
    assert secure_sum_5([5] * 33) == 165  # sums past max_input and 2**bitwidth are exact
    pair = secure_sum_pair([(1, 999)] * 40)
    assert pair == (40, 39960) and isinstance(pair[1], np.int64)
    assert secure_sum_one_max([{'a': 7, 'b': 1}, {'a': 0, 'b': 7}]) == collections.OrderedDict(
        a=7, b=8
    )
    assert secure_sum_bitwidth_keyword([7, 7]) == 14
    with pytest.raises(SimharnessValueError, match=r'client 1: .* = 6 is outside \[0, 5\]'):
        secure_sum_5([1, 6])
    with pytest.raises(SimharnessValueError, match=r'client 0: .* = -1 is outside \[0, 5\]'):
        secure_sum_5([-1, 1])


@pytest.mark.parametrize(
    'value_type, max_input, error, message',
    [
        (tf.float32, 5, SimharnessTypeError, 'integers only'),
        (tf.int32, -1, SimharnessValueError, r'max_input must be in \[0, 2\*\*62 - 1\], got -1'),
        (tf.int32, 2**62, SimharnessValueError, 'max_input must be in'),
        (tf.int32, 1.5, SimharnessTypeError, 'max_input must be an int'),
        (tf.int32, True, SimharnessTypeError, 'max_input must be an int'),
        (tf.int32, (1, 2), SimharnessTypeError, 'max_input must be an int'),
        ((tf.int32, tf.int32), (1, 2, 3), SimharnessTypeError, 'structure of such ints'),
        (tf.int32, None, SimharnessTypeError, 'missing argument max_input'),
    ],
)
def test_federated_secure_sum_argument_errors(value_type, max_input, error, message):
    with pytest.raises(error, match=message):
        sh.federated_computation(sh.type_at_clients(value_type))(
            lambda xs: sh.federated_secure_sum(xs, max_input)
        )


def test_federated_secure_sum_needs_client_values():
    with pytest.raises(SimharnessTypeError, match='placed at CLIENTS'):
        sh.federated_computation(I32_AT_S)(lambda x: sh.federated_secure_sum(x, 3))
    with pytest.raises(SimharnessTypeError, match='not both'):
        sh.federated_computation(I32_AT_C)(lambda x: sh.federated_secure_sum(x, 3, bitwidth=2))


# ---------------------------------------------------------------- check_returns_type


def test_check_returns_type():
    @sh.tf_computation(tf.int32, tf.int32)
    @sh.check_returns_type(collections.OrderedDict(s=tf.int32, both=(tf.int32, [2])))
    def pack(x, y):
        return collections.OrderedDict(s=x + y, both=tf.stack([x, y]))

    assert pack(1, 2)['s'] == 3

    @sh.federated_computation(I32_AT_C)
    @sh.check_returns_type(I32_AT_S)
    def total(xs):
        return sh.federated_sum(xs)

    assert total([1, 2]) == 3

    with pytest.raises(
        SimharnessTypeError,
        match='returned a value of type int32, but check_returns_type asserts float32',
    ) as e:
        sh.tf_computation(tf.int32)(sh.check_returns_type(tf.float32)(lambda x: x + 1))
    assert e.value.expected == sh.TensorType(tf.float32)
    with pytest.raises(SimharnessTypeError, match=r'int32\[2\].*asserts int32'):
        sh.tf_computation(tf.int32)(sh.check_returns_type(tf.int32)(lambda x: tf.stack([x, x])))
    with pytest.raises(
        SimharnessTypeError,
        match=r'int32@SERVER, but check_returns_type asserts '
        r'\{int32\}@CLIENTS',
    ):
        sh.federated_computation(I32_AT_C)(
            sh.check_returns_type(I32_AT_C)(lambda xs: sh.federated_sum(xs))
        )
    with pytest.raises(SimharnessTypeError, match='cannot convert'):
        sh.check_returns_type(object())


# ---------------------------------------------------------------- structure


def test_structure_functions():
    s = S.Struct([('a', 1), (None, 2)])
    assert S.name_list(s) == ['a'] and S.name_list_with_nones(s) == ['a', None]
    assert S.to_elements(s) == [('a', 1), (None, 2)] == list(S.iter_elements(s))
    assert S.name_to_index_map(s) == {'a': 0} and S.has_field(s, 'a') and not S.has_field(s, 'b')
    with pytest.raises(ValueError, match='unnamed'):
        S.to_odict(s)
    with pytest.raises(ValueError, match='both named and unnamed'):
        S.to_odict_or_tuple(s)
    nested = S.Struct.named(a=1, b=S.Struct.named(c=2))
    assert S.to_odict(nested, recursive=True) == collections.OrderedDict(
        a=1, b=collections.OrderedDict(c=2)
    )
    assert S.to_odict_or_tuple(S.Struct.unnamed(1, S.Struct.unnamed(2))) == (1, (2,))
    # a dict's keys are sorted, an OrderedDict's kept (TFF's rule)
    assert S.from_container({'b': 1, 'a': 2}) == S.Struct([('a', 2), ('b', 1)])
    assert S.from_container(collections.OrderedDict(b=1, a=2)).names == ('b', 'a')
    assert S.from_container([1, [2]]) == S.Struct.unnamed(1, [2])
    assert S.from_container([1, [2]], recursive=True) == S.Struct.unnamed(1, S.Struct.unnamed(2))
    with pytest.raises(TypeError, match='cannot convert 5'):
        S.from_container(5)
    x = S.Struct.named(a=1, b=S.Struct.unnamed(2, 3))
    y = S.Struct.named(a=10, b=S.Struct.unnamed(20, 30))
    assert S.map_structure(lambda u, v: u + v, x, y) == S.Struct.named(
        a=11, b=S.Struct.unnamed(22, 33)
    )
    assert S.flatten(x) == [1, 2, 3]
    assert S.pack_sequence_as(x, [7, 8, 9]) == S.Struct.named(a=7, b=S.Struct.unnamed(8, 9))
    assert S.is_same_structure(x, y) and not S.is_same_structure(x, S.Struct.named(a=1, b=2))
    with pytest.raises(TypeError, match='does not have the structure'):
        S.map_structure(lambda u, v: u, x, S.Struct.named(a=1, b=2))
    with pytest.raises(ValueError, match='at least one'):
        S.map_structure(lambda: 0)
    assert S.update_struct(S.Struct.named(a=1, b=2), b=5) == S.Struct.named(a=1, b=5)
    assert S.update_struct({'a': 1}, a=2) == {'a': 2}
    with pytest.raises(KeyError):
        S.update_struct(S.Struct.named(a=1), c=1)
    with pytest.raises(TypeError, match='must be a simharness.structure.Struct'):
        S.name_list([1, 2])


# ---------------------------------------------------------------- templates


@sh.tf_computation
def count_init():
    return tf.constant(0, tf.int32)


@sh.tf_computation(tf.int32, tf.int32)
def count_next(state, x):
    return state + x, state * 2


@sh.federated_computation
def server_init():
    return sh.federated_value(0, sh.SERVER)


@sh.tf_computation(tf.int32, tf.int32)
def count_next_state(state, x):
    return state + x


@sh.federated_computation(I32_AT_S, I32_AT_C)
def measured_next(state, xs):
    total = sh.federated_sum(xs)
    return templates.MeasuredProcessOutput(
        state=sh.federated_map(count_next_state, sh.federated_zip([state, total])),
        result=total,
        measurements=sh.federated_value(1.0, sh.SERVER),
    )


def test_iterative_process(stack):
    process = templates.IterativeProcess(count_init, count_next)
    assert process.state_type == sh.TensorType(tf.int32)
    assert process.initialize is count_init and process.next is count_next
    state = process.initialize()
    state, out = process.next(state, 3)
    state, out = process.next(state, 4)
    assert (state, out) == (7, 6)
    assert templates.is_stateful(process)


def test_measured_process(stack):
    process = templates.MeasuredProcess(server_init, measured_next)
    assert process.state_type == I32_AT_S
    out = process.next(process.initialize(), [1, 2, 3])
    assert isinstance(out, templates.MeasuredProcessOutput)
    assert (out.state, out.result, out.measurements) == (6, 6, 1.0)
    out = process.next(out.state, [4])
    assert (out.state, out.result) == (10, 4)


@sh.tf_computation(tf.float32)
def float_next(state):
    return state


def test_template_type_errors_are_tff_classes():
    with pytest.raises(templates.TemplateStateNotAssignableError, match='int32.*float32'):
        templates.IterativeProcess(count_init, float_next)
    with pytest.raises(templates.TemplateInitFnParamNotEmptyError, match='no parameter'):
        templates.IterativeProcess(count_next, count_next)
    with pytest.raises(
        templates.TemplateNotMeasuredProcessOutputError, match='state=S,result=O,measurements=M'
    ):
        templates.MeasuredProcess(count_init, count_next)
    with pytest.raises(templates.TemplateStateNotAssignableError, match='the whole argument'):
        templates.IterativeProcess(count_init, count_next, next_is_multi_arg=False)
    with pytest.raises(SimharnessTypeError, match='must be a computation'):
        templates.IterativeProcess(lambda: 0, count_next)
    for cls in (
        templates.TemplateStateNotAssignableError,
        templates.TemplateInitFnParamNotEmptyError,
        templates.TemplateNotMeasuredProcessOutputError,
        templates.TemplateNextFnNumArgsError,
    ):
        assert issubclass(cls, TypeError) and issubclass(cls, SimharnessError)


# ---------------------------------------------------------------- contexts and factories


@sh.federated_computation
def client_count():
    return sh.federated_sum(sh.federated_value(1, sh.CLIENTS))


def test_context_stack_install_and_default():
    stack = fw.get_context_stack()
    ctx = fw.ExecutionContext(executor_fn=fw.local_executor_factory(default_num_clients=3))
    try:
        with stack.install(ctx) as installed:
            assert installed is ctx and stack.current is ctx
            assert client_count() == 3
        assert stack.current is not ctx
        fw.set_default_context(ctx)
        assert stack.current is ctx and sh.get_context() is ctx and client_count() == 3
        stack.set_default_context(None)  # back to a local thread stack (1 client)
        assert stack.current is not ctx and client_count() == 1
        assert client_count() == 1  # a context set by the user is left open
        with stack.install(ctx):
            assert client_count() == 3
    finally:
        fw.set_default_context(None)
        ctx.close()
    with pytest.raises(SimharnessTypeError, match='ctx must be an execution context'):
        fw.set_default_context(fw.local_executor_factory())
    with pytest.raises(SimharnessTypeError, match='ctx must be an execution context'):
        with stack.install('ctx'):
            pass
    # compiler_fn (TFF's): each computation compiled once, the result run in its place.
    seen = []

    @sh.tf_computation(np.int32)
    def plus_one(x):
        return x + 1

    @sh.tf_computation(np.int32)
    def times_ten(x):
        return x * 10

    def compiler(comp):
        seen.append(comp)
        return times_ten

    ctx = fw.ExecutionContext(fw.local_executor_factory(), compiler_fn=compiler)
    try:
        with stack.install(ctx):
            assert plus_one(2) == 20 and plus_one(3) == 30
        assert seen == [plus_one]
    finally:
        ctx.close()
    with pytest.raises(SimharnessTypeError, match='compiler_fn must be callable'):
        fw.ExecutionContext(fw.local_executor_factory(), compiler_fn=3)
    bad = fw.ExecutionContext(fw.local_executor_factory(), compiler_fn=lambda comp: 'x')
    try:
        with stack.install(bad), pytest.raises(SimharnessTypeError, match='compiler_fn returned'):
            plus_one(2)
    finally:
        bad.close()


def test_factory_default_num_clients_and_leaf_executor_fn():
    made = []

    def leaf():
        made.append(fw.EagerTFExecutor())
        return made[-1]

    with fw.local_executor_factory(default_num_clients=4, leaf_executor_fn=leaf) as factory:
        assert factory.default_num_clients == 4
        with sh.execution_context(factory):
            assert client_count() == 4
            assert secure_sum_5([1, 2]) == 3  # the arguments tell: 2 clients
        assert len(made) >= 3  # server, unplaced and client leaves
    # TFF's spelling: the executor class, called with device=
    factory = fw.thread_debugging_executor_factory(
        leaf_executor_fn=fw.EagerTFExecutor, default_num_clients=2
    )
    with sh.execution_context(factory):
        assert client_count() == 2
    with pytest.raises(SimharnessValueError, match='num_clients=2 fixes'):
        fw.local_executor_factory(num_clients=2, default_num_clients=3)
    with pytest.raises(SimharnessValueError, match='default_num_clients must be an int >= 0'):
        fw.local_executor_factory(default_num_clients=-1)
    with pytest.raises(SimharnessTypeError, match='leaf_executor_fn must be a callable'):
        fw.local_executor_factory(leaf_executor_fn='eager')
    with pytest.raises(SimharnessTypeError, match='leaf_executor_fn returned 5'):
        with sh.execution_context(fw.local_executor_factory(leaf_executor_fn=lambda: 5)):
            client_count()


def test_resource_managing_executor_factory():
    seen = []

    def stack_fn(cardinalities):
        seen.append(dict(cardinalities))
        return fw.local_executor_factory().create_executor(cardinalities)

    factory = fw.ResourceManagingExecutorFactory(stack_fn)
    with sh.execution_context(factory):
        assert secure_sum_5([1, 2, 3]) == 6
        assert secure_sum_5([1, 2, 3]) == 6  # the stack is cached
    assert seen == [{sh.CLIENTS: 3}]
    with pytest.raises(SimharnessTypeError, match='executor_stack_fn must be a callable'):
        fw.ResourceManagingExecutorFactory(None)
    with pytest.raises(SimharnessTypeError, match='returned 7 of type int, not an Executor'):
        fw.ResourceManagingExecutorFactory(lambda c: 7).create_executor({})


# ---------------------------------------------------------------- error classes


def _raises_builtin(fn, builtin):
    with pytest.raises(builtin) as info:
        fn()
    err = info.value
    assert isinstance(err, SimharnessError), f'{type(err).__name__}: {err}'
    other = ValueError if builtin is TypeError else TypeError
    assert not isinstance(err, other), f'{type(err).__name__} is also a {other.__name__}'


@pytest.mark.parametrize(
    'make, builtin',
    [
        # types: as tf.TensorShape / tf.dtypes.as_dtype and TFF's constructors
        (lambda: sh.TensorType(tf.int32, [-1]), ValueError),
        (lambda: sh.to_type((tf.int32, [-2])), ValueError),
        (lambda: sh.TensorType(tf.int32, [1.5]), TypeError),
        (lambda: sh.TensorType(tf.int32, 'ab'), TypeError),
        (lambda: sh.TensorType(tf.int32, object()), TypeError),
        (lambda: sh.TensorType(None), TypeError),
        (lambda: sh.TensorType('not-a-dtype'), TypeError),
        (lambda: sh.StructType(5), TypeError),
        (lambda: sh.FederatedType(tf.int32, 'clients'), TypeError),
        (lambda: sh.FederatedType(tf.int32, sh.CLIENTS, all_equal='yes'), TypeError),
        (lambda: sh.type_at_clients(tf.int32, all_equal=1), TypeError),
        (lambda: sh.to_type(None), TypeError),
        (lambda: sh.to_type(object()), TypeError),
        (lambda: sh.infer_type(object()), TypeError),
        # decorators: a bad spec fails at the decorator, as in TFF
        (lambda: sh.tf_computation(5), TypeError),
        (lambda: sh.federated_computation(object()), TypeError),
        (lambda: sh.tf_computation(tf.int32)(5), TypeError),
        (lambda: sh.tf_computation(tf.int32)(lambda: 1), TypeError),
        (lambda: sh.federated_computation(tf.int32, tf.int32)(lambda x: x), TypeError),
        # intrinsics
        (
            lambda: sh.federated_computation(I32_AT_C)(lambda x: sh.federated_value(x, 'clients')),
            TypeError,
        ),
        (lambda: sh.federated_computation(I32_AT_C)(lambda x: sh.federated_mean(x)), TypeError),
        (
            lambda: sh.federated_computation(I32_AT_C)(lambda x: sh.federated_broadcast(x)),
            TypeError,
        ),
        (
            lambda: sh.federated_computation(I32_AT_C)(
                lambda x: sh.federated_secure_sum_bitwidth(x, 0)
            ),
            ValueError,
        ),
        (lambda: sh.federated_sum([1, 2]), TypeError),  # outside a federated computation
        # calls
        (lambda: secure_sum_5(3), TypeError),
        (lambda: secure_sum_5(['a']), TypeError),
        (lambda: count_next_state(2**40, 1), ValueError),
        # contexts and factories
        (lambda: sh.ExecutionContext(5), TypeError),
        (lambda: fw.local_executor_factory(num_clients='3'), TypeError),
        (lambda: fw.local_executor_factory(max_fanout=0), ValueError),
    ],
)
def test_errors_are_the_builtin_classes_tff_raises(make, builtin):
    _raises_builtin(make, builtin)
