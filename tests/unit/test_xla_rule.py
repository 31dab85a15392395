"""The XLA rule for TF computations (`simharness.core.xla`): what it compiles, why not, forcing."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from simharness.core import types as T, xla
from simharness.errors import SimharnessTypeError
from simharness.executors.leaf.embedded_function import EmbeddedFunction
from simharness.stacks import thread_debugging_executor_factory

BIG = sh.TensorType(tf.float32, [256, 256])
SMALL = sh.TensorType(tf.float32, [4, 4])


def _decision(comp):
    (d,) = xla.report(comp).values()
    return d


@sh.tf_computation(BIG)
def big_matmul(x):
    return tf.matmul(x, x) * 0.5


def test_the_rule_is_structural_and_says_why():
    assert _decision(big_matmul) == {
        'compiled': True,
        'reason': ('matmul, no stateful op, >= 65536 tensor elements per call'),
    }

    @sh.tf_computation(SMALL)
    def small(x):
        return tf.matmul(x, x)

    assert 'small: 32 tensor elements' in _decision(small)['reason']

    @sh.tf_computation(BIG)
    def elementwise(x):
        return tf.tanh(x) * 2.0

    assert _decision(elementwise) == {
        'compiled': False,
        'reason': 'no matmul (nothing for XLA to gain)',
    }

    @sh.tf_computation(BIG)
    def noisy(x):
        return tf.matmul(x, x) + tf.random.uniform([256, 256])

    assert _decision(noisy)['compiled'] is False
    assert 'stateful random op RandomUniform' in _decision(noisy)['reason']

    @sh.tf_computation(sh.TensorType(tf.float32, [8, 32, 32, 3]))
    def conv(x):
        return tf.nn.conv2d(x, tf.ones([3, 3, 3, 256]), 1, 'SAME')

    assert _decision(conv) == {
        'compiled': False,
        'reason': 'convolution Conv2D (oneDNN is faster on CPU)',
    }


def test_a_server_finalizer_runs_in_the_graph_runtime_whatever_the_model_s_size():
    """The optimizer finalizer runs once a round: its finiteness check has no matmul, so
    the rule does not compile it (an XLA compile is ~0.4 s of a program's first round)."""
    weights = sh.learning.models.ModelWeights(
        trainable=[sh.TensorType(tf.float32, [784, 100]), sh.TensorType(tf.float32, [100])],
        non_trainable=[],
    )
    finalizer = sh.learning.templates.build_apply_optimizer_finalizer(
        sh.learning.optimizers.build_sgdm(1.0, momentum=0.9),
        sh.types.to_type(weights),
    )
    decisions = xla.report(finalizer.next)
    assert decisions and all(
        d == {'compiled': False, 'reason': 'no matmul (nothing for XLA to gain)'}
        for d in decisions.values()
    ), decisions


def test_forcing_per_computation_and_what_forcing_cannot_do():
    @sh.tf_computation(SMALL, jit_compile=True)
    def small_on(x):
        return tf.matmul(x, x)

    assert _decision(small_on) == {'compiled': True, 'reason': 'forced on'}

    @sh.tf_computation(BIG, jit_compile=False)
    def big_off(x):
        return tf.matmul(x, x) * 0.5

    assert _decision(big_off) == {'compiled': False, 'reason': 'forced off'}

    @sh.tf_computation(SMALL, jit_compile=True)
    def strings(x):
        return tf.strings.to_number(tf.strings.as_string(x))

    d = _decision(strings)
    assert (
        d['compiled'] is False
        and 'XLA cannot compile it' in d['reason']
        and 'AsString' in d['reason']
    )
    np.testing.assert_array_equal(strings(np.eye(4, dtype=np.float32)), np.eye(4))

    @sh.tf_computation(SMALL, jit_compile=True)
    def noisy(x):
        return x + tf.random.uniform([4, 4])

    assert _decision(noisy)['compiled'] is False  # XLA would ignore the random op's seed


def test_the_marker_is_idempotent_and_changes_nothing_computed():
    comp = big_matmul.to_building_block()
    on = xla.with_jit_compile(comp, True)
    assert xla.with_jit_compile(on, True) is on
    back = xla.with_jit_compile(on, None)
    assert _decision(back)['reason'] == _decision(comp)['reason'] != 'forced on'
    off = xla.with_jit_compile(on, False)
    x = tf.constant(np.random.default_rng(0).normal(size=(256, 256)).astype(np.float32))
    graph = EmbeddedFunction(off)
    assert not graph.xla.compiled
    np.testing.assert_allclose(
        EmbeddedFunction(on).call_flat([x])[0].numpy(),
        graph.call_flat([x])[0].numpy(),
        rtol=1e-5,
        atol=1e-4,
    )
    assert (
        graph.call_flat([x])[0].numpy().tobytes()
        == EmbeddedFunction(comp).concrete(x)[0].numpy().tobytes()
    )


def test_forcing_per_context_and_the_computation_s_own_choice_wins():
    @sh.tf_computation(SMALL, jit_compile=False)
    def own_off(x):
        return tf.matmul(x, x)

    @sh.federated_computation(sh.type_at_clients(BIG), sh.type_at_clients(SMALL))
    def both(xs, ys):
        return sh.federated_map(big_matmul, xs), sh.federated_map(own_off, ys)

    forced = xla.report(xla.force_tree(both.to_building_block(), False))
    assert sorted(d['reason'] for d in forced.values()) == ['forced off', 'forced off']
    forced_on = xla.report(xla.force_tree(both.to_building_block(), True))
    assert sorted(d['reason'] for d in forced_on.values()) == ['forced off', 'forced on']

    rng = np.random.default_rng(1)
    xs = [rng.normal(size=(256, 256)).astype(np.float32) for _ in range(3)]
    ys = [np.eye(4, dtype=np.float32)] * 3
    graph = EmbeddedFunction(xla.with_jit_compile(big_matmul.to_building_block(), False))
    want = [graph.call_flat([tf.constant(x)])[0].numpy().tobytes() for x in xs]
    with sh.execution_context(
        thread_debugging_executor_factory(clients_per_thread=2), jit_compile=False
    ):
        got, _ = both(xs, ys)
    assert [np.asarray(g).tobytes() for g in got] == want


def test_bad_choices_are_clear_errors():
    with pytest.raises(
        SimharnessTypeError, match="jit_compile must be True, False or None, got 'yes' of type str"
    ):
        sh.tf_computation(SMALL, jit_compile='yes')
    with pytest.raises(SimharnessTypeError, match="unexpected keyword argument 'jitcompile'"):
        sh.tf_computation(SMALL, jitcompile=True)
    with pytest.raises(SimharnessTypeError, match='jit_compile must be a bool'):
        sh.ExecutionContext(thread_debugging_executor_factory(), jit_compile=1)
    with pytest.raises(SimharnessTypeError, match='jit_compile applies to TF computations'):
        xla.with_jit_compile(
            sh.federated_computation(
                lambda: sh.federated_value(1.0, sh.SERVER)
            ).to_building_block(),
            True,
        )


def test_worker_processes_inherit_single_threaded_xla_calls():
    import os

    flags = os.environ['XLA_FLAGS'].split()
    assert '--xla_cpu_multi_thread_eigen=false' in flags
    assert (
        '--xla_disable_hlo_passes=while-loop-invariant-code-motion,'
        'while-loop-expensive-invariant-code-motion'
    ) in flags


@pytest.mark.parametrize(
    'user, want',
    [
        (
            '',
            [
                '--xla_cpu_multi_thread_eigen=false',
                '--xla_disable_hlo_passes=while-loop-invariant-code-motion,'
                'while-loop-expensive-invariant-code-motion',
            ],
        ),
        # the user's choices are kept; our passes join the user's list of passes
        (
            '--xla_cpu_multi_thread_eigen=true --xla_disable_hlo_passes=algsimp --xla_dump_to=/tmp/d',
            [
                '--xla_cpu_multi_thread_eigen=true',
                '--xla_dump_to=/tmp/d',
                '--xla_disable_hlo_passes=algsimp,while-loop-invariant-code-motion,'
                'while-loop-expensive-invariant-code-motion',
            ],
        ),
        (
            '--xla_disable_hlo_passes=while-loop-invariant-code-motion',
            [
                '--xla_cpu_multi_thread_eigen=false',
                '--xla_disable_hlo_passes=while-loop-invariant-code-motion,'
                'while-loop-expensive-invariant-code-motion',
            ],
        ),
    ],
)
def test_configure_xla_adds_its_flags_to_the_user_s(monkeypatch, user, want):
    import os

    from simharness.core import determinism

    monkeypatch.setenv('XLA_FLAGS', user)
    determinism.configure_xla()
    assert os.environ['XLA_FLAGS'].split() == want
    determinism.configure_xla()  # idempotent
    assert os.environ['XLA_FLAGS'].split() == want


def test_a_weighting_map_runs_batched_in_xla_with_the_bits_of_one_graph_call_per_client():
    spec = (tf.TensorSpec([7, 3], tf.float32), tf.TensorSpec([], tf.int32))

    @sh.tf_computation(*spec)
    def weigh(x, w):  # TFF's MeanFactory `_mul`
        return -x * tf.cast(w, tf.float32)

    @sh.tf_computation(*spec)
    def weigh_and_add(x, w):  # an add next to a multiply: XLA would fuse them (one rounding)
        return x * tf.cast(w, tf.float32) + 1.0

    @sh.tf_computation(tf.TensorSpec([7, 3], tf.float32))
    def to_int(x):  # XLA and TF convert NaN and overflowing floats to ints differently
        return tf.cast(x * 2.0, tf.int32)

    fns = {
        f: EmbeddedFunction(c.to_building_block())
        for f, c in [('weigh', weigh), ('weigh_and_add', weigh_and_add), ('to_int', to_int)]
    }
    assert [fns[f].xla_exact for f in fns] == [True, False, False]
    assert all(fns[f].exact_elementwise and not fns[f].xla.compiled for f in fns)
    rng = np.random.default_rng(0)
    n = 13
    x = (rng.standard_normal((n, 7, 3)) * 10.0 ** rng.integers(-45, 38, (n, 7, 3))).astype(
        np.float32
    )
    x[0, 0, :] = [np.nan, np.inf, 1e-40]  # a NaN, an infinity, a denormal (flushed: TF and XLA)
    w = rng.integers(-5, 1000, n).astype(np.int32)
    f = fns['weigh']
    single = np.stack(
        [f.call_flat([tf.constant(x[i]), tf.constant(w[i])])[0].numpy() for i in range(n)]
    )
    for lo, hi in [(0, n), (0, 1), (2, 9), (5, 13)]:  # blocks of any size: the same bits
        [out] = f.call_batched(
            (False, False), [], [tf.constant(x[lo:hi]), tf.constant(w[lo:hi])], hi - lo
        )
        assert out.numpy().tobytes() == single[lo:hi].tobytes()


@pytest.mark.parametrize('jit', [False, True])
def test_a_single_call_runs_on_flat_tensors_with_the_structured_call_s_results(jit):
    """`EmbeddedFunction.call_flat` of one client (graph runtime or compiled) skips TF's
    argument binding when the leaves fit the signature; numpy leaves and wrong dtypes take the
    structured call (converted, or TF's error)."""

    @sh.tf_computation(
        T.StructType(
            [('w', T.TensorType(np.float32, [4, 3])), ('b', T.TensorType(np.float32, [3]))]
        ),
        T.TensorType(np.float32, [2, 4]),
        jit_compile=jit,
    )
    def affine(p, x):
        return tf.nn.relu(tf.matmul(x, p['w']) + p['b']), tf.reduce_sum(x)

    fn = EmbeddedFunction(affine.to_building_block())
    assert fn.xla.compiled is jit
    leaves = [
        tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3) / 7),
        tf.constant([0.5, -1.0, 2.0], tf.float32),
        tf.constant(np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)),
    ]
    single = fn._single()
    assert single._fits(leaves)
    want = fn._callable()(*leaves)  # TF's structured call
    got = fn.call_flat(leaves)
    assert len(got) == 2
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.numpy().tobytes() == w.numpy().tobytes()
    as_numpy = [leaves[0].numpy()] + leaves[1:]
    assert not single._fits(as_numpy)
    assert fn.call_flat(as_numpy)[0].numpy().tobytes() == want[0].numpy().tobytes()
    wrong = leaves[:2] + [tf.constant(np.zeros((2, 4)), tf.float64)]
    assert not single._fits(wrong)
    with pytest.raises((TypeError, ValueError, tf.errors.InvalidArgumentError)):
        fn.call_flat(wrong)


def test_a_block_call_on_flat_tensors_gives_the_structured_call_s_results_and_falls_back():
    from simharness.executors.leaf.embedded_function import _FlatCall

    sig = (
        (tf.TensorSpec([3], tf.float32),),
        (tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([None], tf.int32)),
    )

    @tf.function(input_signature=sig, autograph=False)
    def block(shared, stacked):
        x, n = stacked
        return x * shared[0] + tf.cast(n, tf.float32)[:, None], n + 1

    concrete = block.get_concrete_function()
    call = _FlatCall(concrete)
    shared = (tf.constant([1.0, 2.0, 3.0]),)
    stacked = (
        tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3)),
        tf.constant([1, 2, 3, 4], tf.int32),
    )
    assert call._fits(list(shared + stacked))
    want = concrete(shared, stacked)
    got = call(shared, stacked)
    assert isinstance(got, tuple) and len(got) == 2
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.numpy().tobytes() == w.numpy().tobytes()
    # Not what the signature says: the structured call decides (converts numpy, or raises).
    as_numpy = (shared[0].numpy(),)
    assert not call._fits(list(as_numpy + stacked))
    assert call(as_numpy, stacked)[0].numpy().tobytes() == want[0].numpy().tobytes()
    wrong_dtype = (stacked[0], tf.constant([1, 2, 3, 4], tf.int64))
    assert not call._fits(list(shared + wrong_dtype))
    with pytest.raises((TypeError, ValueError)):
        call(shared, wrong_dtype)
    wrong_shape = (tf.zeros([4, 2]), stacked[1])
    assert not call._fits(list(shared + wrong_shape))
    with pytest.raises((TypeError, ValueError)):
        call(shared, wrong_shape)
