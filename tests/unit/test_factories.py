"""Unit tests of the thread-stack factories in simharness.stacks (no processes)."""

from __future__ import annotations

import asyncio
import threading

import pytest
import tensorflow as tf

import simharness as sh
from simharness.errors import (
    CardinalityError,
    ExecutorClosedError,
    SimharnessTypeError,
    SimharnessValueError,
)
from simharness.stacks import (
    CachingExecutorFactory,
    local_executor_factory,
    split_blocks,
    thread_debugging_executor_factory,
)


def run(coro):
    return asyncio.run(coro)


def client_group_sizes(stack):
    return list(stack.target.strategy.groups.sizes)  # ReferenceResolving -> Federating -> strategy


def is_closed(stack):
    try:
        run(stack.create_value(1.0, tf.float32))
    except ExecutorClosedError:
        return True
    return False


def simharness_threads():
    return [t for t in threading.enumerate() if t.name.startswith('simharness-') and t.is_alive()]


def test_split_blocks():
    assert split_blocks(0, 3) == []
    assert split_blocks(7, 3) == [3, 3, 1]
    assert split_blocks(6, 3) == [3, 3]
    assert split_blocks(2, 5) == [2]


def test_thread_debugging_layout():
    with thread_debugging_executor_factory(clients_per_thread=2) as factory:
        stack = factory.create_executor({sh.CLIENTS: 5})
        assert client_group_sizes(stack) == [2, 2, 1]
        names = {t.name for t in simharness_threads()}
        assert {
            'simharness-server',
            'simharness-unplaced',
            'simharness-clients-0',
            'simharness-clients-1',
            'simharness-clients-2',
        } <= names


def test_local_factory_bounds_the_fanout():
    with local_executor_factory(max_fanout=2) as factory:
        assert client_group_sizes(factory.create_executor({sh.CLIENTS: 10})) == [5, 5]
        assert client_group_sizes(factory.create_executor({sh.CLIENTS: 3})) == [2, 1]
        assert client_group_sizes(factory.create_executor({sh.CLIENTS: 0})) == []
    with local_executor_factory(clients_per_thread=4, max_fanout=32) as factory:
        assert client_group_sizes(factory.create_executor({sh.CLIENTS: 9})) == [4, 4, 1]


def test_one_stack_per_cardinality_is_reused():
    with local_executor_factory() as factory:
        a = factory.create_executor({sh.CLIENTS: 3})
        assert factory.create_executor({sh.CLIENTS: 3}) is a
        assert factory.create_executor({sh.CLIENTS: 4}) is not a
        assert factory.cached_cardinalities == [3, 4]


def test_bounded_cache_closes_the_least_recently_used_stack():
    factory = local_executor_factory(max_cached_stacks=2)
    s1 = factory.create_executor({sh.CLIENTS: 1})
    s2 = factory.create_executor({sh.CLIENTS: 2})
    s3 = factory.create_executor({sh.CLIENTS: 3})
    assert factory.cached_cardinalities == [2, 3]
    assert is_closed(s1) and not is_closed(s2) and not is_closed(s3)
    assert factory.create_executor({sh.CLIENTS: 2}) is s2  # now the most recent
    factory.create_executor({sh.CLIENTS: 4})
    assert factory.cached_cardinalities == [2, 4]
    assert is_closed(s3) and not is_closed(s2)
    s1_again = factory.create_executor({sh.CLIENTS: 1})
    assert s1_again is not s1 and not is_closed(s1_again)
    factory.clean_up_executors()


def test_default_max_cached_stacks_for_the_debugging_factory():
    factory = thread_debugging_executor_factory()
    stacks = [factory.create_executor({sh.CLIENTS: n}) for n in range(1, 7)]
    assert factory.cached_cardinalities == [3, 4, 5, 6]
    assert [is_closed(s) for s in stacks] == [True, True, False, False, False, False]
    factory.clean_up_executors()


def test_clean_up_executors_closes_all_and_their_threads():
    before = {t.ident for t in simharness_threads()}
    factory = local_executor_factory()
    stacks = [factory.create_executor({sh.CLIENTS: n}) for n in (1, 2, 3)]
    assert len([t for t in simharness_threads() if t.ident not in before]) == 3 * 2 + 6
    factory.clean_up_executors()
    assert factory.cached_cardinalities == []
    assert all(is_closed(s) for s in stacks)
    assert [t for t in simharness_threads() if t.ident not in before] == []
    factory.clean_up_executors()  # idempotent
    again = factory.create_executor({sh.CLIENTS: 1})  # still usable
    assert not is_closed(again)
    factory.close()
    assert is_closed(again)


def test_fixed_number_of_clients():
    with thread_debugging_executor_factory(num_clients=3) as factory:
        assert factory.default_num_clients == 3
        stack = factory.create_executor({})
        assert client_group_sizes(stack) == [1, 1, 1]
        assert factory.create_executor({sh.CLIENTS: 3}) is stack
        with pytest.raises(CardinalityError, match=r'values for 2 clients.*num_clients=3') as e:
            factory.create_executor({sh.CLIENTS: 2})
        assert (e.value.expected, e.value.actual) == (3, 2)


def test_unknown_number_of_clients_defaults_to_one():
    with local_executor_factory() as factory:
        assert factory.default_num_clients is None
        assert client_group_sizes(factory.create_executor({})) == [1]


@pytest.mark.parametrize(
    'make, message',
    [
        (
            lambda: thread_debugging_executor_factory(clients_per_thread=0),
            r'clients_per_thread .* got 0',
        ),
        (
            lambda: local_executor_factory(clients_per_thread=True),
            r'clients_per_thread .* got True',
        ),
        (lambda: local_executor_factory(max_fanout=-1), r'max_fanout .* got -1'),
        (lambda: local_executor_factory(max_cached_stacks=0), r'max_cached_stacks .* got 0'),
        (lambda: local_executor_factory(num_clients=-1), r'num_clients .* got -1'),
        (
            lambda: CachingExecutorFactory(lambda n: None, num_clients=1.5),
            r'num_clients .* got 1.5',
        ),
    ],
)
def test_bad_arguments(make, message):
    # A wrong type (True, 1.5) is a TypeError, a bad value a ValueError: both name the argument.
    with pytest.raises((SimharnessValueError, SimharnessTypeError), match=message):
        make()
