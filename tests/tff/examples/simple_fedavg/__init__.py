"""TFF 0.88's ``examples/simple_fedavg`` (the FedAvg research starting point), copied.

``simple_fedavg_tf.py``, ``simple_fedavg_tff.py``, ``emnist_fedavg_main.py`` and the
example's own test (``simple_fedavg_test.py`` as ``test_simple_fedavg.py``) are TFF's
files at v0.88.0 with ``import tensorflow_federated as tff`` renamed ``import simharness
as tff``. Changes, each marked ``# PATCHED`` on its line:

* ``from examplessimple_fedavg ...`` (the example's Bazel package) is
  ``from tests.tff.examples.simple_fedavg ...``.
* The test's ``setUpModule`` splits the CPU into 8 logical devices, which TF refuses
  once initialized (Bazel runs each test file in a fresh process; pytest does not): the
  refusal is ignored (no test uses those devices).
* Keras 3 (which TFF 0.88 runs; the example was written for Keras 2): an optimizer's
  ``variables`` is a property, not a method; ``apply_gradients`` takes no ``name=``;
  there is no ``tf.keras.optimizers.legacy``; Keras 3's SGD holds its learning rate as
  a variable beside its iteration count, so the server state's optimizer state is
  ``<int64,float32>`` (the example's test expects Keras 2's ``<int64>``). These fail in
  TFF 0.88 too.
"""
