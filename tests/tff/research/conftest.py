"""google-research/federated's programs, renamed ``import simharness as tff``.

Their tests are absltest cases (``self.create_tempdir()`` reads absl's ``--test_tmpdir``;
task_utils defines flags): under pytest absl's flags are never parsed from a command
line, so they are marked parsed here, with their defaults.
"""

import gc

import pytest
import tensorflow as tf
from absl import flags

if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()


@pytest.fixture(scope='module', autouse=True)
def _collect_unclosed_contexts():
    """Contexts the programs make and never close are closed when collected: collect
    them before the suite's thread-leak check."""
    yield
    gc.collect()


@pytest.fixture(autouse=True)
def _functions_run_as_graphs_after_each_test():
    """utils' tensor_utils test switches `tf.function`s to eager for the whole process
    (`tf.config.experimental_run_functions_eagerly(True)`, never undone: under absltest each
    file has its own process); what a test set is restored here, so that computations traced
    by later tests in this process are graphs again."""
    before = tf.config.functions_run_eagerly()
    yield
    tf.config.run_functions_eagerly(before)


@pytest.fixture(autouse=True)
def _a_test_tmpdir_of_its_own(monkeypatch, tmp_path):
    """absltest's default test tmpdir is one folder for every process of the run (under
    bazel each test had its own): large_cohort's file_utils and utils' utils_impl tests
    both write and read back ``foo.csv`` there, so two pytest-xdist workers running them
    at once read each other's half-written file. Each test gets its own folder."""
    from absl.testing import absltest

    monkeypatch.setattr(absltest, 'get_default_test_tmpdir', lambda: str(tmp_path))
