"""Federated programs: TFF's `tff.program`.

* Contexts: `FederatedContext` (`check_in_federated_context`,
  `contains_only_server_placed_data`) and `NativeFederatedContext` over an
  `AsyncExecutionContext`, whose results are `NativeValueReference` s
  (`MaterializableValueReference`, awaited with `materialize_value`).
* Data: `FederatedDataSource` / `FederatedDataSourceIterator`,
  `DatasetDataSource` (one `tf.data.Dataset` per client) and
  `ClientIdDataSource` (client ids).
* State: `ProgramStateManager` and `FileProgramStateManager` (state saved per
  version, .npz instead of TFF's SavedModel; `Serializable` leaves as bytes).
* Releases: `ReleaseManager`, `CSVFileReleaseManager`,
  `TensorBoardReleaseManager`, `SavedModelFileReleaseManager`,
  `MemoryReleaseManager`, `LoggingReleaseManager`,
  and the wrappers `FilteringReleaseManager`, `GroupingReleaseManager`,
  `PeriodicReleaseManager`, `DelayedReleaseManager`.

`run_training_process` (simharness.simulation) and
`simharness.learning.programs.train_model` save and release through them.
Modules that import TensorFlow load on first use of their names (PEP 562).
"""

from typing import Any

from simharness.lazy_names import LazyNames

_WHERE = {
    'ClientIdDataSource': 'client_id_data_source',
    'ClientIdDataSourceIterator': 'client_id_data_source',
    'DatasetDataSource': 'dataset_data_source',
    'DatasetDataSourceIterator': 'dataset_data_source',
    'FederatedDataSource': 'data_source',
    'FederatedDataSourceIterator': 'data_source',
    'FederatedContext': 'federated_context',
    'check_in_federated_context': 'federated_context',
    'contains_only_server_placed_data': 'federated_context',
    'FileProgramStateManager': 'file_program_state_manager',
    'CSVFileReleaseManager': 'file_release_manager',
    'CSVKeyFieldnameNotFoundError': 'file_release_manager',
    'CSVSaveMode': 'file_release_manager',
    'NativeFederatedContext': 'native_platform',
    'NativeValueReference': 'native_platform',
    'ProgramStateExistsError': 'program_state_manager',
    'ProgramStateManager': 'program_state_manager',
    'ProgramStateNotFoundError': 'program_state_manager',
    'ProgramStateStructure': 'program_state_manager',
    'ProgramStateValue': 'program_state_manager',
    'LoggingReleaseManager': 'release_manager',
    'MemoryReleaseManager': 'release_manager',
    'ReleaseManager': 'release_manager',
    'ReleasableStructure': 'release_manager',
    'ReleasableValue': 'release_manager',
    'ReleasedValueNotFoundError': 'release_manager',
    'SavedModelFileReleaseManager': 'saved_model_release_manager',
    'DelayedReleaseManager': 'wrapping_release_managers',
    'FilteringReleaseManager': 'wrapping_release_managers',
    'GroupingReleaseManager': 'wrapping_release_managers',
    'NotFilterableError': 'wrapping_release_managers',
    'PeriodicReleaseManager': 'wrapping_release_managers',
    'TensorBoardReleaseManager': 'tensorboard_release_manager',
    'MaterializableStructure': 'value_reference',
    'MaterializableTypeSignature': 'value_reference',
    'MaterializableValue': 'value_reference',
    'MaterializableValueReference': 'value_reference',
    'MaterializedStructure': 'value_reference',
    'MaterializedValue': 'value_reference',
    'materialize_value': 'value_reference',
}

__all__ = sorted(_WHERE)

_LAZY = LazyNames(__name__, _WHERE)


def __getattr__(name: str) -> Any:
    return _LAZY.attribute(name)


def __dir__() -> list:
    return _LAZY.listing()
