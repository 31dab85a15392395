"""`tff.test` (TFF 0.88's ``tensorflow_federated/python/core/test/__init__.py``): its
context helpers and type assertions, as TFF's program example's test uses them.

Left out: the static assertions on secure aggregation (``assert_contains_secure_aggregation``
and the like), which no TFF 0.88 tutorial or example calls.
"""

import asyncio
import contextlib
import unittest

import numpy as np
import pytest
from absl.testing import parameterized

import simharness as tff


class _Context(tff.framework.SyncContext):
    def invoke(self, comp, arg):
        raise NotImplementedError


def test_the_names_of_tff_test():
    for name in (
        'with_context',
        'with_contexts',
        'create_runtime_error_context',
        'set_no_default_context',
        'assert_type_assignable_from',
        'assert_types_equivalent',
        'assert_types_identical',
    ):
        assert callable(getattr(tff.test, name)), name


def test_with_context_enters_the_environment_inside_the_installed_context():
    entered = []
    context = _Context()

    @contextlib.contextmanager
    def environment():
        entered.append(tff.framework.get_context_stack().current is context)
        yield
        entered.append('exited')

    @tff.test.with_context(lambda: context, lambda: [environment()])
    def sync_test():
        return tff.framework.get_context_stack().current

    @tff.test.with_context(lambda: context, lambda: [environment()])
    async def async_test():
        return tff.framework.get_context_stack().current

    assert sync_test() is context
    assert asyncio.run(async_test()) is context
    assert entered == [True, 'exited', True, 'exited']
    assert tff.framework.get_context_stack().current is not context


def test_with_contexts_runs_a_case_per_named_context():
    seen = []

    class _Case(parameterized.TestCase):
        @tff.test.with_contexts(('a', _Context), ('b', tff.test.create_runtime_error_context))
        def test_current(self):
            seen.append(type(tff.framework.get_context_stack().current).__name__)

    result = unittest.TextTestRunner(stream=open('/dev/null', 'w')).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(_Case)
    )
    assert result.wasSuccessful() and result.testsRun == 2
    assert sorted(seen) == ['RuntimeErrorContext', '_Context']
    with pytest.raises(ValueError):
        tff.test.with_contexts()


def test_the_type_assertions_raise_assertion_error():
    f32, i32 = tff.TensorType(np.float32), tff.TensorType(np.int32)
    tff.test.assert_types_identical(f32, tff.TensorType(np.float32))
    tff.test.assert_types_equivalent(f32, f32)
    tff.test.assert_type_assignable_from(
        tff.TensorType(np.float32, [None]), tff.TensorType(np.float32, [2])
    )
    for check in (
        tff.test.assert_types_identical,
        tff.test.assert_types_equivalent,
        tff.test.assert_type_assignable_from,
    ):
        with pytest.raises(AssertionError):
            check(f32, i32)
