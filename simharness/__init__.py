"""simharness: fast, reproducible federated learning simulation on one machine.

A TFF-style API (`tf_computation`, `federated_computation`, intrinsics) on
an executor stack whose client executors run in threads or in pinned worker
processes. Port TFF code by renaming `tff.` to `simharness.`.
"""

import sys as _sys
from contextlib import nullcontext as _nullcontext

from simharness import tfquiet as _tfquiet
from simharness.core import determinism as _determinism

_tfquiet.configure_logging()  # SIMHARNESS_LOG_LEVEL, when set
_determinism.configure_xla()  # before anything can start XLA (simharness.core.xla)
# Before TF's first op: the workers' intra-op thread count. Where TF is loaded already (a
# program that imported it first, as TFF's tutorials do), finding out whether its context
# started initializes its devices: the cuInit line, kept out of stderr (see tfquiet).
with _tfquiet.quiet_stderr() if 'tensorflow' in _sys.modules else _nullcontext():
    _determinism.configure_threads()
# TensorFlow's C++ start-up lines kept out of stderr, whoever imports it (see tfquiet).
_tfquiet.install_import_hook()

from simharness import errors  # noqa: E402
from simharness.context import (
    AsyncExecutionContext,
    ExecutionContext,
    execution_context,
    get_context,
    set_default_executor,
)
from simharness import structure, templates
from simharness.core.computation import (
    Computation,
    ConcreteComputation,
    PolymorphicComputation,
    check_returns_type,
    federated_computation,
    tf_computation,
)
from simharness.core.arrays import (
    Array,
    ArrayShape,
    Serializable,
    TypedObject,
    array_is_compatible_dtype,
    array_is_compatible_shape,
    array_shape_is_compatible_with,
    array_shape_is_fully_defined,
    array_shape_is_scalar,
    can_cast_dtype,
    infer_dtype,
    is_valid_dtype,
    num_elements_in_array_shape,
)
from simharness.core.intrinsics import (
    federated_aggregate,
    federated_apply,
    federated_broadcast,
    federated_collect,
    federated_eval,
    federated_map,
    federated_max,
    federated_mean,
    federated_min,
    federated_secure_modular_sum,
    federated_secure_select,
    federated_secure_sum,
    federated_secure_sum_bitwidth,
    federated_select,
    federated_sum,
    federated_value,
    federated_zip,
    sequence_map,
    sequence_reduce,
    sequence_sum,
    to_value,
)
from simharness.core.structure import Struct
from simharness.core.tracing import Value
from simharness.core.types import (
    CLIENTS,
    SERVER,
    AbstractType,
    FederatedType,
    FunctionType,
    PlacementType,
    SequenceType,
    StructType,
    StructWithPythonType,
    TensorType,
    Type,
    infer_type,
    to_type,
    type_at_clients,
    type_at_server,
)
from simharness.errors import CardinalityError, SimharnessError, WorkerCrashedError

__version__ = '0.1.0'


#: Subpackages that import TensorFlow: loaded on first use as attributes
#: (``simharness.learning.FedAvg`` works after a plain ``import simharness``).
_LAZY_SUBMODULES = frozenset(
    {
        'framework',
        'learning',
        'data',
        'aggregators',
        'simulation',
        'tensorflow',
        'backends',
        'program',
        'analytics',
        'test',
        'types',
        'jax',  # TFF's tff.jax (the JAX frontend): needs the jax extra, imported on first use
    }
)


def __getattr__(name):
    if name in _LAZY_SUBMODULES:
        import importlib
        import multiprocessing
        from simharness.tfquiet import import_tensorflow, initialize_devices

        # TensorFlow's C++ start-up lines filtered out (errors still show); the CUDA probe
        # (cuInit) too, in the user's own process only (never before a fork).
        if multiprocessing.parent_process() is None:
            initialize_devices()
        else:
            import_tensorflow()
        return importlib.import_module(f'simharness.{name}')
    raise AttributeError(f'module simharness has no attribute {name!r}')


__all__ = [
    'AbstractType',
    'Array',
    'ArrayShape',
    'AsyncExecutionContext',
    'Serializable',
    'StructWithPythonType',
    'TypedObject',
    'array_is_compatible_dtype',
    'array_is_compatible_shape',
    'array_shape_is_compatible_with',
    'array_shape_is_fully_defined',
    'array_shape_is_scalar',
    'backends',
    'can_cast_dtype',
    'federated_max',
    'federated_min',
    'federated_secure_select',
    'infer_dtype',
    'is_valid_dtype',
    'num_elements_in_array_shape',
    'tensorflow',
    'to_value',
    'CLIENTS',
    'SERVER',
    'CardinalityError',
    'Computation',
    'ConcreteComputation',
    'ExecutionContext',
    'FederatedType',
    'FunctionType',
    'PlacementType',
    'PolymorphicComputation',
    'SequenceType',
    'SimharnessError',
    'Struct',
    'StructType',
    'TensorType',
    'Type',
    'Value',
    'WorkerCrashedError',
    'check_returns_type',
    'data',
    'errors',
    'execution_context',
    'federated_aggregate',
    'federated_apply',
    'federated_broadcast',
    'federated_collect',
    'federated_computation',
    'federated_eval',
    'federated_map',
    'federated_mean',
    'federated_secure_modular_sum',
    'federated_secure_sum',
    'federated_secure_sum_bitwidth',
    'federated_select',
    'federated_sum',
    'federated_value',
    'federated_zip',
    'framework',
    'get_context',
    'infer_type',
    'learning',
    'sequence_map',
    'sequence_reduce',
    'sequence_sum',
    'set_default_executor',
    'structure',
    'templates',
    'tf_computation',
    'to_type',
    'type_at_clients',
    'type_at_server',
]
