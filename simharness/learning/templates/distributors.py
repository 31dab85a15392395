"""Sending the server's model weights to the clients (TFF's ``learning/templates/distributors.py``).

```
DistributionProcess:
  initialize: ( -> S@SERVER)
  next:       (<S@SERVER, V@SERVER> -> <state=S@SERVER, result=V@CLIENTS, measurements=M@SERVER>)
build_broadcast_process(V): state <>, result federated_broadcast(value), measurements <>
```
"""

from __future__ import annotations


from simharness.core import intrinsics as I
from simharness.core import types as T
from simharness.core.computation import Computation, federated_computation
from simharness.core.tracing import Value
from simharness.errors import SimharnessTypeError
from simharness.learning.templates import _checks
from simharness.templates.measured_process import MeasuredProcess, MeasuredProcessOutput

__all__ = ['DistributionProcess', 'build_broadcast_process']


class DistributionProcess(MeasuredProcess):
    """A `MeasuredProcess` that takes a SERVER value and gives it to the CLIENTS.

    Args:
      initialize_fn: ``( -> S@SERVER)``.
      next_fn: ``(<S@SERVER, V@SERVER> -> <state=S@SERVER, result=V'@CLIENTS,
        measurements=M@SERVER>)``.

    Raises:
      TemplateNotFederatedError: a function is not federated.
      TemplatePlacementError: a placement differs from the above.
      TemplateNextFnNumArgsError: `next_fn` does not take two arguments;
        and the errors of `MeasuredProcess`.
    """

    def __init__(self, initialize_fn: Computation, next_fn: Computation):
        super().__init__(initialize_fn, next_fn, next_is_multi_arg=True)
        _checks.check_initialize_at_server(initialize_fn, 'DistributionProcess')
        _checks.check_next_is_federated(next_fn)
        param = _checks.next_params(next_fn, 2)
        _checks.check_param_placement(param, 1, T.SERVER)
        _checks.check_output_placement(next_fn, 'result', T.CLIENTS)
        _checks.check_output_placement(next_fn, 'measurements', T.SERVER)


def _contains_federated(t: T.Type) -> bool:
    if isinstance(t, T.FederatedType):
        return True
    if isinstance(t, T.StructType):
        return any(_contains_federated(e) for e in t)
    return False


def build_broadcast_process(value_type: T.Type) -> DistributionProcess:
    """A stateless `DistributionProcess` that broadcasts a ``value_type@SERVER``.

    Args:
      value_type: a `TensorType` or `StructType` (no federated types inside).

    Raises:
      SimharnessTypeError: `value_type` is not one or contains a federated type.
    """
    if not isinstance(value_type, (T.TensorType, T.StructType)):
        raise SimharnessTypeError(
            f'value_type must be a TensorType or a StructType, got {value_type!r} of type '
            f'{type(value_type).__name__}',
            expected=(T.TensorType, T.StructType),
            actual=type(value_type),
        )
    if _contains_federated(value_type):
        raise SimharnessTypeError(
            f'Provided value_type must not contain any FederatedType, but found: {value_type}',
            actual=value_type,
        )

    @federated_computation()
    def init_fn() -> Value:
        return I.federated_value((), T.SERVER)

    @federated_computation(init_fn.type_signature.result, T.FederatedType(value_type, T.SERVER))
    def next_fn(state: Value, value: Value) -> MeasuredProcessOutput:
        empty_measurements = I.federated_value((), T.SERVER)
        return MeasuredProcessOutput(state, I.federated_broadcast(value), empty_measurements)

    return DistributionProcess(init_fn, next_fn)
