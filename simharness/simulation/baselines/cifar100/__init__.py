"""Baseline tasks on CIFAR-100 (TFF's ``tff.simulation.baselines.cifar100``)."""

from simharness.simulation.baselines.cifar100.image_classification_tasks import (
    DEFAULT_CROP_HEIGHT,
    DEFAULT_CROP_WIDTH,
    ResnetModel,
    create_image_classification_task,
    create_image_classification_task_with_datasets,
)

__all__ = [
    'DEFAULT_CROP_HEIGHT',
    'DEFAULT_CROP_WIDTH',
    'ResnetModel',
    'create_image_classification_task',
    'create_image_classification_task_with_datasets',
]
