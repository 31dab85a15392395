"""Baseline tasks on Shakespeare (TFF's ``tff.simulation.baselines.shakespeare``)."""

from simharness.simulation.baselines.shakespeare.char_prediction_tasks import (
    DEFAULT_SEQUENCE_LENGTH,
    VOCAB_LENGTH,
    create_character_prediction_task,
    create_character_prediction_task_from_datasets,
)

__all__ = [
    'DEFAULT_SEQUENCE_LENGTH',
    'VOCAB_LENGTH',
    'create_character_prediction_task',
    'create_character_prediction_task_from_datasets',
]
