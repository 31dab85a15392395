"""Baseline tasks on Federated EMNIST (TFF's ``tff.simulation.baselines.emnist``)."""

from simharness.simulation.baselines.emnist.autoencoder_tasks import (
    create_autoencoder_task,
    create_autoencoder_task_from_datasets,
)
from simharness.simulation.baselines.emnist.char_recognition_tasks import (
    CharacterRecognitionModel,
    create_character_recognition_task,
    create_character_recognition_task_from_datasets,
)

__all__ = [
    'CharacterRecognitionModel',
    'create_autoencoder_task',
    'create_autoencoder_task_from_datasets',
    'create_character_recognition_task',
    'create_character_recognition_task_from_datasets',
]
