"""Tutorial 4: benchmark your own simulation with the pytest plugin.

Installing simharness registers a pytest plugin: the fixture `simharness_stack`
runs a test once per stack named by `--simharness-stacks`, and
`simharness_benchmark` times rounds with pytest-benchmark, saving the stack's
configuration with them. This script writes the test file below into a
directory, runs pytest on it (on the thread stack and on 2 worker processes)
and prints the saved timings.
Run it: `python docs/tutorials/benchmark_plugin.py [DIR]` (17-27 s on a shared
2-core machine).
"""
import json
import pathlib
import subprocess
import sys
import tempfile

TEST_FILE = '''\
# test_my_round.py
import numpy as np
import tensorflow as tf
import simharness as sh

@sh.tf_computation(tf.float32)
def scale(x):
    return x * 2.0

@sh.federated_computation(sh.type_at_clients(tf.float32))
def my_round(xs):
    return sh.federated_mean(sh.federated_map(scale, xs))

def test_my_round(simharness_stack, simharness_benchmark):
    data = list(np.arange(1000, dtype=np.float32))
    result = simharness_benchmark.round(my_round, data)
    assert result == np.float32(999.0)
'''


def main(root: pathlib.Path) -> None:
    (root / 'test_my_round.py').write_text(TEST_FILE)
    # In a shell: pytest test_my_round.py --simharness-stacks=thread,process-2 \
    #                 --benchmark-json=bench.json
    subprocess.run([sys.executable, '-m', 'pytest', '-q',
                    '-p', 'no:cacheprovider', 'test_my_round.py',
                    '--simharness-stacks=thread,process-2',
                    '--benchmark-json=bench.json'],
                   cwd=root, check=True)
    saved = json.loads((root / 'bench.json').read_text())
    for bench in saved['benchmarks']:
        stats, stack = bench['stats'], bench['extra_info']['simharness_stack']
        print(f"{bench['name']}: median {stats['median'] * 1e3:.2f} ms over "
              f"{stats['rounds']} rounds; factory {stack['factory']}")


if __name__ == '__main__':
    if len(sys.argv) > 1:
        main(pathlib.Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(pathlib.Path(tmp))
