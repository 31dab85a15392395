"""TFF's example programs (``examples/`` of TFF 0.88), renamed ``import simharness as tff``.

Their own tests are absltest cases (``self.create_tempdir()`` reads absl's
``--test_tmpdir`` flag); under pytest absl's flags are never parsed from a command
line, so they are marked parsed here, with their defaults.
"""

import gc

import pytest
from absl import flags

if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()


@pytest.fixture(scope='module', autouse=True)
def _collect_unclosed_contexts():
    """The examples make contexts and never close them (TFF's do not either): a context is
    closed when it is collected, so collect before the suite's thread-leak check."""
    yield
    gc.collect()
