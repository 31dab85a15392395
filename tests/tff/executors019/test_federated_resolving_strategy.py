"""Port of TFF 0.19's ``core/impl/executors/federated_resolving_strategy_test.py`` (tag
v0.19.0): computing the values of simharness's `FederatedResolvingStrategy`.

TFF's ``FederatedResolvingStrategyValue(value, type)`` is a `FederatingValue` of a 3-client
`FederatingExecutor` whose strategy payload is simharness's: an unplaced value is the
unplaced executor's `EagerValue`; a value at clients is one client group (a list of
`EagerValue`s, one per client; all-equal: the group's clients share the value); a value at
the server is its `EagerValue`; a struct is a list of (name, value). Results compute to numpy.
Skipped: none.
"""

import numpy as np
import tensorflow as tf

from simharness import framework
from simharness.core.structure import Struct
from simharness.executors.leaf.client_blocks import EagerValue
from simharness.executors.federating import FederatingValue
from tests.tff.executors019 import executor_test_utils
from tests.tff.executors019.executor_test_utils import computation_types, placements


def _executor(number_of_clients=3):
    factory = framework.FederatedResolvingStrategy.factory(
        {
            placements.SERVER: framework.EagerTFExecutor(),
            placements.CLIENTS: [(framework.EagerTFExecutor(), number_of_clients)],
        }
    )
    return framework.FederatingExecutor(factory, framework.EagerTFExecutor())


def _strategy_value(test, value, type_signature):
    """TFF's ``FederatedResolvingStrategyValue(value, type_signature)``."""
    ex = _executor(len(value) if isinstance(value, list) else 3)
    test.addCleanup(ex.close)
    if isinstance(type_signature, computation_types.StructType):
        elements = [
            (n, FederatingValue('unplaced', v, v.type_signature, ex)) for n, v in value.items()
        ]
        return FederatingValue('struct', elements, type_signature, ex)
    if isinstance(type_signature, computation_types.FederatedType):
        if type_signature.placement is placements.SERVER:
            return FederatingValue('federated', value[0], type_signature, ex)
        if type_signature.all_equal:
            value = value * 3
        return FederatingValue('federated', [value], type_signature, ex)
    return FederatingValue('unplaced', value, type_signature, ex)


def _tensor(x):
    return EagerValue(
        tf.constant(x, tf.float32), computation_types.TensorType(tf.float32, shape=[])
    )


class FederatedResolvingStrategyValueComputeTest(executor_test_utils.AsyncTestCase):
    def test_returns_value_with_embedded_value(self):
        value = _strategy_value(self, _tensor(10.0), computation_types.TensorType(tf.float32))
        result = self.run_sync(value.compute())
        self.assertEqual(result, 10.0)

    def test_returns_value_with_federated_type_at_clients(self):
        value = [_tensor(10.0), _tensor(11.0), _tensor(12.0)]
        value = _strategy_value(self, value, computation_types.at_clients(tf.float32))
        result = self.run_sync(value.compute())
        self.assertEqual([float(x) for x in result], [10.0, 11.0, 12.0])

    def test_returns_value_with_federated_type_at_clients_all_equal(self):
        value = _strategy_value(
            self, [_tensor(10.0)], computation_types.at_clients(tf.float32, all_equal=True)
        )
        result = self.run_sync(value.compute())
        self.assertEqual(result, 10.0)

    def test_returns_value_with_federated_type_at_server(self):
        value = _strategy_value(self, [_tensor(10.0)], computation_types.at_server(tf.float32))
        result = self.run_sync(value.compute())
        self.assertEqual(result, 10.0)

    def test_returns_value_with_structure_value(self):
        names = ['a', 'b', 'c']
        value = Struct((n, _tensor(10.0)) for n in names)
        type_signature = computation_types.StructType(
            (n, computation_types.TensorType(tf.float32)) for n in names
        )
        value = _strategy_value(self, value, type_signature)
        result = self.run_sync(value.compute())
        expected_result = Struct((n, np.float32(10.0)) for n in names)
        self.assertEqual(result, expected_result)

    def test_raises_type_error_with_unembedded_federated_type(self):
        value = _strategy_value(self, [10.0, 11.0, 12.0], computation_types.at_clients(tf.float32))
        with self.assertRaises(TypeError):
            self.run_sync(value.compute())

    def test_raises_runtime_error_with_unsupported_value_or_type(self):
        value = _strategy_value(self, 10.0, computation_types.TensorType(tf.float32))
        with self.assertRaises(RuntimeError):
            self.run_sync(value.compute())
