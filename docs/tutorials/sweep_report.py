"""Tutorial 3: a sweep and its report, with the CLI.

A grid of 2 client learning rates x 2 seeds of FedAvg on scikit-learn's digits
(5 rounds each, the thread stack), then `simharness report` over the four runs:
`report.md`, `runs.csv`, `rounds.csv` and PNG plots, with mean ± std over the seeds.
Run it: `python docs/tutorials/sweep_report.py [RESULTS_DIR]` (results go to a
temporary directory unless one is given; seconds per run).
"""
import pathlib
import subprocess
import sys
import tempfile

CONFIG = """\
name = "tutorial-sweep"

[data]
dataset = "digits"
num_clients = 10
partition = "dirichlet"
dirichlet_alpha = 0.5
test_fraction = 0.2
seed = 0

[model]
name = "mlp"
hidden_sizes = [32]

[algorithm]
name = "fedavg"
client_learning_rate = 0.1
local_epochs = 1
batch_size = 20

[training]
rounds = 5
clients_per_round = 5
seed = 0
eval_every = 5

[stack]
kind = "thread"

[sweep.grid]
"algorithm.client_learning_rate" = [0.05, 0.2]
"training.seed" = [0, 1]
"""


def main(root: pathlib.Path) -> None:
    config = root / 'sweep.toml'
    config.write_text(CONFIG)
    results = root / 'results'
    # The same commands in a shell: simharness sweep sweep.toml --results results
    #                               simharness report results/tutorial-sweep
    subprocess.run(['simharness', 'sweep', str(config), '--results', str(results), '--no-progress'],
                   check=True)
    subprocess.run(['simharness', 'report', str(results / 'tutorial-sweep')], check=True)
    report = sorted((results / 'tutorial-sweep').rglob('report.md'))[-1]
    print(report.read_text())
    print('files:', sorted(p.name for p in report.parent.iterdir()))


if __name__ == '__main__':
    if len(sys.argv) > 1:
        main(pathlib.Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(pathlib.Path(tmp))
