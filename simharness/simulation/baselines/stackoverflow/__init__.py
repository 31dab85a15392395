"""Baseline tasks on Stack Overflow (TFF's ``tff.simulation.baselines.stackoverflow``)."""

from simharness.simulation.baselines.stackoverflow.constants import (
    DEFAULT_SEQUENCE_LENGTH,
    DEFAULT_TAG_VOCAB_SIZE,
    DEFAULT_WORD_VOCAB_SIZE,
)
from simharness.simulation.baselines.stackoverflow.tag_prediction_tasks import (
    create_tag_prediction_task,
    create_tag_prediction_task_from_datasets,
)
from simharness.simulation.baselines.stackoverflow.word_prediction_tasks import (
    create_word_prediction_task,
    create_word_prediction_task_from_datasets,
)

__all__ = [
    'DEFAULT_SEQUENCE_LENGTH',
    'DEFAULT_TAG_VOCAB_SIZE',
    'DEFAULT_WORD_VOCAB_SIZE',
    'create_tag_prediction_task',
    'create_tag_prediction_task_from_datasets',
    'create_word_prediction_task',
    'create_word_prediction_task_from_datasets',
]
