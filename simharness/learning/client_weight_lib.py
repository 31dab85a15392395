"""How clients are weighted in an aggregation (TFF's ``tff.learning.ClientWeighting``)."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Callable, Mapping, Union

if TYPE_CHECKING:
    from simharness.learning._typing import TensorStructure

from simharness.errors import SimharnessTypeError

__all__ = [
    'ClientWeightFnType',
    'ClientWeightType',
    'ClientWeighting',
    'check_is_client_weighting_or_callable',
]


class ClientWeighting(enum.Enum):
    """How a client's model update is weighted in the server's average.

    Attributes:
      UNIFORM: every client counts the same (weight 1).
      NUM_EXAMPLES: a client counts by the number of examples it trained on.
    """

    UNIFORM = 1
    NUM_EXAMPLES = 2


#: A callable from a client's local unfinalized metrics to its weight (a float tensor).
ClientWeightFnType = Callable[['Mapping[str, TensorStructure]'], 'TensorStructure']
ClientWeightType = Union[ClientWeighting, ClientWeightFnType]


def check_is_client_weighting_or_callable(client_weighting: object) -> None:
    """Raises unless `client_weighting` is a `ClientWeighting` or a callable.

    Raises:
      SimharnessTypeError: it is neither (a `TypeError`).
    """
    if not isinstance(client_weighting, ClientWeighting) and not callable(client_weighting):
        raise SimharnessTypeError(
            '`client_weighting` must be either an instance of `ClientWeighting` or it must be '
            f'callable. Found {client_weighting!r} of type {type(client_weighting).__name__}.',
            expected=ClientWeighting,
            actual=type(client_weighting),
        )
