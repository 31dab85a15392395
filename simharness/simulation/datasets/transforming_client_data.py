"""`TransformingClientData`: clients expanded into pseudo-clients by a per-id transform (TFF's)."""

from __future__ import annotations

from typing import Any, Callable, Optional

import tensorflow as tf

from simharness.data.client_base import ClientData
from simharness.errors import SimharnessTypeError, SimharnessValueError

__all__ = ['TransformingClientData']


class TransformingClientData(ClientData):
    """Each base client becomes pseudo-clients whose examples pass through a per-id transform.

    Args:
        base_client_data: the `ClientData` to expand.
        make_transform_fn: ``make_transform_fn(expanded_id)`` returns a
            TF-traceable function from an element to a new element.
        expand_client_id: base id -> list of expanded ids (None: same ids).
        reduce_client_id: expanded id -> base id, TF-traceable; given if and
            only if `expand_client_id` is.

    Raises:
        SimharnessTypeError: `base_client_data` is not a `ClientData`.
        SimharnessValueError: no clients, or only one of the two id functions.
    """

    def __init__(
        self,
        base_client_data: ClientData,
        make_transform_fn: Callable[[Any], Callable[[Any], Any]],
        expand_client_id: Optional[Callable[[str], list[str]]] = None,
        reduce_client_id: Optional[Callable[[Any], Any]] = None,
    ):
        if not isinstance(base_client_data, ClientData):
            raise SimharnessTypeError(
                f'base_client_data must be a ClientData, got {type(base_client_data).__name__}',
                expected=ClientData,
                actual=type(base_client_data),
            )
        raw_ids = base_client_data.client_ids
        if not raw_ids:
            raise SimharnessValueError('`base_client_data` must be non-empty.')
        if (expand_client_id is None) != (reduce_client_id is None):
            raise SimharnessValueError(
                'Must specify both or neither of `expand_client_id` and `reduce_client_id`.'
            )
        self._base_client_data = base_client_data
        self._make_transform_fn = make_transform_fn
        if expand_client_id is None:
            ids = list(raw_ids)
            self._reduce_client_id: Callable[[Any], Any] = tf.convert_to_tensor
        else:
            ids = [e for cid in raw_ids for e in expand_client_id(cid)]
            self._reduce_client_id = reduce_client_id  # type: ignore[assignment]
        self._client_ids = sorted(ids)
        self._id_set = frozenset(self._client_ids)
        self._element_type_structure = self._create_dataset(self._client_ids[0]).element_spec

    def _create_dataset(self, client_id: Any) -> Any:
        base = self._base_client_data.serializable_dataset_fn(self._reduce_client_id(client_id))
        return base.map(self._make_transform_fn(client_id), tf.data.experimental.AUTOTUNE)

    @property
    def client_ids(self) -> list[str]:
        return list(self._client_ids)

    def _check_client_id(self, client_id: Any) -> None:
        if not isinstance(client_id, str) or client_id not in self._id_set:
            raise self._unknown_client(client_id)

    @property
    def serializable_dataset_fn(self) -> Callable[[Any], Any]:
        return self._create_dataset

    @property
    def element_type_structure(self) -> Any:
        return self._element_type_structure
