"""Federated programs: TFF's `tff.program` parts that simulations use.

The interfaces (`ProgramStateManager`, `ReleaseManager`, from
federated_language.program) and TFF's file managers: `FileProgramStateManager`
(state saved per version, .npz instead of TFF's SavedModel),
`CSVFileReleaseManager` and `TensorBoardReleaseManager` (metrics), plus
`MemoryReleaseManager` and `LoggingReleaseManager`. `run_training_process`
(simharness.simulation) saves and releases through them.
"""

from simharness.program.file_program_state_manager import FileProgramStateManager
from simharness.program.file_release_manager import (CSVFileReleaseManager,
                                                     CSVKeyFieldnameNotFoundError, CSVSaveMode)
from simharness.program.program_state_manager import (ProgramStateExistsError,
                                                      ProgramStateManager,
                                                      ProgramStateNotFoundError)
from simharness.program.release_manager import (LoggingReleaseManager, MemoryReleaseManager,
                                                ReleaseManager)
from simharness.program.tensorboard_release_manager import TensorBoardReleaseManager

__all__ = ['CSVFileReleaseManager', 'CSVKeyFieldnameNotFoundError', 'CSVSaveMode',
           'FileProgramStateManager', 'LoggingReleaseManager', 'MemoryReleaseManager',
           'ProgramStateExistsError', 'ProgramStateManager', 'ProgramStateNotFoundError',
           'ReleaseManager', 'TensorBoardReleaseManager']
