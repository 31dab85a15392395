"""TFF 0.88's ``examples/stateful_clients`` (FedAvg with per-client state), copied.

``stateful_fedavg_tf.py``, ``stateful_fedavg_tff.py``, ``emnist_fedavg_main.py`` and the
example's own test (``stateful_fedavg_test.py`` as ``test_stateful_fedavg.py``) are
TFF's files at v0.88.0 with ``import tensorflow_federated as tff`` renamed ``import
simharness as tff``. Changes, each marked ``# PATCHED`` on its line:

* ``from examplesstateful_clients ...`` (the example's Bazel package) is
  ``from tests.tff.examples.stateful_clients ...``.
* Keras 3 (which TFF 0.88 runs; the example was written for Keras 2): an optimizer's
  ``variables`` is a property, not a method; ``apply_gradients`` takes no ``name=``; a
  metric's ``reset_states()`` is ``reset_state()``. These fail in TFF 0.88 too.
"""
