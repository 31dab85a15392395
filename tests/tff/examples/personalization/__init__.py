"""TFF 0.88's ``examples/personalization``: its library module and its test, copied.

``p13n_utils.py`` and the example's own test (``p13n_utils_test.py`` as
``test_p13n_utils.py``) are TFF's files at v0.88.0 with ``import tensorflow_federated as
tff`` renamed ``import simharness as tff``; one change, marked ``# PATCHED``: ``from
examplespersonalization import ...`` (the example's Bazel package) is ``from
tests.tff.examples.personalization import ...``. ``emnist_p13n_main.py`` is not here:
it fixes EMNIST's scale in its code (2500 training clients, 50 personalization
clients of a 62-class CNN), too large for the suite (it runs on synthetic EMNIST as a
script, see docs/tff/tutorials.md).
"""
