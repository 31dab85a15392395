"""Evaluation of personalization strategies (TFF's ``learning/algorithms/personalization_eval.py``).

```
build_personalization_eval_computation(model_fn, personalize_fn_dict, baseline_evaluate_fn,
                                       max_num_clients=100)
-> (<server_model_weights=ModelWeights@SERVER,
     federated_client_input={<train_data=E*, test_data=E*>}@CLIENTS> -> metrics@SERVER)
```
Each client starts from the broadcast weights and computes
``baseline_metrics = baseline_evaluate_fn(model, test_data)`` and, per
strategy, ``personalize_fn_dict[name]()(model, train_data, test_data)`` (the
weights reset before each). Up to `max_num_clients` clients' metrics reach
the server (`tff.aggregators.UnweightedReservoirSamplingFactory`): each leaf
a list of values, the i-th entries of all leaves from one client. ``E`` is an
element of the model's input spec without its batch dimension: the strategies
batch the data themselves.
"""

from __future__ import annotations

import collections
from typing import Callable, Mapping

import tensorflow as tf

from simharness.aggregators import sampling
from simharness.core import intrinsics as I
from simharness.core import types as T
from simharness.core import narrowing as N
from simharness.core.computation import Computation, federated_computation, tf_computation
from simharness.core.tracing import Value
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.learning._typing import TensorStructure
from simharness.learning.models import model_weights as model_weights_lib
from simharness.learning.models import variable

__all__ = ['build_personalization_eval_computation']

_TRAIN_DATA_KEY = 'train_data'
_EVAL_DATA_KEY = 'test_data'

#: A strategy's metrics: an `OrderedDict` (possibly nested) of scalar tensors.
_MetricsType = Mapping[str, TensorStructure]
_FinetuneEvalFnType = Callable[
    [variable.VariableModel, tf.data.Dataset, tf.data.Dataset], _MetricsType
]


def build_personalization_eval_computation(
    model_fn: Callable[[], variable.VariableModel],
    personalize_fn_dict: Mapping[str, Callable[[], _FinetuneEvalFnType]],
    baseline_evaluate_fn: Callable[[variable.VariableModel, tf.data.Dataset], _MetricsType],
    max_num_clients: int = 100,
) -> Computation:
    """A federated computation evaluating personalization strategies on the clients.

    Args:
      model_fn: a no-arg callable returning a new `VariableModel` (built from
        scratch on every call).
      personalize_fn_dict: an `OrderedDict` of strategy name -> no-arg callable
        returning a `tf.function` ``(model, train_data, test_data) ->
        metrics`` (an `OrderedDict`, possibly nested, of scalar tensors). The
        builders run in the client computation's graph, so strategies may
        create variables (optimizers). The model comes with the broadcast
        weights; the datasets are unbatched.
      baseline_evaluate_fn: a `tf.function` ``(model, test_data) -> metrics``,
        the metrics of the broadcast model (key ``'baseline_metrics'``).
      max_num_clients: the most clients whose metrics are collected (sampled
        without replacement; a sampled client gives all its metrics).

    Returns:
      ``(<model_weights@SERVER, {<train_data=E*, test_data=E*>}@CLIENTS> ->
      OrderedDict(baseline_metrics=..., <strategy>=...)@SERVER)``, every metric
      a list of up to `max_num_clients` values.

    Raises:
      TypeError: an argument has the wrong type (`model_fn` not a callable
        returning a `VariableModel`, `personalize_fn_dict` not an
        `OrderedDict` of str -> builders of callables, `baseline_evaluate_fn`
        not callable, `max_num_clients` not an int).
      ValueError: ``'baseline_metrics'`` is a strategy name, or
        `max_num_clients` is not positive.
    """
    if not callable(model_fn):
        raise SimharnessTypeError(
            f'model_fn must be a callable, got {type(model_fn).__name__}', actual=type(model_fn)
        )
    # The types, from a model built in a graph of its own.
    with tf.Graph().as_default():
        model = model_fn()
        if not isinstance(model, variable.VariableModel):
            raise SimharnessTypeError(
                'model_fn must return a tff.learning.models.VariableModel, got '
                f'{type(model).__name__}',
                expected=variable.VariableModel,
                actual=type(model),
            )
        model_weights_type = model_weights_lib.weights_type_from_model(model)
        batch_type = T.to_type(model.input_spec)
    # The strategies batch the data themselves: the clients' elements are unbatched.
    element_type = _remove_batch_dim(batch_type)
    client_input_type = T.to_type(
        collections.OrderedDict(
            train_data=T.SequenceType(element_type), test_data=T.SequenceType(element_type)
        )
    )
    if isinstance(max_num_clients, bool) or not isinstance(max_num_clients, int):
        raise SimharnessTypeError(
            f'max_num_clients must be an int, got {type(max_num_clients).__name__}',
            expected=int,
            actual=type(max_num_clients),
        )
    if max_num_clients <= 0:
        raise SimharnessValueError('max_num_clients must be a positive integer.')
    if not callable(baseline_evaluate_fn):
        raise SimharnessTypeError(
            f'baseline_evaluate_fn must be a callable, got {type(baseline_evaluate_fn).__name__}',
            actual=type(baseline_evaluate_fn),
        )

    client_computation = _build_client_computation(
        model_weights_type, client_input_type, model_fn, personalize_fn_dict, baseline_evaluate_fn
    )
    metrics_type = N.as_tensor_or_struct(client_computation.type_signature.result)
    aggregation_process = sampling.UnweightedReservoirSamplingFactory(
        sample_size=max_num_clients
    ).create(metrics_type)

    @federated_computation(
        T.FederatedType(model_weights_type, T.SERVER), T.FederatedType(client_input_type, T.CLIENTS)
    )
    def personalization_eval(server_model_weights: Value, federated_client_input: Value) -> Value:
        client_init_weights = I.federated_broadcast(server_model_weights)
        client_final_metrics = I.federated_map(
            client_computation, (client_init_weights, federated_client_input)
        )
        # Collecting clients' metrics: the user decides whether that is proper.
        sampling_output = aggregation_process.next(
            aggregation_process.initialize(), client_final_metrics
        )
        return sampling_output.result

    return personalization_eval


def _check_personalize_fn_dict(personalize_fn_dict: object) -> None:
    if not isinstance(personalize_fn_dict, collections.OrderedDict):
        raise SimharnessTypeError(
            'personalize_fn_dict must be a collections.OrderedDict, got '
            f'{type(personalize_fn_dict).__name__}',
            expected=collections.OrderedDict,
            actual=type(personalize_fn_dict),
        )
    if 'baseline_metrics' in personalize_fn_dict:
        raise SimharnessValueError(
            'baseline_metrics should not be used as a key in personalize_fn_dict.'
        )
    for name, builder in personalize_fn_dict.items():
        if not isinstance(name, str):
            raise SimharnessTypeError(
                f'personalize_fn_dict key {name!r} must be a str', expected=str, actual=type(name)
            )
        if not callable(builder):
            raise SimharnessTypeError(
                f'personalize_fn_dict[{name!r}] must be a no-arg callable returning a '
                f'personalization function, got {type(builder).__name__}',
                actual=type(builder),
            )


def _build_client_computation(
    model_weights_type: T.Type,
    client_data_type: T.Type,
    model_fn: Callable[[], variable.VariableModel],
    personalize_fn_dict: Mapping[str, Callable[[], _FinetuneEvalFnType]],
    baseline_evaluate_fn: Callable[[variable.VariableModel, tf.data.Dataset], _MetricsType],
) -> Computation:
    """``(<model weights, client input>) -> OrderedDict(baseline_metrics=..., <name>=...)``."""
    _check_personalize_fn_dict(personalize_fn_dict)

    @tf_computation(model_weights_type, client_data_type)
    def _client_computation(
        initial_model_weights: model_weights_lib.ModelWeights,
        client_input: Mapping[str, tf.data.Dataset],
    ) -> collections.OrderedDict[str, _MetricsType]:
        train_data = client_input[_TRAIN_DATA_KEY]
        test_data = client_input[_EVAL_DATA_KEY]
        final_metrics = collections.OrderedDict()
        final_metrics['baseline_metrics'] = _compute_baseline_metrics(
            model_fn, initial_model_weights, test_data, baseline_evaluate_fn
        )
        final_metrics.update(
            _compute_p13n_metrics(
                model_fn, initial_model_weights, train_data, test_data, personalize_fn_dict
            )
        )
        return final_metrics

    return _client_computation


def _remove_batch_dim(type_spec: T.Type) -> T.Type:
    """`type_spec` with the first dimension of every tensor removed.

    Raises:
      TypeError: a leaf is not a tensor type.
      ValueError: a tensor has no first dimension (a scalar, or unknown rank).
    """
    if isinstance(type_spec, T.StructType):
        return T.StructType(
            [(name, _remove_batch_dim(t)) for name, t in type_spec.items()],
            container=type_spec.container,
        )
    if not isinstance(type_spec, T.TensorType):
        raise SimharnessTypeError(
            f'Expected a tensor type in the input spec, got {type_spec}',
            expected=T.TensorType,
            actual=type(type_spec),
        )
    shape = type_spec.shape
    if shape is None or len(shape) == 0:
        raise SimharnessValueError('Provided shape must have rank 1 or higher.')
    return T.TensorType(type_spec.dtype, tuple(shape)[1:])


def _assign(
    model_weights: model_weights_lib.ModelWeights, values: model_weights_lib.ModelWeights
) -> None:
    tf.nest.map_structure(lambda v, t: v.assign(t), model_weights, values)


def _compute_baseline_metrics(
    model_fn: Callable[[], variable.VariableModel],
    initial_model_weights: model_weights_lib.ModelWeights,
    test_data: tf.data.Dataset,
    baseline_evaluate_fn: Callable[[variable.VariableModel, tf.data.Dataset], _MetricsType],
) -> _MetricsType:
    """The metrics of a new model set to `initial_model_weights`."""
    model = model_fn()
    model_weights = model_weights_lib.ModelWeights.from_model(model)

    @tf.function
    def assign_and_compute() -> _MetricsType:
        _assign(model_weights, initial_model_weights)
        return baseline_evaluate_fn(model, test_data)

    return assign_and_compute()


def _compute_p13n_metrics(
    model_fn: Callable[[], variable.VariableModel],
    initial_model_weights: model_weights_lib.ModelWeights,
    train_data: tf.data.Dataset,
    test_data: tf.data.Dataset,
    personalize_fn_dict: Mapping[str, Callable[[], _FinetuneEvalFnType]],
) -> collections.OrderedDict[str, _MetricsType]:
    """Each strategy's metrics, the model reset to `initial_model_weights` before each."""
    model = model_fn()
    model_weights = model_weights_lib.ModelWeights.from_model(model)
    # The strategies (and their variables) are built here, in the computation's graph,
    # outside the tf.function below (which may not create variables).
    personalize_fns = collections.OrderedDict(
        (name, builder()) for name, builder in personalize_fn_dict.items()
    )
    for name, fn in personalize_fns.items():
        if not callable(fn):
            raise SimharnessTypeError(
                f'personalize_fn_dict[{name!r}]() must return a callable (a tf.function of '
                f'(model, train_data, test_data)), got {type(fn).__name__}',
                actual=type(fn),
            )

    @tf.function
    def loop_and_compute() -> collections.OrderedDict[str, _MetricsType]:
        p13n_metrics = collections.OrderedDict()
        for name, personalize_fn in personalize_fns.items():
            _assign(model_weights, initial_model_weights)
            p13n_metrics[name] = personalize_fn(model, train_data, test_data)
        return p13n_metrics

    return loop_and_compute()
