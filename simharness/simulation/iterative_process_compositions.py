"""Composing a dataset computation with a computation or process (TFF's compositions).

``compose_dataset_computation_with_iterative_process(cd.dataset_computation,
process)`` gives a process whose `next` takes client ids (or whatever the
dataset computation takes) at CLIENTS and builds each client's dataset where
that client runs: on the process stack, a worker reads its clients' data
itself and the driver ships only ids.
"""

from __future__ import annotations

import importlib
from typing import Any, Optional

from simharness import templates
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import Computation, federated_computation
from simharness.errors import SimharnessTypeError

__all__ = [
    'MultipleMatchingSequenceTypesError',
    'SequenceTypeNotAssignableError',
    'SequenceTypeNotFoundError',
    'compose_dataset_computation_with_computation',
    'compose_dataset_computation_with_iterative_process',
    'compose_dataset_computation_with_learning_process',
]


class SequenceTypeNotAssignableError(SimharnessTypeError):
    """The computation takes sequences, none of them of the dataset computation's type."""


class SequenceTypeNotFoundError(SimharnessTypeError):
    """The computation takes no sequence at CLIENTS."""


class MultipleMatchingSequenceTypesError(SimharnessTypeError):
    """The computation takes more than one matching sequence at CLIENTS."""


def _check_computation(value: Any, what: str) -> None:
    if not isinstance(value, Computation):
        raise SimharnessTypeError(
            f'{what} must be a Computation, got {type(value).__name__}',
            expected=Computation,
            actual=type(value),
        )


def _check_dataset_computation(dataset_computation: Any) -> T.SequenceType:
    _check_computation(dataset_computation, 'dataset_computation')
    result = dataset_computation.type_signature.result
    if not isinstance(result, T.SequenceType):
        raise SimharnessTypeError(
            'Expected a `federated_language.SequenceType` to be returned from '
            f'`dataset_computation`; found {result} instead.',
            expected=T.SequenceType,
            actual=result,
        )
    if dataset_computation.type_signature.parameter is None:
        raise SimharnessTypeError(
            'Can only construct a new iterative process if `dataset_computation` accepts a '
            f'non-None arg; the type {dataset_computation.type_signature} accepts no argument.',
            expected='a parameter',
            actual=dataset_computation.type_signature,
        )
    return result


def _contains_sequence(t: Optional[T.Type]) -> bool:
    if t is None:
        return False
    if isinstance(t, T.SequenceType):
        return True
    if isinstance(t, T.StructType):
        return any(_contains_sequence(e) for e in t)
    if isinstance(t, T.FederatedType):
        return _contains_sequence(t.member)
    if isinstance(t, T.FunctionType):
        return _contains_sequence(t.parameter) or _contains_sequence(t.result)
    return False


def compose_dataset_computation_with_computation(
    dataset_computation: Computation, computation_body: Computation
) -> Computation:
    """A computation that maps `dataset_computation` over its CLIENTS argument, then runs the body.

    With ``dataset_computation: (T -> U*)`` and ``computation_body:
    ({U*}@CLIENTS -> V)`` the result is ``({T}@CLIENTS -> V)``; a struct
    parameter has its one ``{U*}@CLIENTS`` member (at any depth) replaced by
    ``{T}@CLIENTS``.

    Raises:
        SimharnessTypeError: arguments that are not computations, a dataset
            computation without parameter or not returning a sequence, or a
            body without a matching parameter (`SequenceTypeNotFoundError`,
            `SequenceTypeNotAssignableError`,
            `MultipleMatchingSequenceTypesError`).
    """
    dataset_return_type = _check_dataset_computation(dataset_computation)
    _check_computation(computation_body, 'computation_body')
    body_param = computation_body.type_signature.parameter
    federated_param = T.FederatedType(dataset_computation.type_signature.parameter, T.CLIENTS)

    def is_desired(t: Any) -> bool:
        return isinstance(t, T.FederatedType) and t.member.is_assignable_from(dataset_return_type)

    if is_desired(body_param):

        @federated_computation(federated_param)
        def new_computation(param: Any) -> Any:
            return computation_body(intrinsics.federated_map(dataset_computation, param))

        return new_computation
    if not isinstance(body_param, T.StructType):
        raise SimharnessTypeError(
            '`computation_body` is not a single argument matching the signature of '
            '`dataset_computation` result signature, nor a struct of arguments.\n'
            f'Argument signature: {body_param}\nResult signature: {dataset_return_type}',
            expected=T.FederatedType(dataset_return_type, T.CLIENTS),
            actual=body_param,
        )

    found: list[list[int]] = []
    sequence_types: list[T.Type] = []

    def new_struct_type(struct: T.StructType, path: list[int]) -> T.StructType:
        elements: list[tuple[Any, T.Type]] = []
        for i, (name, elem) in enumerate(struct.items()):
            if isinstance(elem, T.FederatedType) and isinstance(elem.member, T.SequenceType):
                sequence_types.append(elem.member)
            if is_desired(elem):
                if found:
                    raise MultipleMatchingSequenceTypesError(
                        'Cannot accept a `computation_body` computation that declares more '
                        f'than one sequence parameter matching the expected dataset type {elem}; '
                        f'received a computation declaring parameter {body_param}.'
                    )
                found.append(path + [i])
                elements.append((name, federated_param))
            elif isinstance(elem, T.StructType):
                elements.append((name, new_struct_type(elem, path + [i])))
            else:
                elements.append((name, elem))
        return T.StructType(elements, container=getattr(struct, 'container', None))

    new_param_type = new_struct_type(body_param, [])
    if not found:
        if sequence_types:
            raise SequenceTypeNotAssignableError(
                'No sequence parameter assignable from expected dataset computation result type '
                f'found in `computation_body`. \nList of sequences in argument signature: '
                f'{sequence_types}\nExpected sequence type: {dataset_return_type}',
                expected=dataset_return_type,
                actual=sequence_types,
            )
        raise SequenceTypeNotFoundError(
            'No sequence parameter found in `computation_body`, but composition with a '
            'computation yielding sequences requested.\nArgument signature: '
            f'{body_param}\nExpected sequence type: {dataset_return_type}',
            expected=dataset_return_type,
            actual=body_param,
        )
    index_path = found[0]

    def map_at_path(param: Any, depth: int) -> list:
        out = []
        for i, elem in enumerate(param):
            if i != index_path[depth]:
                out.append(elem)
            elif depth == len(index_path) - 1:
                out.append(intrinsics.federated_map(dataset_computation, elem))
            else:
                out.append(map_at_path(elem, depth + 1))
        return out

    @federated_computation(new_param_type)
    def new_struct_computation(*args: Any) -> Any:
        param = args[0] if len(args) == 1 and len(new_param_type) != 1 else args
        return computation_body(*map_at_path(param, 0))

    return new_struct_computation


def compose_dataset_computation_with_iterative_process(
    dataset_computation: Computation, process: Any
) -> Any:
    """An `IterativeProcess` whose `next` builds the clients' datasets from its CLIENTS argument.

    With ``dataset_computation: (T -> U*)`` and ``process.next: (<S,
    {U*}@CLIENTS> -> <S, V>)`` the new `next` is ``(<S, {T}@CLIENTS> -> <S,
    V>)``; `initialize` is kept.

    Raises:
        SimharnessTypeError: as `compose_dataset_computation_with_computation`,
            or `process` is not an `IterativeProcess`, or its `initialize`
            returns a sequence.
    """
    _check_dataset_computation(dataset_computation)
    if not isinstance(process, templates.IterativeProcess):
        raise SimharnessTypeError(
            f'process must be an IterativeProcess, got {type(process).__name__}',
            expected=templates.IterativeProcess,
            actual=type(process),
        )
    init_fn = process.initialize
    if _contains_sequence(init_fn.type_signature.result):
        raise SimharnessTypeError(
            'Cannot construct a new iterative process if a dataset is returned by '
            f'`initialize`; initialize has result type {init_fn.type_signature.result}.',
            expected='no sequence',
            actual=init_fn.type_signature.result,
        )
    new_next = compose_dataset_computation_with_computation(dataset_computation, process.next)
    return templates.IterativeProcess(initialize_fn=init_fn, next_fn=new_next)


def compose_dataset_computation_with_learning_process(
    dataset_computation: Computation, process: Any
) -> Any:
    """As `compose_dataset_computation_with_iterative_process`, keeping a `LearningProcess`'s
    `get_model_weights`, `set_model_weights`, `get_hparams` and `set_hparams`."""
    # reason: simharness.learning (Keras) is loaded only when a learning process is composed,
    # so that importing simharness.simulation stays light.
    learning_process = importlib.import_module('simharness.learning.templates.learning_process')
    composed = compose_dataset_computation_with_iterative_process(dataset_computation, process)
    return learning_process.LearningProcess(
        initialize_fn=composed.initialize,
        next_fn=composed.next,
        get_model_weights=process.get_model_weights,
        set_model_weights=process.set_model_weights,
        get_hparams_fn=process.get_hparams,
        set_hparams_fn=process.set_hparams,
    )
