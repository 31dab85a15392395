"""Tools for `tf.data.Dataset`s of simulations (TFF's `dataset_utils`)."""

from __future__ import annotations

from typing import Any, Optional

import tensorflow as tf

from simharness.data.client_base import ClientData

__all__ = ['build_dataset_mixture', 'build_single_label_dataset', 'build_synthethic_iid_datasets']


def build_dataset_mixture(a: Any, b: Any, a_probability: float, seed: Optional[int] = None) -> Any:
    """Each element from `a` with probability `a_probability`, else from `b` (as long as the shorter).

    Draws come from ``tf.random.Generator.from_seed(seed)`` (a fresh
    non-deterministic generator when `seed` is None); both datasets advance
    every step, as TFF's.
    """
    generator = (
        tf.random.Generator.from_seed(seed)
        if seed is not None
        else tf.random.Generator.from_non_deterministic_state()
    )

    def pick(example_a: Any, example_b: Any) -> Any:
        if generator.uniform(shape=(), minval=0.0, maxval=1.0) < a_probability:
            return example_a
        return example_b

    return tf.data.Dataset.zip((a, b)).map(pick)


def build_single_label_dataset(dataset: Any, label_key: str, desired_label: Any) -> Any:
    """The examples of `dataset` (dicts) whose ``example[label_key] == desired_label``."""

    @tf.function
    def select(example: Any) -> Any:
        return example[label_key] == desired_label

    return dataset.filter(select)


def build_synthethic_iid_datasets(
    client_data: ClientData, client_dataset_size: int, shuffle_buffer_size: int = 10000
) -> Any:
    """An endless dataset of client datasets of `client_dataset_size` examples drawn from all clients.

    (TFF's name, with its spelling.) Every window samples from the shuffled,
    repeated union of `client_data`'s examples.
    """
    global_dataset = client_data.create_tf_dataset_from_all_clients()
    global_dataset = global_dataset.shuffle(
        buffer_size=shuffle_buffer_size, reshuffle_each_iteration=True
    )
    return global_dataset.repeat(None).window(client_dataset_size)
