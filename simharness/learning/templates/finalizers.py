"""The server's last step of a round (TFF's ``learning/templates/finalizers.py``).

```
FinalizerProcess:
  initialize: ( -> S@SERVER)
  next:       (<S@SERVER, W@SERVER, U@SERVER> -> <state=S@SERVER, result=W@SERVER,
                                                  measurements=M@SERVER>)
  get_hparams: (S -> H)     set_hparams: (<S, H> -> S)
build_identity_finalizer(W, U): the weights unchanged
```
"""

from __future__ import annotations

from typing import Optional

from simharness.core import intrinsics as I
from simharness.core import types as T
from simharness.core import narrowing as N
from simharness.core.computation import Computation, federated_computation
from simharness.core.tracing import Value
from simharness.learning.templates import _checks, hparams_base
from simharness.templates.measured_process import MeasuredProcess, MeasuredProcessOutput

__all__ = ['FinalizerProcess', 'FinalizerResultTypeError', 'build_identity_finalizer']


class FinalizerResultTypeError(TypeError):
    """The new weights are not of the weights' type (TFF's class)."""


class FinalizerProcess(MeasuredProcess):
    """A `MeasuredProcess` that makes the new model weights from the aggregated update.

    Args:
      initialize_fn: ``( -> S@SERVER)``.
      next_fn: ``(<S@SERVER, W@SERVER, U@SERVER> -> <state=S@SERVER,
        result=W@SERVER, measurements=M@SERVER>)``.
      get_hparams_fn: ``(S -> H)``; default: no hyperparameters.
      set_hparams_fn: ``(<S, H> -> S)``; default: the state unchanged.

    Raises:
      TemplateNotFederatedError, TemplatePlacementError,
      TemplateNextFnNumArgsError: as TFF.
      FinalizerResultTypeError: the result is not assignable to W.
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
        _checks.check_initialize_at_server(initialize_fn, 'FinalizerProcess')
        _checks.check_next_is_federated(next_fn)
        param = _checks.next_params(next_fn, 3)
        _checks.check_param_placement(param, 1, T.SERVER)
        _checks.check_param_placement(param, 2, T.SERVER)
        result = N.as_federated(_checks.check_output_placement(next_fn, 'result', T.SERVER))
        if not N.member_of(param[1]).is_assignable_from(result.member):
            raise FinalizerResultTypeError(
                'The second input argument of `next_fn` must match the "result" attribute of '
                f'the return type of `next_fn`. Found:\nSecond input argument: '
                f'{N.member_of(param[1])}\nResult attribute: {result.member}.'
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


def build_identity_finalizer(
    model_weights_type: T.StructType, update_type: T.StructType
) -> FinalizerProcess:
    """A stateless `FinalizerProcess` that returns the weights unchanged."""

    @federated_computation()
    def init_fn() -> Value:
        return I.federated_value((), T.SERVER)

    @federated_computation(
        init_fn.type_signature.result,
        T.FederatedType(model_weights_type, T.SERVER),
        T.FederatedType(update_type, T.SERVER),
    )
    def next_fn(state: Value, weights: Value, update: Value) -> MeasuredProcessOutput:
        del update
        return MeasuredProcessOutput(state, weights, I.federated_value((), T.SERVER))

    return FinalizerProcess(init_fn, next_fn)
