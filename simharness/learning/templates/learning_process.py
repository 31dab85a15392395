"""TFF's `LearningProcess` (``learning/templates/learning_process.py``).

```
initialize:        ( -> S@SERVER)
next:              (<S@SERVER, {D*}@CLIENTS> -> LearningProcessOutput(state=S@SERVER,
                                                                      metrics=M@SERVER))
get_model_weights: (S -> W)           set_model_weights: (<S, W> -> S)
get_hparams:       (S -> H)           set_hparams:       (<S, H> -> S)
```
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from simharness.core import types as T
from simharness.core import narrowing as N
from simharness.core.computation import Computation
from simharness.learning._typing import TemplateField
from simharness.learning.templates import hparams_base
from simharness.templates.errors import TemplateNextFnNumArgsError
from simharness.templates.iterative_process import IterativeProcess, check_computation

__all__ = [
    'GetModelWeightsTypeSignatureError',
    'LearningProcess',
    'LearningProcessOutput',
    'LearningProcessOutputError',
    'LearningProcessPlacementError',
    'SetModelWeightsTypeSignatureError',
]


class Error(Exception):
    """Generic module-level error (TFF's class)."""


class LearningProcessPlacementError(Error):
    """A learning process does not have the expected placements."""


class LearningProcessOutputError(Error):
    """`next_fn` does not return a `LearningProcessOutput`."""


class GetModelWeightsTypeSignatureError(Error):
    """`get_model_weights` does not take the state."""


class SetModelWeightsTypeSignatureError(Error):
    """`set_model_weights` does not take ``<state, weights>`` or return a state."""


class LearningProcessOutput(NamedTuple):
    """What `LearningProcess.next` returns.

    Attributes:
      state: passed to the next call of `next`.
      metrics: the round's metrics (nested OrderedDicts of tensors).
    """

    state: TemplateField
    metrics: TemplateField


def _placement(t: Optional[T.Type]) -> Optional[T.PlacementLiteral]:
    return t.placement if isinstance(t, T.FederatedType) else None


class LearningProcess(IterativeProcess):
    """A stateful process for learning tasks that produces metrics.

    ::

        state = process.initialize()
        for _ in range(3):
            state, metrics = process.next(state, client_datasets)
        model_weights = process.get_model_weights(state)

    Args:
      initialize_fn: ``( -> S@SERVER)``.
      next_fn: ``(<S@SERVER, {D*}@CLIENTS> -> LearningProcessOutput(S@SERVER, M@SERVER))``.
      get_model_weights: ``(S -> W)``, unplaced.
      set_model_weights: ``(<S, W> -> S)``, unplaced.
      get_hparams_fn: ``(S -> H)``; default: an empty OrderedDict.
      set_hparams_fn: ``(<S, H> -> S)``; default: the state unchanged.

    Raises:
      LearningProcessPlacementError: a placement differs from the above.
      LearningProcessOutputError: `next_fn` does not return a
        `LearningProcessOutput`.
      TemplateNextFnNumArgsError: `next_fn` does not take two arguments.
      GetModelWeightsTypeSignatureError, SetModelWeightsTypeSignatureError:
        the weights functions do not fit the state.
      GetHparamsTypeError, SetHparamsTypeError: nor do the hparams ones; and
        the errors of `IterativeProcess`.
    """

    def __init__(
        self,
        initialize_fn: Computation,
        next_fn: Computation,
        get_model_weights: Computation,
        set_model_weights: Computation,
        *,
        get_hparams_fn: Optional[Computation] = None,
        set_hparams_fn: Optional[Computation] = None,
    ):
        super().__init__(initialize_fn, next_fn)
        init_result = initialize_fn.type_signature.result
        if _placement(init_result) is not T.SERVER:
            raise LearningProcessPlacementError(
                'The result of `initialize_fn` must be placed at `SERVER` but found placement '
                f'{_placement(init_result)}.'
            )
        next_result = next_fn.type_signature.result
        if not (
            isinstance(next_result, T.StructType) and next_result.container is LearningProcessOutput
        ):
            raise LearningProcessOutputError(
                'The `next_fn` of a `LearningProcess` must return a `LearningProcessOutput` '
                f'object, but returns {next_result!r}'
            )
        next_param = next_fn.type_signature.parameter
        if not isinstance(next_param, T.StructType) or len(next_param) != 2:
            raise TemplateNextFnNumArgsError(
                f'The `next_fn` must have two input arguments, but found an input of type '
                f'{next_param}.',
                actual=next_param,
            )
        if _placement(next_param[1]) is not T.CLIENTS:
            raise LearningProcessPlacementError(
                'The second input argument of `next_fn` must be placed at `CLIENTS`, but found '
                f'placement {_placement(next_param[1])}.'
            )
        if _placement(next_result.metrics) is not T.SERVER:
            raise LearningProcessPlacementError(
                'The result of `next_fn` must be placed at `SERVER` but found placement '
                f'{_placement(next_result.metrics)} for `metrics`.'
            )
        state_member = N.member_of(next_param[0], 'the first parameter of `next_fn`')

        check_computation(get_model_weights, 'get_model_weights')
        get_param = get_model_weights.type_signature.parameter
        if get_param is None or not get_param.is_equivalent_to(state_member):
            raise GetModelWeightsTypeSignatureError(
                'The input type of `get_model_weights` must be assignable from the member type '
                f'of the output of `initialize_fn`, but found input type {get_param}, which is '
                f'not equivalent to {state_member}.'
            )
        self._get_model_weights = get_model_weights

        check_computation(set_model_weights, 'set_model_weights')
        set_param = set_model_weights.type_signature.parameter
        if (
            not isinstance(set_param, T.StructType)
            or len(set_param) != 2
            or not set_param[0].is_equivalent_to(state_member)
        ):
            raise SetModelWeightsTypeSignatureError(
                'The input type of `set_model_weights` must be assignable from the member type '
                f'of the output of `initialize_fn`, but found input type {set_param}, which is '
                f'not equivalent to <{state_member}, weights>.'
            )
        set_result = set_model_weights.type_signature.result
        if not state_member.is_assignable_from(set_result):
            raise SetModelWeightsTypeSignatureError(
                'The output type of `set_model_weights` must be assignable to the first '
                f'parameter of `next_fn`, but found input type {set_result}, which is not '
                f'assignable to; {state_member}.'
            )
        self._set_model_weights = set_model_weights

        self._get_hparams_fn, self._set_hparams_fn = hparams_base.hparams_pair(
            N.member_of(init_result), get_hparams_fn, set_hparams_fn
        )

    @property
    def get_model_weights(self) -> Computation:
        """``(S -> W)``: the model weights of an (unplaced) state."""
        return self._get_model_weights

    @property
    def set_model_weights(self) -> Computation:
        """``(<S, W> -> S)``: the state with new model weights."""
        return self._set_model_weights

    @property
    def get_hparams(self) -> Computation:
        """``(S -> H)``: the hyperparameters of a state (an OrderedDict)."""
        return self._get_hparams_fn

    @property
    def set_hparams(self) -> Computation:
        """``(<S, H> -> S)``: the state with the given hyperparameters."""
        return self._set_hparams_fn
