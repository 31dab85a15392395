"""Port of TFF 0.19's ``core/impl/executors/reference_resolving_executor_test.py`` (tag
v0.19.0) to simharness's `ReferenceResolvingExecutor`.

Results compute to numpy here (TFF: eager tensors), so ``np.asarray(x)`` reads
``np.asarray(x)``; the event loop of each test is a new one (``asyncio.get_event_loop()``
outside a running loop is deprecated in Python 3.11). ``test_raises_with_closure`` builds its
closure from building blocks: simharness's tracer lifts a captured value into the mapped
function's argument, so the traced ``foo`` of TFF's test runs. Skipped: none.
"""

import asyncio

import numpy as np
import tensorflow as tf
from absl.testing import absltest

import simharness as tff
from simharness import framework
from simharness.core import building_blocks as bb
from simharness.core.structure import Struct, map_structure
from tests.tff.executors019 import executor_test_utils
from tests.tff.executors019.executor_test_utils import computation_types, placements


def _new_loop(test):
    loop = asyncio.new_event_loop()
    test.addCleanup(loop.close)
    return loop


def create_test_executor_factory():
    executor = framework.EagerTFExecutor()
    executor = framework.ReferenceResolvingExecutor(executor)
    return framework.ResourceManagingExecutorFactory(lambda _: executor)


class ReferenceResolvingExecutorTest(absltest.TestCase):
    def test_with_no_arg_tf_comp_in_no_arg_fed_comp(self):
        ex = framework.ReferenceResolvingExecutor(framework.EagerTFExecutor())
        loop = _new_loop(self)

        @tff.federated_computation
        def comp():
            return 10

        v1 = loop.run_until_complete(ex.create_value(comp))
        v2 = loop.run_until_complete(ex.create_call(v1))
        result = loop.run_until_complete(v2.compute())
        self.assertEqual(np.asarray(result), 10)

    def test_with_one_arg_tf_comp_in_no_arg_fed_comp(self):
        ex = framework.ReferenceResolvingExecutor(framework.EagerTFExecutor())
        loop = _new_loop(self)

        @tff.tensorflow.computation(tf.int32)
        def add_one(x):
            return x + 1

        @tff.federated_computation
        def comp():
            return add_one(10)

        v1 = loop.run_until_complete(ex.create_value(comp))
        v2 = loop.run_until_complete(ex.create_call(v1))
        result = loop.run_until_complete(v2.compute())
        self.assertEqual(np.asarray(result), 11)

    def test_clear_failure_with_mismatched_types_in_create_call(self):
        ex = framework.ReferenceResolvingExecutor(framework.EagerTFExecutor())
        loop = _new_loop(self)

        @tff.federated_computation(tf.float32)
        def comp(x):
            return x

        v1 = loop.run_until_complete(ex.create_value(comp))
        v2 = loop.run_until_complete(ex.create_value(10, tf.int32))
        with self.assertRaisesRegex(TypeError, 'incompatible'):
            loop.run_until_complete(ex.create_call(v1, v2))

    def test_with_one_arg_tf_comp_in_one_arg_fed_comp(self):
        ex = framework.ReferenceResolvingExecutor(framework.EagerTFExecutor())
        loop = _new_loop(self)

        @tff.tensorflow.computation(tf.int32)
        def add_one(x):
            return x + 1

        @tff.federated_computation(tf.int32)
        def comp(x):
            return add_one(add_one(x))

        v1 = loop.run_until_complete(ex.create_value(comp))
        v2 = loop.run_until_complete(ex.create_value(10, tf.int32))
        v3 = loop.run_until_complete(ex.create_call(v1, v2))
        result = loop.run_until_complete(v3.compute())
        self.assertEqual(np.asarray(result), 12)

    def test_with_one_arg_tf_comp_in_two_arg_fed_comp(self):
        ex = framework.ReferenceResolvingExecutor(framework.EagerTFExecutor())
        loop = _new_loop(self)

        @tff.tensorflow.computation(tf.int32, tf.int32)
        def add_numbers(x, y):
            return x + y

        @tff.federated_computation(tf.int32, tf.int32)
        def comp(x, y):
            return add_numbers(x, x), add_numbers(x, y), add_numbers(y, y)

        v1 = loop.run_until_complete(ex.create_value(comp))
        v2 = loop.run_until_complete(ex.create_value(10, tf.int32))
        v3 = loop.run_until_complete(ex.create_value(20, tf.int32))
        v4 = loop.run_until_complete(ex.create_struct(Struct([('x', v2), ('y', v3)])))
        v5 = loop.run_until_complete(ex.create_call(v1, v4))
        result = loop.run_until_complete(v5.compute())
        self.assertEqual(str(map_structure(lambda x: np.asarray(x), result)), '<20,30,40>')

    def test_with_functional_parameter(self):
        ex = framework.ReferenceResolvingExecutor(framework.EagerTFExecutor())
        loop = _new_loop(self)

        @tff.tensorflow.computation(tf.int32)
        def add_one(x):
            return x + 1

        @tff.federated_computation(computation_types.FunctionType(tf.int32, tf.int32), tf.int32)
        def comp(f, x):
            return f(f(x))

        v1 = loop.run_until_complete(ex.create_value(comp))
        v2 = loop.run_until_complete(ex.create_value(add_one))
        v3 = loop.run_until_complete(ex.create_value(10, tf.int32))
        v4 = loop.run_until_complete(ex.create_struct(Struct([('f', v2), ('x', v3)])))
        v5 = loop.run_until_complete(ex.create_call(v1, v4))
        result = loop.run_until_complete(v5.compute())
        self.assertEqual(np.asarray(result), 12)

    def test_with_tuples(self):
        ex = framework.ReferenceResolvingExecutor(framework.EagerTFExecutor())
        loop = _new_loop(self)

        @tff.tensorflow.computation(tf.int32, tf.int32)
        def add_numbers(x, y):
            return x + y

        @tff.federated_computation
        def comp():
            return add_numbers(10, 20)

        v1 = loop.run_until_complete(ex.create_value(comp))
        v2 = loop.run_until_complete(ex.create_call(v1))
        result = loop.run_until_complete(v2.compute())
        self.assertEqual(np.asarray(result), 30)

    def test_create_selection_with_tuples(self):
        ex = framework.ReferenceResolvingExecutor(framework.EagerTFExecutor())
        loop = _new_loop(self)

        v1 = loop.run_until_complete(ex.create_value(10, tf.int32))
        v2 = loop.run_until_complete(ex.create_value(20, tf.int32))
        v3 = loop.run_until_complete(ex.create_struct(Struct([(None, v1), (None, v2)])))
        v4 = loop.run_until_complete(ex.create_selection(v3, 0))
        v5 = loop.run_until_complete(ex.create_selection(v3, 1))
        result0 = loop.run_until_complete(v4.compute())
        result1 = loop.run_until_complete(v5.compute())
        self.assertEqual(np.asarray(result0), 10)
        self.assertEqual(np.asarray(result1), 20)

    def test_with_nested_lambdas(self):
        ex = framework.ReferenceResolvingExecutor(framework.EagerTFExecutor())
        loop = _new_loop(self)

        @tff.tensorflow.computation(tf.int32, tf.int32)
        def add_numbers(x, y):
            return x + y

        @tff.federated_computation(tf.int32)
        def comp(x):

            @tff.federated_computation(tf.int32)
            def nested_comp(y):
                return add_numbers(x, y)

            return nested_comp(1)

        v1 = loop.run_until_complete(ex.create_value(comp))
        v2 = loop.run_until_complete(ex.create_value(10, tf.int32))
        v3 = loop.run_until_complete(ex.create_call(v1, v2))
        result = loop.run_until_complete(v3.compute())
        self.assertEqual(np.asarray(result), 11)

    def test_with_block(self):
        ex = framework.ReferenceResolvingExecutor(framework.EagerTFExecutor())
        loop = _new_loop(self)

        f_type = computation_types.FunctionType(tf.int32, tf.int32)
        a = bb.Reference('a', computation_types.StructType([('f', f_type), ('x', tf.int32)]))
        ret = bb.Block(
            [('f', bb.Selection(a, name='f')), ('x', bb.Selection(a, name='x'))],
            bb.Call(
                bb.Reference('f', f_type),
                bb.Call(bb.Reference('f', f_type), bb.Reference('x', tf.int32)),
            ),
        )
        comp = bb.Lambda(a.name, a.type_signature, ret)

        @tff.tensorflow.computation(tf.int32)
        def add_one(x):
            return x + 1

        v1 = loop.run_until_complete(ex.create_value(comp, comp.type_signature))
        v2 = loop.run_until_complete(ex.create_value(add_one))
        v3 = loop.run_until_complete(ex.create_value(10, tf.int32))
        v4 = loop.run_until_complete(ex.create_struct(Struct([('f', v2), ('x', v3)])))
        v5 = loop.run_until_complete(ex.create_call(v1, v4))
        result = loop.run_until_complete(v5.compute())
        self.assertEqual(np.asarray(result), 12)

    def test_with_federated_map(self):
        eager_ex = framework.EagerTFExecutor()
        factory = framework.FederatedResolvingStrategy.factory({placements.SERVER: eager_ex})
        federated_ex = framework.FederatingExecutor(factory, eager_ex)
        ex = framework.ReferenceResolvingExecutor(federated_ex)
        loop = _new_loop(self)

        @tff.tensorflow.computation(tf.int32)
        def add_one(x):
            return x + 1

        @tff.federated_computation(computation_types.at_server(tf.int32))
        def comp(x):
            return tff.federated_map(add_one, x)

        v1 = loop.run_until_complete(ex.create_value(comp))
        v2 = loop.run_until_complete(ex.create_value(10, computation_types.at_server(tf.int32)))
        v3 = loop.run_until_complete(ex.create_call(v1, v2))
        result = loop.run_until_complete(v3.compute())
        self.assertEqual(np.asarray(result), 11)

    def test_with_federated_map_and_broadcast(self):
        eager_ex = framework.EagerTFExecutor()
        factory = framework.FederatedResolvingStrategy.factory(
            {placements.SERVER: eager_ex, placements.CLIENTS: [eager_ex for _ in range(3)]}
        )
        federated_ex = framework.FederatingExecutor(factory, eager_ex)
        ex = framework.ReferenceResolvingExecutor(federated_ex)
        loop = _new_loop(self)

        @tff.tensorflow.computation(tf.int32)
        def add_one(x):
            return x + 1

        @tff.federated_computation(computation_types.at_server(tf.int32))
        def comp(x):
            return tff.federated_map(add_one, tff.federated_broadcast(x))

        v1 = loop.run_until_complete(ex.create_value(comp))
        v2 = loop.run_until_complete(ex.create_value(10, computation_types.at_server(tf.int32)))
        v3 = loop.run_until_complete(ex.create_call(v1, v2))
        result = loop.run_until_complete(v3.compute())
        self.assertCountEqual([np.asarray(x) for x in result], [11, 11, 11])

    def test_raises_with_closure(self):
        eager_ex = framework.EagerTFExecutor()
        factory = framework.FederatedResolvingStrategy.factory(
            {
                placements.SERVER: eager_ex,
            }
        )
        federated_ex = framework.FederatingExecutor(factory, eager_ex)
        ex = framework.ReferenceResolvingExecutor(federated_ex)
        loop = _new_loop(self)

        # simharness's tracer lifts a captured value into the mapped function's argument
        # (the traced `foo` runs), so the closure TFF's tracer produced is built by hand:
        # `(arg -> federated_apply(<(z -> arg[0]), arg[1]>))`.
        arg_type = computation_types.StructType(
            [('x', tf.int32), ('y', computation_types.at_server(tf.int32))]
        )
        arg = bb.Reference('arg', arg_type)
        bar = bb.Lambda('z', tf.int32, bb.Selection(arg, name='x'))
        apply = bb.Intrinsic(
            'federated_apply',
            computation_types.FunctionType(
                [bar.type_signature, computation_types.at_server(tf.int32)],
                computation_types.at_server(tf.int32),
            ),
        )
        foo = bb.Lambda(
            'arg',
            arg_type,
            bb.Call(apply, bb.Struct([(None, bar), (None, bb.Selection(arg, name='y'))])),
        )

        v1 = loop.run_until_complete(ex.create_value(foo))
        v2 = loop.run_until_complete(
            ex.create_value(
                Struct([('x', 0), ('y', 0)]), [tf.int32, computation_types.at_server(tf.int32)]
            )
        )
        with self.assertRaisesRegex(
            RuntimeError, 'lambda passed to intrinsic contains references to captured variables'
        ):
            loop.run_until_complete(ex.create_call(v1, v2))

    def test_execution_of_tensorflow(self):

        @tff.tensorflow.computation
        def comp():
            return tf.math.add(5, 5)

        executor = create_test_executor_factory()
        with executor_test_utils.install_executor(executor):
            result = comp()

        self.assertEqual(result, 10)
