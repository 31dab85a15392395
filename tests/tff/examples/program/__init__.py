"""TFF 0.88's ``examples/program`` (the reference program for ``tff.program``), copied.

``computations.py``, ``program_logic.py``, ``program.py`` and the example's own test
(``program_logic_test.py`` as ``test_program_logic.py``) are TFF's files at v0.88.0 with
``import tensorflow_federated as tff`` renamed ``import simharness as tff`` and one
change, marked ``# PATCHED``: ``from examplesprogram import ...`` (the example's Bazel
package) is ``from tests.tff.examples.program import ...``. ``test_program.py`` runs
the program end to end.
"""
