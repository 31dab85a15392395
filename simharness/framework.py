"""`simharness.framework`: executors and factories, named as in `tff.framework`."""

from simharness.core.building_blocks import (Block, Call, CompiledComputation,
                                             ComputationBuildingBlock, Data, Intrinsic, Lambda,
                                             Placement, Reference, Selection)
from simharness.core.building_blocks import Struct as StructBlock
from simharness.core.reduction import CHUNK as AGGREGATION_CHUNK
from simharness.executors.base import BatchExecutor, Executor, ExecutorFactory, ExecutorValue
from simharness.executors.eager_tf import EagerTFExecutor
from simharness.executors.federating import FederatingExecutor, FederatingStrategy
from simharness.executors.reference_resolving import ReferenceResolvingExecutor
from simharness.executors.resolving_strategy import FederatedResolvingStrategy
from simharness.executors.thread_delegating import ThreadDelegatingExecutor
from simharness.executors.worker_delegating import (ProcessDelegatingExecutor,
                                                    WorkerDelegatingExecutor)
from simharness.stacks import (CachingExecutorFactory, ProcessExecutorFactory,
                               local_executor_factory, process_executor_factory,
                               thread_debugging_executor_factory)

__all__ = [
    'AGGREGATION_CHUNK', 'BatchExecutor', 'Block', 'CachingExecutorFactory', 'Call',
    'CompiledComputation', 'ComputationBuildingBlock', 'Data', 'EagerTFExecutor', 'Executor',
    'ExecutorFactory', 'ExecutorValue', 'FederatedResolvingStrategy', 'FederatingExecutor',
    'FederatingStrategy', 'Intrinsic', 'ProcessDelegatingExecutor', 'ProcessExecutorFactory',
    'process_executor_factory', 'Lambda', 'Placement', 'Reference',
    'ReferenceResolvingExecutor', 'Selection', 'StructBlock', 'ThreadDelegatingExecutor', 'WorkerDelegatingExecutor',
    'local_executor_factory', 'thread_debugging_executor_factory',
]
