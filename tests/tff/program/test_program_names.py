"""Every public name of TFF 0.88's ``tff.program`` and ``tff.learning.programs`` is here.

(The names of ``tensorflow_federated/python/program/__init__.py`` and
``learning/programs/__init__.py`` at v0.88.0; `train_model_with_vizier` is
left out: it needs Google Vizier.)
"""

import pytest

import simharness as tff

_PROGRAM_NAMES = [
    'ClientIdDataSource',
    'ClientIdDataSourceIterator',
    'FederatedDataSource',
    'FederatedDataSourceIterator',
    'DatasetDataSource',
    'DatasetDataSourceIterator',
    'check_in_federated_context',
    'contains_only_server_placed_data',
    'FederatedContext',
    'FileProgramStateManager',
    'CSVFileReleaseManager',
    'CSVKeyFieldnameNotFoundError',
    'CSVSaveMode',
    'SavedModelFileReleaseManager',
    'LoggingReleaseManager',
    'MemoryReleaseManager',
    'NativeFederatedContext',
    'NativeValueReference',
    'ProgramStateExistsError',
    'ProgramStateManager',
    'ProgramStateNotFoundError',
    'ProgramStateStructure',
    'ProgramStateValue',
    'DelayedReleaseManager',
    'FilteringReleaseManager',
    'GroupingReleaseManager',
    'NotFilterableError',
    'PeriodicReleaseManager',
    'ReleasableStructure',
    'ReleasableValue',
    'ReleaseManager',
    'TensorBoardReleaseManager',
    'MaterializableStructure',
    'MaterializableTypeSignature',
    'MaterializableValue',
    'MaterializableValueReference',
    'materialize_value',
    'MaterializedStructure',
    'MaterializedValue',
]
_LEARNING_PROGRAMS_NAMES = [
    'EvaluationManager',
    'extract_and_rewrap_metrics',
    'ProgramState',
    'train_model',
]


@pytest.mark.parametrize('name', _PROGRAM_NAMES)
def test_program_name(name):
    assert name in dir(tff.program)
    getattr(tff.program, name)


@pytest.mark.parametrize('name', _LEARNING_PROGRAMS_NAMES)
def test_learning_programs_name(name):
    getattr(tff.learning.programs, name)
