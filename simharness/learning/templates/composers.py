"""Composing a learning process of its five parts (TFF's ``learning/templates/composers.py``).

```
state = LearningAlgorithmState(global_model_weights, distributor, client_work, aggregator,
                               finalizer)@SERVER
next(state, client_data):
  distributor:  weights@CLIENTS = distributor.next(state.distributor, state.global_model_weights)
  client_work:  ClientResult(update, update_weight)@CLIENTS
                  = client_work.next(state.client_work, weights, client_data)
  aggregator:   update@SERVER = aggregator.next(state.aggregator, update, update_weight)
  finalizer:    new weights@SERVER = finalizer.next(state.finalizer, state.global_model_weights,
                                                    update)
  metrics = OrderedDict(distributor=..., client_work=..., aggregator=..., finalizer=...)
```
"""

from __future__ import annotations

import collections
from typing import Callable, NamedTuple, TypeVar

from simharness.core import intrinsics as I
from simharness.core import types as T
from simharness.core import narrowing as N
from simharness.core.computation import Computation, federated_computation, tf_computation
from simharness.aggregators import mean
from simharness.core.tracing import Value
from simharness.errors import SimharnessTypeError
from simharness.learning._typing import TemplateField
from simharness.learning.client_weight_lib import ClientWeighting
from simharness.learning.models import variable
from simharness.learning.models.model_weights import ModelWeights
from simharness.learning.optimizers import sgdm
from simharness.learning.templates import (
    apply_optimizer_finalizer,
    client_works,
    distributors,
    finalizers,
    model_delta_client_work,
    type_checks,
)
from simharness.learning.templates.learning_process import LearningProcess, LearningProcessOutput
from simharness.templates.aggregation_process import AggregationProcess
from simharness.templates.iterative_process import check_computation

__all__ = ['LearningAlgorithmState', 'build_basic_fedavg_process', 'compose_learning_process']


class LearningAlgorithmState(NamedTuple):
    """The server state of a composed learning process.

    Attributes:
      global_model_weights: the model weights (a `ModelWeights` as built by
        the algorithms).
      distributor, client_work, aggregator, finalizer: the states of the parts.
    """

    global_model_weights: TemplateField
    distributor: TemplateField
    client_work: TemplateField
    aggregator: TemplateField
    finalizer: TemplateField


_P = TypeVar('_P')


def _check_type(value: object, cls: type[_P], name: str) -> _P:
    if not isinstance(value, cls):
        raise SimharnessTypeError(
            f'{name} must be a {cls.__name__}, got {value!r} of type {type(value).__name__}',
            expected=cls,
            actual=type(value),
        )
    return value


def _validate_args(
    initial_model_weights_fn: Computation,
    distributor: object,
    client_work: object,
    aggregator: object,
    finalizer: object,
) -> None:
    check_computation(initial_model_weights_fn, 'initial_model_weights_fn')
    sig = initial_model_weights_fn.type_signature
    if sig.parameter is not None:
        raise SimharnessTypeError(
            'Provided initial_model_weights_fn must be a no-arg Computation.\nFound input '
            f'parameter: {sig.parameter}',
            actual=sig.parameter,
        )
    if isinstance(sig.result, T.FederatedType):
        raise SimharnessTypeError(
            'Provided initial_model_weights_fn must be a Computation with unplaced return '
            f'type.\nReturn type found: {sig.result}',
            actual=sig.result,
        )
    weights_type = T.FederatedType(sig.result, T.SERVER)
    dist = _check_type(
        distributor, distributors.DistributionProcess, 'model_weights_distributor'
    ).next.type_signature
    work = _check_type(
        client_work, client_works.ClientWorkProcess, 'client_work'
    ).next.type_signature
    aggregation = _check_type(aggregator, AggregationProcess, 'model_update_aggregator')
    if not aggregation.is_weighted:
        raise SimharnessTypeError('Provided model_update_aggregator must be weighted.')
    agg = aggregation.next.type_signature
    fin = _check_type(finalizer, finalizers.FinalizerProcess, 'model_finalizer').next.type_signature
    # The processes checked their next's signature: parameters are structs and results
    # `MeasuredProcessOutput` structs, whose `result` the narrowing reads.
    work_result = N.member_of(N.as_struct(work.result).result, 'client work result')
    N.parameter_element(dist, 1).check_assignable_from(weights_type)
    N.parameter_element(work, 1).check_assignable_from(N.as_struct(dist.result).result)
    N.member_of(N.parameter_element(agg, 1)).check_assignable_from(N.as_struct(work_result).update)
    N.member_of(N.parameter_element(agg, 2)).check_assignable_from(
        N.as_struct(work_result).update_weight
    )
    N.parameter_element(fin, 1).check_assignable_from(weights_type)
    N.parameter_element(fin, 2).check_assignable_from(N.as_struct(agg.result).result)
    weights_type.check_assignable_from(N.as_struct(fin.result).result)


def compose_learning_process(
    initial_model_weights_fn: Computation,
    model_weights_distributor: distributors.DistributionProcess,
    client_work: client_works.ClientWorkProcess,
    model_update_aggregator: AggregationProcess,
    model_finalizer: finalizers.FinalizerProcess,
) -> LearningProcess:
    """Composes the five parts into a `LearningProcess` (TFF's function).

    Args:
      initial_model_weights_fn: a no-arg `tf_computation` returning the
        initial (unplaced) model weights.
      model_weights_distributor: a `DistributionProcess` of the weights.
      client_work: a `ClientWorkProcess` taking the distributed weights.
      model_update_aggregator: a weighted `AggregationProcess` of the updates.
      model_finalizer: a `FinalizerProcess` making the new weights.

    Returns:
      A `LearningProcess` whose state is a `LearningAlgorithmState` and whose
      metrics are ``OrderedDict(distributor=, client_work=, aggregator=,
      finalizer=)``, each the part's measurements.

    Raises:
      SimharnessTypeError: an argument has the wrong type, or the parts'
        types do not fit together.
    """
    _validate_args(
        initial_model_weights_fn,
        model_weights_distributor,
        client_work,
        model_update_aggregator,
        model_finalizer,
    )
    client_data_type = N.parameter_element(client_work.next.type_signature, 2)

    @federated_computation()
    def init_fn() -> Value:
        initial_model_weights = I.federated_eval(initial_model_weights_fn, T.SERVER)
        return I.federated_zip(
            LearningAlgorithmState(
                initial_model_weights,
                model_weights_distributor.initialize(),
                client_work.initialize(),
                model_update_aggregator.initialize(),
                model_finalizer.initialize(),
            )
        )

    @federated_computation(init_fn.type_signature.result, client_data_type)
    def next_fn(state: Value, client_data: Value) -> LearningProcessOutput:
        distributor_output = model_weights_distributor.next(
            state.distributor, state.global_model_weights
        )
        client_work_output = client_work.next(
            state.client_work, distributor_output.result, client_data
        )
        aggregator_output = model_update_aggregator.next(
            state.aggregator,
            client_work_output.result.update,
            client_work_output.result.update_weight,
        )
        finalizer_output = model_finalizer.next(
            state.finalizer, state.global_model_weights, aggregator_output.result
        )
        new_state = I.federated_zip(
            LearningAlgorithmState(
                finalizer_output.result,
                distributor_output.state,
                client_work_output.state,
                aggregator_output.state,
                finalizer_output.state,
            )
        )
        metrics = I.federated_zip(
            collections.OrderedDict(
                distributor=distributor_output.measurements,
                client_work=client_work_output.measurements,
                aggregator=aggregator_output.measurements,
                finalizer=finalizer_output.measurements,
            )
        )
        return LearningProcessOutput(new_state, metrics)

    state_type = N.as_struct(N.member_of(N.parameter_element(next_fn.type_signature, 0)))

    @tf_computation(state_type)
    def get_model_weights_fn(state: LearningAlgorithmState) -> TemplateField:
        return state.global_model_weights

    @tf_computation(state_type, state_type.global_model_weights)
    def set_model_weights_fn(
        state: LearningAlgorithmState, model_weights: ModelWeights
    ) -> LearningAlgorithmState:
        return LearningAlgorithmState(
            global_model_weights=model_weights,
            distributor=state.distributor,
            client_work=state.client_work,
            aggregator=state.aggregator,
            finalizer=state.finalizer,
        )

    # The parts' hparams functions are computations: an unplaced federated
    # computation calls them (a tf_computation cannot call another one here).
    @federated_computation(state_type)
    def get_hparams_fn(state: Value) -> collections.OrderedDict[str, Value]:
        return collections.OrderedDict(
            client_work=client_work.get_hparams(state.client_work),
            finalizer=model_finalizer.get_hparams(state.finalizer),
        )

    @federated_computation(state_type, get_hparams_fn.type_signature.result)
    def set_hparams_fn(state: Value, hparams: Value) -> LearningAlgorithmState:
        return LearningAlgorithmState(
            global_model_weights=state.global_model_weights,
            distributor=state.distributor,
            client_work=client_work.set_hparams(state.client_work, hparams['client_work']),
            aggregator=state.aggregator,
            finalizer=model_finalizer.set_hparams(state.finalizer, hparams['finalizer']),
        )

    process = LearningProcess(
        init_fn,
        next_fn,
        get_model_weights_fn,
        set_model_weights_fn,
        get_hparams_fn=get_hparams_fn,
        set_hparams_fn=set_hparams_fn,
    )
    try:
        type_checks.check_is_client_placed_structure_of_sequences(
            N.parameter_element(process.next.type_signature, 1)
        )
    except type_checks.ClientSequenceTypeError as e:
        raise SimharnessTypeError(
            'The learning process composition produced a `next` function with type signature '
            f'{process.next.type_signature}. However, the second arg of `next` must be a '
            'CLIENTS-placed structure of sequences.'
        ) from e
    return process


def build_basic_fedavg_process(
    model_fn: Callable[[], variable.VariableModel],
    client_learning_rate: float,
    server_learning_rate: float = 1.0,
) -> LearningProcess:
    """FedAvg of the composed parts (TFF's example of composition).

    Clients run SGD at `client_learning_rate`, updates are averaged weighted by
    the clients' example counts, the server applies SGD at `server_learning_rate`.
    """
    if not callable(model_fn):
        raise SimharnessTypeError(
            f'model_fn must be a no-arg callable returning a VariableModel, got {model_fn!r} of '
            f'type {type(model_fn).__name__}',
            actual=type(model_fn),
        )
    if not isinstance(client_learning_rate, float):
        raise SimharnessTypeError(
            f'client_learning_rate must be a float, got {client_learning_rate!r} of type '
            f'{type(client_learning_rate).__name__}',
            expected=float,
            actual=type(client_learning_rate),
        )

    @tf_computation()
    def initial_model_weights_fn() -> ModelWeights:
        return ModelWeights.from_model(model_fn())

    weights_type = initial_model_weights_fn.type_signature.result
    distributor = distributors.build_broadcast_process(weights_type)
    client_work = model_delta_client_work.build_model_delta_client_work(
        model_fn,
        sgdm.build_sgdm(client_learning_rate),
        client_weighting=ClientWeighting.NUM_EXAMPLES,
    )
    result = N.as_struct(N.member_of(N.as_struct(client_work.next.type_signature.result).result))
    aggregator = mean.MeanFactory().create(
        N.as_tensor_or_struct(result.update), N.as_tensor_or_struct(result.update_weight)
    )
    finalizer = apply_optimizer_finalizer.build_apply_optimizer_finalizer(
        sgdm.build_sgdm(server_learning_rate), weights_type
    )
    return compose_learning_process(
        initial_model_weights_fn, distributor, client_work, aggregator, finalizer
    )
