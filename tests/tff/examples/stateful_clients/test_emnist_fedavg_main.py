"""TFF 0.88's ``examples/stateful_clients/emnist_fedavg_main.py``, its ``main`` run as written.

In a child Python process: its absl flags (``total_rounds`` ...) are the same names as
simple_fedavg's ``emnist_fedavg_main``, which absl refuses to define twice in one
process. EMNIST (``tff.simulation.datasets.emnist.load_data``, a download) is replaced
by ``emnist_like`` clients of EMNIST's element structure
(tests/tff/tutorials/synthetic.py), and the flags set small (3 rounds, 2 of the first 3
clients a round, batches of 4). Checked: every round prints its loss, the clients'
states (their iteration counts) carry over from round to round, each sampled client's
count growing by its batches (2 a round), and the server's total is the sum over the
round's clients; the validation accuracy is printed every round.
"""

import collections
import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))))

_SCRIPT = '''
import sys
import numpy as np
from absl import app
import simharness as tff
from tests.tff.tutorials.synthetic import emnist_like
from tests.tff.examples.stateful_clients import emnist_fedavg_main

tff.simulation.datasets.emnist.load_data = lambda only_digits=True: (
    emnist_like(3, 8, seed=1), emnist_like(2, 8, seed=2))
np.random.seed(0)
sys.argv = ['emnist_fedavg_main', '--total_rounds=3', '--batch_size=4',
            '--client_learning_rate=0.05']
app.run(emnist_fedavg_main.main)
'''


def test_main_trains_with_stateful_clients():
    done = subprocess.run([sys.executable, '-c', _SCRIPT], cwd=ROOT, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert len(re.findall(r'^Round (\d) training loss: ', out, re.M)) == 3, out
    counts = collections.defaultdict(list)
    for round_num in range(3):
        seen = re.findall(rf'^Round {round_num} iterations on client (\S+): (\d+)$', out, re.M)
        assert len(seen) == 2, out
        for client, count in seen:
            counts[client].append((round_num, int(count)))
        total = int(re.search(rf'^Round {round_num} total iterations on sampled clients: '
                              r'(\d+)$', out, re.M).group(1))
        assert total == sum(int(count) for _, count in seen)
    for client, history in counts.items():
        # 8 examples in batches of 4: 2 iterations each time the client is sampled.
        assert [count for _, count in history] == [2 * (i + 1) for i in range(len(history))]
    assert len(re.findall(r'^Round \d validation accuracy: [\d.]+$', out, re.M)) == 3
