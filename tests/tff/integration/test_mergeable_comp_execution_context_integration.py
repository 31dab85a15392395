"""Port of TFF's ``tensorflow_federated/python/tests/mergeable_comp_execution_context_integration_test.py``.
No case left out.

TFF's cases make one `framework.AsyncExecutionContext` per subround slot, each on its own
`tff.framework.local_cpp_executor_factory(...)` (here a pool of worker processes, started
on its first call), as many as 60 in one case. Here each case closes every context and
factory it made when it ends, and checks that no worker process or shared-memory segment
of its own is left (`made`). The cases that start five pools or more (every subround slot
used: 10 to 120 worker processes) take 1.5 to 20 s each on a 2-core machine: they are marked
``slow`` (CI runs ``-m "not slow"``); those with one client, or one context, start one pool.
"""

from __future__ import annotations

import collections
import os
import time
from typing import Any, Iterator, List, Set

import numpy as np
import psutil
import pytest

import simharness as federated_language
import simharness as tff

_NUM_EXPLICIT_SUBROUNDS = 50


# ------------------------------------------------------- what a case made


def _descendants() -> Set[int]:
    """This process's live descendants but multiprocessing's forkserver and resource
    tracker (they stay for the session; the workers the forkserver forks are counted)."""
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = ' '.join(p.cmdline())
            if ('forkserver' in cmd and p.ppid() == os.getpid()) or 'resource_tracker' in cmd:
                continue
            if p.status() != psutil.STATUS_ZOMBIE:
                out.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _segments(pids: Set[int]) -> Set[str]:
    """The shared-memory segments that the processes `pids` created (named
    ``simharness_<creator pid>_<hex>``)."""
    try:
        names = os.listdir('/dev/shm')
    except FileNotFoundError:
        return set()
    prefixes = tuple(f'simharness_{pid}_' for pid in pids)
    return {n for n in names if n.startswith(prefixes)}


class _Made:
    """The factories and contexts a case made: closed at its end, innermost first."""

    def __init__(self) -> None:
        self.closers: List[Any] = []

    def __call__(self, thing: Any) -> Any:
        self.closers.append(thing.close)
        return thing

    def async_contexts(self, num: int, **factory_kwargs: Any) -> List[Any]:
        """`num` async contexts as TFF's cases make them, each on a factory of its own."""
        contexts = []
        for _ in range(num):
            factory = self(
                tff.framework.local_cpp_executor_factory(
                    max_concurrent_computation_calls=1, **factory_kwargs
                )
            )
            contexts.append(
                self(
                    federated_language.framework.AsyncExecutionContext(
                        executor_fn=factory,
                        compiler_fn=tff.backends.native.desugar_and_transform_to_native,
                        transform_args=tff.tensorflow.transform_args,
                        transform_result=tff.tensorflow.transform_result,
                    )
                )
            )
        return contexts

    def close(self) -> None:
        while self.closers:
            self.closers.pop()()


@pytest.fixture
def made() -> Iterator[_Made]:
    """Registers what a case makes (``made(ctx)``, ``made.async_contexts(n)``); closes it all
    after the case and checks that no worker process nor segment of the case is left."""
    me = os.getpid()
    processes_before = _descendants()
    segments_before = _segments({me} | processes_before)
    registry = _Made()
    try:
        yield registry
    finally:
        workers = _descendants() - processes_before
        registry.close()
    deadline = time.monotonic() + 10
    while True:
        left = {
            p
            for p in workers
            if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
        }
        segments = _segments({me} | workers) - segments_before
        if not (left or segments) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not left, f'worker processes left running after close: {sorted(left)}'
    assert not segments, f'shared-memory segments left after close: {sorted(segments)}'


# ------------------------------------------------------ TFF's computations


def build_sum_client_arg_computation(server_arg_type, clients_arg_type):
    @federated_language.federated_computation(server_arg_type, clients_arg_type)
    def up_to_merge(server_arg, client_arg):
        del server_arg  # Unused
        return federated_language.federated_sum(client_arg)

    return up_to_merge


def build_noarg_count_clients_computation():
    @federated_language.federated_computation()
    def up_to_merge():
        return federated_language.federated_sum(
            federated_language.federated_value(1, federated_language.CLIENTS)
        )

    return up_to_merge


def build_whimsy_merge_computation(arg_type):
    @federated_language.federated_computation(arg_type, arg_type)
    def merge(arg0, arg1):
        del arg1  # Unused
        return arg0

    return merge


def build_sum_merge_computation(arg_type):
    @tff.tensorflow.computation(arg_type, arg_type)
    def merge(arg0, arg1):
        return arg0 + arg1

    return merge


def build_whimsy_after_merge_computation(original_arg_type, merge_result_type):
    merged = federated_language.FederatedType(merge_result_type, federated_language.SERVER)
    if original_arg_type is not None:

        @federated_language.federated_computation(original_arg_type, merged)
        def after_merge(original_arg, merge_result):
            del merge_result  # Unused
            return original_arg
    else:

        @federated_language.federated_computation(merged)
        def after_merge(merge_result):
            return merge_result

    return after_merge


def build_return_merge_result_computation(original_arg_type, merge_result_type):
    @federated_language.federated_computation(
        original_arg_type,
        federated_language.FederatedType(merge_result_type, federated_language.SERVER),
    )
    def after_merge(original_arg, merge_result):
        del original_arg  # Unused
        return merge_result

    return after_merge


def build_return_merge_result_with_no_first_arg_computation(merge_result_type):
    @federated_language.federated_computation(
        federated_language.FederatedType(merge_result_type, federated_language.SERVER)
    )
    def after_merge(merge_result):
        return merge_result

    return after_merge


def build_sum_merge_with_first_arg_computation(original_arg_type, merge_result_type):
    """`original_arg_type`'s first element is federated and sums with `merge_result_type`."""

    @tff.tensorflow.computation(original_arg_type[0].member, merge_result_type)
    def add(x, y):
        return x + y

    @federated_language.federated_computation(
        original_arg_type,
        federated_language.FederatedType(merge_result_type, federated_language.SERVER),
    )
    def after_merge(original_arg, merge_result):
        return federated_language.federated_map(add, (original_arg[0], merge_result))

    return after_merge


def _sum_client_arg_computation():
    return build_sum_client_arg_computation(
        federated_language.FederatedType(np.int32, federated_language.SERVER),
        federated_language.FederatedType(np.int32, federated_language.CLIENTS),
    )


# ------------------------------------------------------ MergeableCompFormTest


def test_raises_mismatched_up_to_merge_and_merge():
    up_to_merge = _sum_client_arg_computation()
    bad_merge = build_whimsy_merge_computation(np.float32)

    @federated_language.federated_computation(
        up_to_merge.type_signature.parameter,
        federated_language.FederatedType(
            bad_merge.type_signature.result, federated_language.SERVER
        ),
    )
    def after_merge(x, y):
        return (x, y)

    with pytest.raises(TypeError):
        tff.framework.MergeableCompForm(
            up_to_merge=up_to_merge, merge=bad_merge, after_merge=after_merge
        )


def test_raises_merge_computation_not_assignable_result():
    up_to_merge = _sum_client_arg_computation()

    @federated_language.federated_computation(np.int32, np.int32)
    def bad_merge(x, y):
        del x, y  # Unused
        return 1.0  # a float

    @federated_language.federated_computation(
        up_to_merge.type_signature.parameter,
        federated_language.FederatedType(
            bad_merge.type_signature.result, federated_language.SERVER
        ),
    )
    def after_merge(x, y):
        return (x, y)

    with pytest.raises(TypeError):
        tff.framework.MergeableCompForm(
            up_to_merge=up_to_merge, merge=bad_merge, after_merge=after_merge
        )


def test_raises_no_top_level_argument_in_after_agg():
    up_to_merge = _sum_client_arg_computation()
    merge = build_whimsy_merge_computation(np.int32)

    @federated_language.federated_computation(
        federated_language.FederatedType(merge.type_signature.result, federated_language.SERVER)
    )
    def bad_after_merge(x):
        return x

    with pytest.raises(TypeError):
        tff.framework.MergeableCompForm(
            up_to_merge=up_to_merge, merge=merge, after_merge=bad_after_merge
        )


def test_raises_up_to_merge_returns_non_server_placed_result():
    @federated_language.federated_computation(
        federated_language.FederatedType(np.int32, federated_language.SERVER)
    )
    def bad_up_to_merge(x):
        return x, x  # not one server-placed value

    merge = build_whimsy_merge_computation(np.int32)
    after_merge = build_whimsy_after_merge_computation(
        bad_up_to_merge.type_signature.parameter, merge.type_signature.result
    )

    with pytest.raises(TypeError):
        tff.framework.MergeableCompForm(
            up_to_merge=bad_up_to_merge, merge=merge, after_merge=after_merge
        )


def test_raises_with_aggregation_in_after_agg():
    up_to_merge = _sum_client_arg_computation()
    merge = build_whimsy_merge_computation(np.int32)

    @federated_language.federated_computation(
        up_to_merge.type_signature.parameter,
        federated_language.FederatedType(merge.type_signature.result, federated_language.SERVER),
    )
    def after_merge_with_sum(original_arg, merged_arg):
        del merged_arg  # Unused
        # The second element of the original argument is the clients-placed value.
        return federated_language.federated_sum(original_arg[1])

    with pytest.raises(ValueError):
        tff.framework.MergeableCompForm(
            up_to_merge=up_to_merge, merge=merge, after_merge=after_merge_with_sum
        )


def test_passes_with_correct_signatures():
    up_to_merge = _sum_client_arg_computation()
    merge = build_whimsy_merge_computation(np.int32)
    after_merge = build_whimsy_after_merge_computation(
        up_to_merge.type_signature.parameter, merge.type_signature.result
    )
    form = tff.framework.MergeableCompForm(
        up_to_merge=up_to_merge, merge=merge, after_merge=after_merge
    )
    assert isinstance(form, tff.framework.MergeableCompForm)


def test_passes_with_noarg_top_level_computation():
    up_to_merge = build_noarg_count_clients_computation()
    merge = build_whimsy_merge_computation(np.int32)
    after_merge = build_whimsy_after_merge_computation(
        up_to_merge.type_signature.parameter, merge.type_signature.result
    )
    form = tff.framework.MergeableCompForm(
        up_to_merge=up_to_merge, merge=merge, after_merge=after_merge
    )
    assert isinstance(form, tff.framework.MergeableCompForm)


# ------------------------------------------- MergeableCompExecutionContextTest


def _slow_if(slow: bool, *values: Any, id: str) -> Any:  # noqa: A002 (pytest's word)
    return pytest.param(*values, id=id, marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize(
    'arg, num_subrounds, num_contexts',
    [
        _slow_if(
            True, (0, list(range(100))), None, 5, id='100_clients_five_contexts_inferred_subrounds'
        ),
        _slow_if(
            True,
            (0, list(range(100))),
            None,
            60,
            id='100_clients_sixty_contexts_inferred_subrounds',
        ),
        _slow_if(
            True,
            (0, list(range(100))),
            _NUM_EXPLICIT_SUBROUNDS,
            5,
            id='100_clients_five_contexts_fifty_subrounds',
        ),
        _slow_if(
            True,
            (0, list(range(100))),
            _NUM_EXPLICIT_SUBROUNDS,
            60,
            id='100_clients_sixty_contexts_fifty_subrounds',
        ),
        _slow_if(
            False,
            (0, [0]),
            None,
            _NUM_EXPLICIT_SUBROUNDS // 2,
            id='fewer_clients_and_contexts_than_inferred_subrounds',
        ),
        _slow_if(
            False,
            (0, [0]),
            None,
            _NUM_EXPLICIT_SUBROUNDS * 2,
            id='fewer_clients_more_contexts_than_inferred_subrounds',
        ),
        _slow_if(
            False,
            (0, [0]),
            _NUM_EXPLICIT_SUBROUNDS,
            _NUM_EXPLICIT_SUBROUNDS // 2,
            id='fewer_clients_and_contexts_than_explicit_subrounds',
        ),
        _slow_if(
            False,
            (0, [0]),
            _NUM_EXPLICIT_SUBROUNDS,
            _NUM_EXPLICIT_SUBROUNDS * 2,
            id='fewer_clients_more_contexts_than_explicit_subrounds',
        ),
    ],
)
def test_runs_computation_with_clients_placed_return_values(made, arg, num_subrounds, num_contexts):
    up_to_merge = _sum_client_arg_computation()
    merge = build_whimsy_merge_computation(np.int32)
    after_merge = build_whimsy_after_merge_computation(
        up_to_merge.type_signature.parameter, merge.type_signature.result
    )
    # Returns its argument.
    form = tff.framework.MergeableCompForm(
        up_to_merge=up_to_merge, merge=merge, after_merge=after_merge
    )
    context = made(
        tff.framework.MergeableCompExecutionContext(
            made.async_contexts(num_contexts), num_subrounds=num_subrounds
        )
    )
    # A Struct, as TFF's: type_to_py_container returns a non-Struct argument as it is.
    arg = tff.structure.Struct.unnamed(*arg)
    expected = federated_language.framework.type_to_py_container(
        arg, after_merge.type_signature.result
    )
    result = context.invoke(form, arg)

    assert result['server_arg'] == expected['server_arg']
    # As TFF: the clients' values compared as multisets, not depending on their order.
    assert set(result['client_arg']) == set(expected['client_arg'])
    assert collections.Counter(result['client_arg']) == collections.Counter(expected['client_arg'])


@pytest.mark.parametrize(
    'arg, expected_sum, num_subrounds',
    [
        _slow_if(
            True, (0, list(range(500))), sum(range(500)), None, id='500_clients_inferred_subrounds'
        ),
        _slow_if(
            True,
            (1, list(range(500))),
            sum(range(500)),
            None,
            id='500_clients_nonzero_server_values_inferred_subrounds',
        ),
        _slow_if(False, (0, [1]), 1, None, id='fewer_clients_than__inferred_subrounds'),
        _slow_if(
            True,
            (0, list(range(500))),
            sum(range(500)),
            _NUM_EXPLICIT_SUBROUNDS,
            id='500_clients_explicit_subrounds',
        ),
        _slow_if(
            True,
            (1, list(range(500))),
            sum(range(500)),
            _NUM_EXPLICIT_SUBROUNDS,
            id='500_clients_nonzero_server_values_explicit_subrounds',
        ),
        _slow_if(
            False, (0, [1]), 1, _NUM_EXPLICIT_SUBROUNDS, id='fewer_clients_than_explicit_subrounds'
        ),
    ],
)
def test_computes_sum_of_clients_values(made, arg, expected_sum, num_subrounds):
    up_to_merge = _sum_client_arg_computation()
    merge = build_sum_merge_computation(np.int32)
    after_merge = build_return_merge_result_computation(
        up_to_merge.type_signature.parameter, merge.type_signature.result
    )
    form = tff.framework.MergeableCompForm(
        up_to_merge=up_to_merge, merge=merge, after_merge=after_merge
    )
    context = made(
        tff.framework.MergeableCompExecutionContext(
            made.async_contexts(5), num_subrounds=num_subrounds
        )
    )
    expected = federated_language.framework.type_to_py_container(
        expected_sum, after_merge.type_signature.result
    )
    assert context.invoke(form, arg) == expected


@pytest.mark.parametrize(
    'arg, expected_sum, num_subrounds',
    [
        _slow_if(
            False,
            (100, list(range(100))),
            sum(range(101)),
            None,
            id='100_clients_inferred_subrounds',
        ),
        _slow_if(
            False,
            (100, list(range(100))),
            sum(range(101)),
            _NUM_EXPLICIT_SUBROUNDS,
            id='100_clients_explicit_subrounds',
        ),
        _slow_if(False, (1, [1]), 2, None, id='fewer_clients_than_inferred_subrounds'),
        _slow_if(
            False, (1, [1]), 2, _NUM_EXPLICIT_SUBROUNDS, id='fewer_clients_than_explicit_subrounds'
        ),
    ],
)
def test_computes_sum_of_all_values(made, arg, expected_sum, num_subrounds):
    up_to_merge = _sum_client_arg_computation()
    merge = build_sum_merge_computation(np.int32)
    after_merge = build_sum_merge_with_first_arg_computation(
        up_to_merge.type_signature.parameter, merge.type_signature.result
    )
    form = tff.framework.MergeableCompForm(
        up_to_merge=up_to_merge, merge=merge, after_merge=after_merge
    )
    context = made(
        tff.framework.MergeableCompExecutionContext(
            made.async_contexts(1), num_subrounds=num_subrounds
        )
    )
    expected = federated_language.framework.type_to_py_container(
        expected_sum, after_merge.type_signature.result
    )
    assert context.invoke(form, arg) == expected


@pytest.mark.parametrize(
    'num_subrounds',
    [
        _slow_if(True, None, id='inferred_subrounds'),
        _slow_if(True, _NUM_EXPLICIT_SUBROUNDS, id='explicit_subrounds'),
    ],
)
def test_counts_clients_with_noarg_computation(made, num_subrounds):
    num_clients = 100
    num_executors = 5
    up_to_merge = build_noarg_count_clients_computation()
    merge = build_sum_merge_computation(np.int32)
    after_merge = build_return_merge_result_with_no_first_arg_computation(
        merge.type_signature.result
    )
    form = tff.framework.MergeableCompForm(
        up_to_merge=up_to_merge, merge=merge, after_merge=after_merge
    )
    context = made(
        tff.framework.MergeableCompExecutionContext(
            made.async_contexts(num_executors, default_num_clients=num_clients // num_executors),
            num_subrounds=num_subrounds,
        )
    )
    # No argument: one subround per context, each on its default clients.
    assert context.invoke(form, None) == num_clients


def _return_one():
    @federated_language.federated_computation()
    def return_one():
        return 1

    return return_one


def test_invoke_raises_computation_no_compiler(made):
    factory = made(tff.framework.local_cpp_executor_factory())
    async_context = made(
        federated_language.framework.AsyncExecutionContext(
            executor_fn=factory,
            transform_args=tff.tensorflow.transform_args,
            transform_result=tff.tensorflow.transform_result,
        )
    )
    context = made(tff.framework.MergeableCompExecutionContext([async_context]))
    with pytest.raises(ValueError):
        context.invoke(_return_one())


def test_invoke_raises_computation_not_compiled_to_mergeable_comp_form(made):
    factory = made(tff.framework.local_cpp_executor_factory())
    async_context = made(
        federated_language.framework.AsyncExecutionContext(
            executor_fn=factory,
            transform_args=tff.tensorflow.transform_args,
            transform_result=tff.tensorflow.transform_result,
        )
    )
    context = made(
        tff.framework.MergeableCompExecutionContext([async_context], compiler_fn=lambda x: x)
    )
    with pytest.raises(ValueError):
        context.invoke(_return_one())
