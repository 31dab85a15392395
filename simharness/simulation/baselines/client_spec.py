"""`ClientSpec`: how a baseline task preprocesses each client's dataset (TFF's ``client_spec``)."""

from __future__ import annotations

from typing import Any, Optional

import attrs

__all__ = ['ClientSpec']


def _positive(instance: Any, attribute: Any, value: Any) -> None:
    del instance
    if value <= 0:
        raise ValueError(f'{attribute.name} must be positive. Found {value}.')


_POSITIVE_INT = [attrs.validators.instance_of(int), _positive]
_OPTIONAL_POSITIVE_INT = [
    attrs.validators.optional(attrs.validators.instance_of(int)),
    attrs.validators.optional(_positive),
]


@attrs.define(eq=False, frozen=True)
class ClientSpec:
    """How the clients of a training task iterate over their data.

    Attributes:
      num_epochs: passes each client makes over its whole local dataset
        (converted with ``int``; must be positive).
      batch_size: the batch size of the client datasets (converted with
        ``int``; must be positive).
      max_elements: at most this many examples per client, taken after the
        dataset is repeated `num_epochs` times; `None` (default) for all.
      shuffle_buffer_size: the shuffle buffer; `None` for the task's default,
        ``1`` for no shuffling.
    """

    num_epochs: int = attrs.field(converter=int, validator=_POSITIVE_INT)
    batch_size: int = attrs.field(converter=int, validator=_POSITIVE_INT)
    max_elements: Optional[int] = attrs.field(default=None, validator=_OPTIONAL_POSITIVE_INT)
    shuffle_buffer_size: Optional[int] = attrs.field(default=None, validator=_OPTIONAL_POSITIVE_INT)


def shuffle_repeat_take(
    dataset: Any, spec: ClientSpec, shuffle_buffer_size: int, seed: Optional[int] = None
) -> Any:
    """The steps every task's preprocessing starts with (TFF's, in TFF's order): shuffle
    (a buffer over 1), repeat `spec.num_epochs` times, take `spec.max_elements`."""
    if shuffle_buffer_size > 1:
        dataset = dataset.shuffle(shuffle_buffer_size, seed=seed)
    if spec.num_epochs > 1:
        dataset = dataset.repeat(spec.num_epochs)
    if spec.max_elements is not None:
        dataset = dataset.take(spec.max_elements)
    return dataset
