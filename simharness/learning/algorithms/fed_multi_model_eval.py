"""Several models evaluated at once (TFF's ``learning/algorithms/fed_multi_model_eval.py``).

The models are named ``'a'``, ``'b'``, ... in the order given; every client
evaluates each on the same data.

```
build_fed_multi_model_eval(model_fns, model_distributor=None, metrics_aggregation_processes=None,
                           loop_implementation=DATASET_REDUCE)
state:    LearningAlgorithmState(global_model_weights={'a': ModelWeights, 'b': ...},
                                 distributor=(), client_work={'a': <metrics state>, ...},
                                 aggregator=<mean of empty updates>, finalizer=())
metrics:  OrderedDict(distributor=(), client_work={'a': OrderedDict(eval=OrderedDict(
              current_round_metrics=..., total_rounds_metrics=...)), ...}, aggregator, finalizer)

build_fed_multi_model_eval_from_processes(eval_processes)   (two or more `build_fed_eval`s)
state:    LearningAlgorithmState of dicts: every field {'a': that process's field, ...}
metrics:  OrderedDict(distributor={'a': ...}, client_work={'a': ...}, aggregator=..., finalizer=...)
```
"""

from __future__ import annotations

import collections
import string
from typing import Dict, Optional, Sequence

import tensorflow as tf

from simharness.aggregators import mean
from simharness.core import intrinsics as I
from simharness.core import types as T
from simharness.core import narrowing as N
from simharness.core.computation import Computation, federated_computation, tf_computation
from simharness.core.tracing import Value
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.learning import loop_builder
from simharness.learning._typing import TemplateField
from simharness.learning.algorithms import _common
from simharness.learning.algorithms.fed_eval import (
    _build_fed_eval_client_work,
    _build_functional_fed_eval_client_work,
)
from simharness.learning.models import functional
from simharness.learning.models import model_weights as model_weights_lib
from simharness.learning.templates import (
    client_works,
    composers,
    distributors,
    finalizers,
    learning_process,
)
from simharness.templates.aggregation_process import AggregationProcess
from simharness.templates.measured_process import MeasuredProcessOutput

__all__ = ['build_fed_multi_model_eval', 'build_fed_multi_model_eval_from_processes']


def _build_initial_model_weights_fn(model_fns: Sequence[_common.ModelFn]) -> Computation:
    """``( -> {'a': ModelWeights, 'b': ...})``: each model's initial weights."""
    for model_fn in model_fns:
        if not callable(model_fn) and not isinstance(model_fn, functional.FunctionalModel):
            raise SimharnessTypeError(
                'If `model_fn` is not a callable, it must be an instance '
                f'tff.learning.models.FunctionalModel. Got {type(model_fn)}',
                expected=functional.FunctionalModel,
                actual=type(model_fn),
            )

    @tf_computation()
    def initial_model_weights_fn() -> dict[str, model_weights_lib.ModelWeights]:
        initial_model_weights = []
        for model_fn in model_fns:
            if callable(model_fn):
                initial_model_weights.append(model_weights_lib.ModelWeights.from_model(model_fn()))
            else:
                trainable, non_trainable = model_fn.initial_weights
                initial_model_weights.append(
                    model_weights_lib.ModelWeights(
                        tuple(tf.convert_to_tensor(w) for w in trainable),
                        tuple(tf.convert_to_tensor(w) for w in non_trainable),
                    )
                )
        return dict(zip(string.ascii_lowercase, initial_model_weights))

    return initial_model_weights_fn


def build_fed_multi_model_eval(
    model_fns: Sequence[_common.ModelFn],
    model_distributor: Optional[distributors.DistributionProcess] = None,
    metrics_aggregation_processes: Optional[Sequence[AggregationProcess]] = None,
    loop_implementation: loop_builder.LoopImplementation = (
        loop_builder.LoopImplementation.DATASET_REDUCE
    ),
) -> learning_process.LearningProcess:
    """A `LearningProcess` evaluating several models on the same client data (no training).

    Each round broadcasts the models' weights; each client evaluates every
    model on its data; each model's unfinalized metrics are aggregated and
    finalized by its metrics aggregation process (current round's and all
    rounds'). Set the weights to evaluate with ``set_model_weights(state,
    {'a': weights_a, 'b': weights_b, ...})``.

    Args:
      model_fns: one or more no-arg callables returning a new `VariableModel`,
        or `FunctionalModel`s, all of one input spec; named 'a', 'b', ... in order.
      model_distributor: a `DistributionProcess` of the dict of weights;
        default broadcast.
      metrics_aggregation_processes: one `AggregationProcess` per model, whose
        result is ``(current_round_metrics, total_rounds_metrics)``; default
        `SumThenFinalizeFactory` of each model's finalizers.
      loop_implementation: the clients' dataset loop (`VariableModel` only).

    Raises:
      ValueError: no model, or as many processes as models not given.
      TypeError: an argument has the wrong type.
    """
    if not model_fns:
        raise SimharnessValueError('At least one model_fn should be provided.')
    if len(model_fns) > len(string.ascii_lowercase):
        raise SimharnessValueError(
            f'At most {len(string.ascii_lowercase)} models (named a-z), got {len(model_fns)}.'
        )
    initial_model_weights_fn = _build_initial_model_weights_fn(model_fns)
    multi_model_weights_type = initial_model_weights_fn.type_signature.result
    if not isinstance(multi_model_weights_type, T.StructType):
        raise SimharnessValueError(
            f'model_weights_type must be a StructType. Found: {type(multi_model_weights_type)}.'
        )
    if model_distributor is None:
        model_distributor = distributors.build_broadcast_process(multi_model_weights_type)
    else:
        _common.check_instance(
            model_distributor, distributors.DistributionProcess, 'model_distributor'
        )
    if metrics_aggregation_processes is None:
        processes: Sequence[Optional[AggregationProcess]] = [None] * len(model_fns)
    elif len(metrics_aggregation_processes) != len(model_fns):
        raise SimharnessValueError(
            'If provided, metrics_aggregation_processes should be a sequence of length '
            f'{len(model_fns)} to match the number of model_fns.'
        )
    else:
        processes = list(metrics_aggregation_processes)

    client_work_processes: Dict[str, client_works.ClientWorkProcess] = {}
    for model_id, model_fn, weights_type, process in zip(
        string.ascii_lowercase, model_fns, multi_model_weights_type, processes
    ):
        model_weights_type = N.as_struct(weights_type, f'model {model_id} weights')
        if callable(model_fn):
            client_work_processes[model_id] = _build_fed_eval_client_work(
                model_fn, process, model_weights_type, loop_implementation
            )
        else:
            client_work_processes[model_id] = _build_functional_fed_eval_client_work(
                model_fn, process, model_weights_type
            )

    @federated_computation()
    def multi_init() -> Value:
        return I.federated_zip(
            {model_id: work.initialize() for model_id, work in client_work_processes.items()}
        )

    # All the models have one input spec: the first model's client data type.
    client_data_type = N.parameter_element(client_work_processes['a'].next.type_signature, 2)

    @federated_computation(
        multi_init.type_signature.result,
        T.FederatedType(multi_model_weights_type, T.CLIENTS),
        client_data_type,
    )
    def multi_next(state: Value, model_weights: Value, client_data: Value) -> MeasuredProcessOutput:
        new_states, metrics = {}, {}
        for model_id, work in client_work_processes.items():
            output = work.next(state[model_id], model_weights[model_id], client_data)
            new_states[model_id] = output.state
            metrics[model_id] = output.measurements
        empty_client_result = I.federated_value(
            client_works.ClientResult(update=(), update_weight=()), T.CLIENTS
        )
        return MeasuredProcessOutput(
            I.federated_zip(new_states), empty_client_result, I.federated_zip(metrics)
        )

    client_work = client_works.ClientWorkProcess(multi_init, multi_next)
    result_type = N.as_struct(T.to_type(client_works.ClientResult(update=(), update_weight=())))
    model_aggregator = mean.MeanFactory().create(
        N.as_tensor_or_struct(result_type.update), N.as_tensor_or_struct(result_type.update_weight)
    )
    aggregated = N.as_struct(model_aggregator.next.type_signature.result)
    # No update of the weights.
    finalizer = finalizers.build_identity_finalizer(
        multi_model_weights_type, N.as_struct(N.member_of(aggregated.result))
    )
    return composers.compose_learning_process(
        initial_model_weights_fn, model_distributor, client_work, model_aggregator, finalizer
    )


_FIELDS = ('global_model_weights', 'distributor', 'client_work', 'aggregator', 'finalizer')


def _combine_multi_state(state_dict: Dict[str, Value]) -> Value:
    """One `LearningAlgorithmState` (at SERVER) whose fields are dicts by model id."""
    return I.federated_zip(
        composers.LearningAlgorithmState(
            **{
                field: I.federated_zip(
                    {model_id: getattr(state, field) for model_id, state in state_dict.items()}
                )
                for field in _FIELDS
            }
        )
    )


def _combine_multi_metrics(metrics_dict: Dict[str, Value]) -> Value:
    """``OrderedDict(distributor={'a': ...}, client_work=..., aggregator=..., finalizer=...)``."""
    return I.federated_zip(
        collections.OrderedDict(
            (
                field,
                I.federated_zip(
                    {
                        model_id: getattr(metrics, field)
                        for model_id, metrics in metrics_dict.items()
                    }
                ),
            )
            for field in ('distributor', 'client_work', 'aggregator', 'finalizer')
        )
    )


def _get_single_model_state(state: Value, model_id: str) -> Value:
    """Model `model_id`'s `LearningAlgorithmState` (at SERVER) out of the combined one."""
    return I.federated_zip(
        composers.LearningAlgorithmState(
            **{field: getattr(getattr(state, field), model_id) for field in _FIELDS}
        )
    )


def build_fed_multi_model_eval_from_processes(
    eval_processes: Sequence[learning_process.LearningProcess],
) -> learning_process.LearningProcess:
    """One `LearningProcess` running several single-model evaluation processes on the same data.

    Each process's state must be a `LearningAlgorithmState`; all take the same
    client data type. The processes are named 'a', 'b', ... in order; the
    combined state and metrics hold, per field, a dict by name.

    Raises:
      ValueError: fewer than two processes, or their client data types differ.
    """
    if len(eval_processes) < 2:
        raise SimharnessValueError(
            'At least two evaluation processes must be provided for multi-model evaluation.'
        )
    if len(eval_processes) > len(string.ascii_letters):
        raise SimharnessValueError(
            f'At most {len(string.ascii_letters)} evaluation processes, got {len(eval_processes)}.'
        )
    for i, process in enumerate(eval_processes):
        _common.check_instance(process, learning_process.LearningProcess, f'eval_processes[{i}]')
    signatures = [p.next.type_signature for p in eval_processes]
    dataset_type = N.parameter_element(signatures[0], 1)
    if not all(
        N.parameter_element(sig, 1).is_equivalent_to(dataset_type) for sig in signatures[1:]
    ):
        raise SimharnessValueError('All evaluation processes must have the same dataset type.')
    named = list(zip(string.ascii_letters, eval_processes))

    @federated_computation()
    def init_fn() -> Value:
        return _combine_multi_state({model_id: p.initialize() for model_id, p in named})

    state_type = N.as_federated(init_fn.type_signature.result)

    @federated_computation(state_type, dataset_type)
    def next_fn(state: Value, client_data: Value) -> learning_process.LearningProcessOutput:
        multi_state, multi_metrics = collections.OrderedDict(), collections.OrderedDict()
        for model_id, process in named:
            output = process.next(_get_single_model_state(state, model_id), client_data)
            multi_state[model_id] = output.state
            multi_metrics[model_id] = output.metrics
        return learning_process.LearningProcessOutput(
            state=_combine_multi_state(multi_state), metrics=_combine_multi_metrics(multi_metrics)
        )

    @tf_computation(state_type.member)
    def get_model_weights_fn(state: composers.LearningAlgorithmState) -> TemplateField:
        return state.global_model_weights

    @tf_computation(state_type.member, get_model_weights_fn.type_signature.result)
    def set_model_weights_fn(
        state: composers.LearningAlgorithmState, model_weights: TemplateField
    ) -> composers.LearningAlgorithmState:
        return composers.LearningAlgorithmState(
            global_model_weights=model_weights,
            distributor=state.distributor,
            client_work=state.client_work,
            aggregator=state.aggregator,
            finalizer=state.finalizer,
        )

    return learning_process.LearningProcess(
        init_fn, next_fn, get_model_weights_fn, set_model_weights_fn
    )
