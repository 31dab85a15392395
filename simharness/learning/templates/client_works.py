"""The clients' work of a learning round (TFF's ``learning/templates/client_works.py``).

```
ClientWorkProcess:
  initialize: ( -> S@SERVER)
  next:       (<S@SERVER, W@CLIENTS, D@CLIENTS> ->
               <state=S@SERVER, result=ClientResult(update, update_weight)@CLIENTS,
                measurements=M@SERVER>)
  get_hparams: (S -> H)     set_hparams: (<S, H> -> S)
```
D is a sequence (a client's dataset) or a structure of sequences.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from simharness.core import types as T
from simharness.core import narrowing as N
from simharness.core.computation import Computation
from simharness.learning._typing import TemplateField
from simharness.learning.templates import _checks, hparams_base
from simharness.learning.templates.type_checks import is_tensorflow_compatible_type
from simharness.templates.measured_process import MeasuredProcess

__all__ = ['ClientDataTypeError', 'ClientResult', 'ClientResultTypeError', 'ClientWorkProcess']


class ClientResult(NamedTuple):
    """What a client's work gives the aggregation.

    Attributes:
      update: the client's update of the model weights (trainable ones).
      update_weight: its weight in the aggregation.
    """

    update: TemplateField
    update_weight: TemplateField


class ClientDataTypeError(TypeError):
    """The client data argument is not a sequence or structure of sequences (TFF's class)."""


class ClientResultTypeError(TypeError):
    """The client result is not a `ClientResult` (TFF's class)."""


def _is_allowed_client_data_type(t: T.Type) -> bool:
    if isinstance(t, T.SequenceType):
        return is_tensorflow_compatible_type(t.element)
    if isinstance(t, T.StructType):
        return all(_is_allowed_client_data_type(e) for e in t)
    return False


class ClientWorkProcess(MeasuredProcess):
    """A `MeasuredProcess` for the work the clients do in a round.

    Args:
      initialize_fn: ``( -> S@SERVER)``.
      next_fn: ``(<S@SERVER, W@CLIENTS, D@CLIENTS> -> <state=S@SERVER,
        result=ClientResult@CLIENTS, measurements=M@SERVER>)``.
      get_hparams_fn: ``(S -> H)``; default: no hyperparameters.
      set_hparams_fn: ``(<S, H> -> S)``; default: the state unchanged.

    Raises:
      TemplateNotFederatedError, TemplatePlacementError,
      TemplateNextFnNumArgsError: as TFF.
      ClientDataTypeError: D is not a sequence or a structure of sequences.
      ClientResultTypeError: the result is not a `ClientResult`.
      GetHparamsTypeError, SetHparamsTypeError: the hparams functions do not
        fit the state.
    """

    def __init__(
        self,
        initialize_fn: Computation,
        next_fn: Computation,
        *,
        get_hparams_fn: Optional[Computation] = None,
        set_hparams_fn: Optional[Computation] = None,
    ):
        super().__init__(initialize_fn, next_fn, next_is_multi_arg=True)
        _checks.check_initialize_at_server(initialize_fn, 'ClientWorkProcess')
        _checks.check_next_is_federated(next_fn)
        param = _checks.next_params(next_fn, 3)
        _checks.check_param_placement(param, 1, T.CLIENTS)
        _checks.check_param_placement(param, 2, T.CLIENTS)
        if not _is_allowed_client_data_type(N.member_of(param[2])):
            raise ClientDataTypeError(
                'The third input argument of `next_fn` must be a sequence or a structure of '
                f'sequences, but found {param[2]}.'
            )
        result = N.as_federated(_checks.check_output_placement(next_fn, 'result', T.CLIENTS))
        if not (
            isinstance(result.member, T.StructType) and result.member.container is ClientResult
        ):
            raise ClientResultTypeError(
                'The "result" attribute of the return type of `next_fn` must have the '
                f'`ClientResult` container, but found {result}.'
            )
        _checks.check_output_placement(next_fn, 'measurements', T.SERVER)
        state_type = N.member_of(initialize_fn.type_signature.result)
        self._get_hparams_fn, self._set_hparams_fn = hparams_base.hparams_pair(
            state_type, get_hparams_fn, set_hparams_fn
        )

    @property
    def get_hparams(self) -> Computation:
        """``(S -> H)``: the hyperparameters of a state."""
        return self._get_hparams_fn

    @property
    def set_hparams(self) -> Computation:
        """``(<S, H> -> S)``: a state with the given hyperparameters."""
        return self._set_hparams_fn
