"""google-research/federated's programs, renamed ``import simharness as tff``.

Their tests are absltest cases (``self.create_tempdir()`` reads absl's ``--test_tmpdir``;
task_utils defines flags): under pytest absl's flags are never parsed from a command
line, so they are marked parsed here, with their defaults.
"""

import gc

import pytest
from absl import flags

if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()


@pytest.fixture(scope='module', autouse=True)
def _collect_unclosed_contexts():
    """Contexts the programs make and never close are closed when collected: collect
    them before the suite's thread-leak check."""
    yield
    gc.collect()
