"""The seed APIs of issue 13 that are not about gRPC (each checked against TFF's contract)."""

from __future__ import annotations

import pytest
import tensorflow as tf

import simharness as sh
from simharness.executors.leaf.eager_tf import EagerTFExecutor
from simharness.stacks import thread_debugging_executor_factory


@pytest.mark.parametrize('n', [0, -1])
def test_thread_debugging_factory_refuses_fewer_than_one_client(n):
    with pytest.raises(ValueError, match=rf'num_clients must be .*>= 1.*got {n}'):
        thread_debugging_executor_factory(num_clients=n)


def test_thread_debugging_factory_accepts_one_client_and_none():
    for n in (None, 1):
        thread_debugging_executor_factory(num_clients=n).clean_up_executors()


def test_eager_executor_takes_a_logical_device():
    cpu = tf.config.list_logical_devices('CPU')[0]
    ex = EagerTFExecutor(device=cpu)
    try:
        v = sh.framework.EagerTFExecutor  # the public name is the same class
        assert v is EagerTFExecutor
    finally:
        ex.close()


def test_eager_executor_device_errors():
    with pytest.raises(TypeError, match='device must be'):
        EagerTFExecutor(device=0)
    with pytest.raises(ValueError, match='not on this machine'):
        EagerTFExecutor(device='/GPU:7')
    with pytest.raises(ValueError, match='not on this machine'):
        EagerTFExecutor(
            device=tf.config.LogicalDevice('/job:localhost/replica:0/task:0/device:GPU:9', 'GPU')
        )


def test_eager_executor_needs_eager_mode():
    with tf.Graph().as_default():
        with pytest.raises(RuntimeError, match='eager'):
            EagerTFExecutor()
