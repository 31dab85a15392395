"""simharness' graphs run without TF's graph optimizer (`determinism.graph_call_options`)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.eager import context

import simharness as sh
from simharness.core import determinism
from simharness.errors import SimharnessValueError


def _rewrites_off(options) -> bool:
    config = tf.compat.v1.ConfigProto()
    config.ParseFromString(options.config_proto_serialized)
    return config.graph_options.rewrite_options.disable_meta_optimizer


def test_the_scope_sets_this_thread_only_and_restores_it():
    ctx = context.context()
    before = ctx.function_call_options
    seen = {}

    def other():
        seen['other'] = _rewrites_off(ctx.function_call_options)

    with determinism.graph_call_options():
        assert _rewrites_off(ctx.function_call_options)
        with determinism.graph_call_options():  # nested: still on, restored once
            assert _rewrites_off(ctx.function_call_options)
        assert _rewrites_off(ctx.function_call_options)
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert ctx.function_call_options is before and not _rewrites_off(before)
    assert seen['other'] is False  # another thread keeps TF's defaults


def test_function_calls_traced_into_a_computation_carry_the_options():
    @tf.function
    def inner(x):
        return x * 2.0

    @sh.tf_computation(sh.TensorType(np.float32, [3]))
    def comp(x):
        return inner(x) + 1.0

    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(comp.to_building_block().graph.graph_def)
    calls = [n for n in graph_def.node if n.op in ('PartitionedCall', 'StatefulPartitionedCall')]
    assert calls, [n.op for n in graph_def.node]
    for node in calls:
        config = tf.compat.v1.ConfigProto()
        config.ParseFromString(node.attr['config_proto'].s)
        assert config.graph_options.rewrite_options.disable_meta_optimizer, node
    np.testing.assert_array_equal(comp(np.arange(3, dtype=np.float32)), [1.0, 3.0, 5.0])


@pytest.mark.parametrize('value,expected', [('', False), ('0', False), ('off', False),
                                            ('1', True), ('true', True)])
def test_the_environment_switch(monkeypatch, value, expected):
    monkeypatch.setenv(determinism.GRAPH_REWRITES_ENV, value)
    assert determinism.graph_rewrites_enabled() is expected


def test_a_bad_switch_value_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(determinism.GRAPH_REWRITES_ENV, 'maybe')
    with pytest.raises(SimharnessValueError, match="SIMHARNESS_GRAPH_REWRITES='maybe'.*expected 1"):
        determinism.graph_rewrites_enabled()
