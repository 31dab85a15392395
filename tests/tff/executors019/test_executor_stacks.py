"""Port of TFF 0.19's ``core/impl/executors/executor_stacks_test.py`` (tag v0.19.0) to
simharness's factories (`framework.local_executor_factory`,
`thread_debugging_executor_factory`, `ResourceManagingExecutorFactory`).

``mock.patch`` targets name simharness's modules; results compute to numpy; stacks a test
builds are closed at its end (TFF left them to the garbage collector). Changed:
``test_construction_with_no_args`` checks for an `ExecutorFactory` (simharness's factories
are `CachingExecutorFactory`s; `ResourceManagingExecutorFactory` is one of them);
``test_executors_persisted_is_capped`` counts ``factory._stacks`` (TFF: ``_executors``); the
local factories of ``test_limiting_concurrency_constructs_one_eager_executor`` are given
TFF's default ``max_fanout=100`` (simharness's default is two threads per usable core).
Left out: the 16 ``sizing_executor_factory`` / ``SizingExecutorFactory`` parameters (TFF's
sizing executor has no simharness counterpart), and the classes
``UnplacedExecutorFactoryTest``, ``FederatingExecutorFactoryTest``,
``MinimalLengthFlatStackFnTest``, ``ComposingExecutorFactoryTest`` and
``RemoteExecutorFactoryTest`` (it patches TFF's ``RemoteExecutor``): they test TFF 0.19's
internal factory classes and its composing and gRPC remote stacks (simharness's remote
stack is tested in tests/remote).
"""

import math
from unittest import mock

import numpy as np
import tensorflow as tf
from absl.testing import absltest, parameterized

import simharness as tff
from simharness import framework
from tests.tff.executors019 import executor_test_utils
from tests.tff.executors019.executor_test_utils import computation_types, placements

executor_stacks = framework


def _temperature_sensor_example_next_fn():

    @tff.tensorflow.computation(computation_types.SequenceType(tf.float32), tf.float32)
    def count_over(ds, t):
        return ds.reduce(np.float32(0), lambda n, x: n + tf.cast(tf.greater(x, t), tf.float32))

    @tff.tensorflow.computation(computation_types.SequenceType(tf.float32))
    def count_total(ds):
        return ds.reduce(np.float32(0.0), lambda n, _: n + 1.0)

    @tff.federated_computation(
        computation_types.at_clients(computation_types.SequenceType(tf.float32)),
        computation_types.at_server(tf.float32),
    )
    def comp(temperatures, threshold):
        return tff.federated_mean(
            tff.federated_map(
                count_over, tff.federated_zip([temperatures, tff.federated_broadcast(threshold)])
            ),
            tff.federated_map(count_total, temperatures),
        )

    return comp


class ExecutorMock(mock.MagicMock, framework.Executor):
    async def create_value(self, *args):
        pass

    async def create_call(self, *args):
        pass

    async def create_selection(self, *args):
        pass

    async def create_struct(self, *args):
        pass

    async def close(self, *args):
        pass


def _create_concurrent_maxthread_tuples():
    tuples = []
    for concurrency in range(1, 5):
        local_ex_string = 'local_executor_{}_clients_per_thread'.format(concurrency)
        tf_executor_mock = ExecutorMock()
        ex_factory = executor_stacks.local_executor_factory(
            clients_per_thread=concurrency, max_fanout=100, leaf_executor_fn=tf_executor_mock
        )
        tuples.append((local_ex_string, ex_factory, concurrency, tf_executor_mock))
        debug_ex_string = 'debug_executor_{}_client_thread'.format(concurrency)
        tf_executor_mock = ExecutorMock()
        ex_factory = executor_stacks.thread_debugging_executor_factory(
            clients_per_thread=concurrency, leaf_executor_fn=tf_executor_mock
        )
        tuples.append((debug_ex_string, ex_factory, concurrency, tf_executor_mock))
    return tuples


class ResourceManagingExecutorFactoryTest(absltest.TestCase):
    @mock.patch('simharness.stacks.EagerTFExecutor', return_value=ExecutorMock())
    def test_ensure_closed_closes_executor_passed_at_initialization(self, mock_ex):

        def _stack_fn(x):
            del x  # Unused
            return ExecutorMock()

        resource_manager = framework.ResourceManagingExecutorFactory(
            _stack_fn, ensure_closed=[mock_ex]
        )
        resource_manager.clean_up_executors()
        mock_ex.close.assert_called_once()


class ConcreteExecutorFactoryTest(parameterized.TestCase):
    def _maybe_wrap_stack_fn(self, stack_fn, ex_factory):
        """The stack_fn for SizingExecutorFactory requires two outputs.

        If required, we will wrap the stack_fn and provide a whimsy value as the
        second return value.

        Args:
            stack_fn: The original stack_fn
            ex_factory: A class which inherits from ExecutorFactory.

        Returns:
            A stack_fn that might additionally return a list as the second value.
        """
        return stack_fn

    def test_subclass_base_fails_no_create_method(self):

        class NotCallable(framework.ExecutorFactory):
            def clean_up_executors(self):
                pass

        with self.assertRaisesRegex(TypeError, 'instantiate abstract class'):
            NotCallable()

    def test_subclass_base_fails_no_cleanup(self):

        class NoCleanup(framework.ExecutorFactory):
            def create_executor(self, x):
                pass

        with self.assertRaisesRegex(TypeError, 'instantiate abstract class'):
            NoCleanup()

    def test_instantiation_succeeds_both_methods_specified(self):

        class Fine(framework.ExecutorFactory):
            def create_executor(self, x):
                pass

            def clean_up_executors(self):
                pass

        Fine()

    @parameterized.named_parameters(
        ('ResourceManagingExecutorFactory', framework.ResourceManagingExecutorFactory)
    )
    def test_concrete_class_instantiates_stack_fn(self, ex_factory):

        def _stack_fn(x):
            del x  # Unused
            return framework.EagerTFExecutor()

        maybe_wrapped_stack_fn = self._maybe_wrap_stack_fn(_stack_fn, ex_factory)
        factory = ex_factory(maybe_wrapped_stack_fn)
        self.assertIsInstance(factory, ex_factory)

    @parameterized.named_parameters(
        ('ResourceManagingExecutorFactory', framework.ResourceManagingExecutorFactory)
    )
    def test_call_constructs_executor(self, ex_factory):

        def _stack_fn(x):
            del x  # Unused
            return framework.EagerTFExecutor()

        maybe_wrapped_stack_fn = self._maybe_wrap_stack_fn(_stack_fn, ex_factory)
        factory = ex_factory(maybe_wrapped_stack_fn)
        ex = factory.create_executor({})
        self.assertIsInstance(ex, framework.Executor)

    @parameterized.named_parameters(
        ('ResourceManagingExecutorFactory', framework.ResourceManagingExecutorFactory)
    )
    def test_cleanup_succeeds_without_init(self, ex_factory):

        def _stack_fn(x):
            del x  # Unused
            return framework.EagerTFExecutor()

        maybe_wrapped_stack_fn = self._maybe_wrap_stack_fn(_stack_fn, ex_factory)
        factory = ex_factory(maybe_wrapped_stack_fn)
        factory.clean_up_executors()

    @parameterized.named_parameters(
        ('ResourceManagingExecutorFactory', framework.ResourceManagingExecutorFactory)
    )
    def test_cleanup_calls_close(self, ex_factory):
        ex = framework.EagerTFExecutor()
        ex.close = mock.MagicMock()

        def _stack_fn(x):
            del x  # Unused
            return ex

        maybe_wrapped_stack_fn = self._maybe_wrap_stack_fn(_stack_fn, ex_factory)
        factory = ex_factory(maybe_wrapped_stack_fn)
        factory.create_executor({})
        factory.clean_up_executors()
        ex.close.assert_called_once()

    @parameterized.named_parameters(
        ('ResourceManagingExecutorFactory', framework.ResourceManagingExecutorFactory)
    )
    def test_construction_with_multiple_cardinalities_reuses_existing_stacks(self, ex_factory):
        ex = framework.EagerTFExecutor()
        ex.close = mock.MagicMock()
        num_times_invoked = 0

        def _stack_fn(x):
            del x  # Unused
            nonlocal num_times_invoked
            num_times_invoked += 1
            return ex

        maybe_wrapped_stack_fn = self._maybe_wrap_stack_fn(_stack_fn, ex_factory)
        factory = ex_factory(maybe_wrapped_stack_fn)
        for _ in range(2):
            factory.create_executor({})
            factory.create_executor({placements.SERVER: 1})
        self.assertEqual(num_times_invoked, 2)

    def test_executors_persisted_is_capped(self):
        ex = framework.EagerTFExecutor()

        factory = framework.ResourceManagingExecutorFactory(lambda _: ex)
        for num_clients in range(100):
            factory.create_executor({placements.CLIENTS: num_clients})
        self.assertLess(len(factory._stacks), 20)


class ExecutorStacksTest(parameterized.TestCase):
    @parameterized.named_parameters(
        ('local_executor', executor_stacks.local_executor_factory),
        ('debug_executor', executor_stacks.thread_debugging_executor_factory),
    )
    def test_construction_with_no_args(self, executor_factory_fn):
        executor_factory_impl = executor_factory_fn()
        self.assertIsInstance(executor_factory_impl, framework.ExecutorFactory)

    @parameterized.named_parameters(
        ('local_executor', executor_stacks.local_executor_factory),
    )
    def test_construction_raises_with_max_fanout_one(self, executor_factory_fn):
        with self.assertRaises(ValueError):
            executor_factory_fn(max_fanout=1)

    @parameterized.named_parameters(
        ('local_executor_none_clients', executor_stacks.local_executor_factory()),
        (
            'local_executor_three_clients',
            executor_stacks.local_executor_factory(default_num_clients=3),
        ),
    )
    def test_execution_of_temperature_sensor_example(self, executor):
        comp = _temperature_sensor_example_next_fn()
        to_float = lambda x: tf.cast(x, tf.float32)
        temperatures = [
            tf.data.Dataset.range(10).map(to_float),
            tf.data.Dataset.range(20).map(to_float),
            tf.data.Dataset.range(30).map(to_float),
        ]
        threshold = 15.0

        with executor_test_utils.install_executor(executor):
            result = comp(temperatures, threshold)

        self.assertAlmostEqual(result, 8.333, places=3)

    @parameterized.named_parameters(
        ('local_executor', executor_stacks.local_executor_factory),
    )
    def test_execution_with_inferred_clients_larger_than_fanout(self, executor_factory_fn):

        @tff.federated_computation(computation_types.at_clients(tf.int32))
        def foo(x):
            return tff.federated_sum(x)

        executor = executor_factory_fn(max_fanout=3)
        with executor_test_utils.install_executor(executor):
            result = foo([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])

        self.assertEqual(result, 55)

    @parameterized.named_parameters(
        ('local_executor_none_clients', executor_stacks.local_executor_factory()),
        ('debug_executor_none_clients', executor_stacks.thread_debugging_executor_factory()),
        (
            'local_executor_one_client',
            executor_stacks.local_executor_factory(default_num_clients=1),
        ),
        (
            'debug_executor_one_client',
            executor_stacks.thread_debugging_executor_factory(default_num_clients=1),
        ),
    )
    def test_execution_of_tensorflow(self, executor):

        @tff.tensorflow.computation
        def comp():
            return tf.math.add(5, 5)

        with executor_test_utils.install_executor(executor):
            result = comp()

        self.assertEqual(result, 10)

    @parameterized.named_parameters(*_create_concurrent_maxthread_tuples())
    def test_limiting_concurrency_constructs_one_eager_executor(
        self, ex_factory, clients_per_thread, tf_executor_mock
    ):
        num_clients = 10
        self.addCleanup(ex_factory.clean_up_executors)
        ex_factory.create_executor({placements.CLIENTS: num_clients})
        concurrency_level = math.ceil(num_clients / clients_per_thread)
        args_list = tf_executor_mock.call_args_list
        # One for server executor, one for unplaced executor, concurrency_level for
        # clients.
        self.assertLen(args_list, concurrency_level + 2)

    @mock.patch('simharness.stacks.ReferenceResolvingExecutor', return_value=ExecutorMock())
    def test_thread_debugging_executor_constructs_exactly_one_reference_resolving_executor(
        self, executor_mock
    ):
        factory = executor_stacks.thread_debugging_executor_factory()
        self.addCleanup(factory.clean_up_executors)
        factory.create_executor({placements.CLIENTS: 10})
        executor_mock.assert_called_once()
        executor_mock.call_args[0][0].close()  # the stack under the mock
