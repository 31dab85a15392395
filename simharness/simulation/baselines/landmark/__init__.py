"""Baseline task on federated GLDv2 (TFF's ``tff.simulation.baselines.landmark``)."""

from simharness.simulation.baselines.landmark.landmark_tasks import (
    create_landmark_classification_task,
    create_landmark_classification_task_from_datasets,
)

__all__ = [
    'create_landmark_classification_task',
    'create_landmark_classification_task_from_datasets',
]
