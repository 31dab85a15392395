"""Tutorial 3: a sweep and its report, with the CLI.

A grid of 2 client learning rates x 2 seeds of FedAvg on scikit-learn's
digits (5 rounds each, the thread stack), then `simharness report` over the
four runs: `report.md`, `runs.csv`, `rounds.csv` and PNG plots, with
mean ± std over the seeds.
Run it: `python docs/tutorials/sweep_report.py [DIR]` (24-34 s on a shared
2-core machine). The config and the results go to DIR (default:
`sweep-tutorial` in the current directory) and stay there: the paths it
prints are yours to open. Run again, it skips the runs already complete.
"""
import pathlib
import subprocess
import shutil
import sys

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
    root.mkdir(parents=True, exist_ok=True)
    config = root / 'sweep.toml'
    config.write_text(CONFIG)
    results = root / 'results'
    # The CLI installed with this Python, also when its venv is not activated.
    cli = (shutil.which('simharness')
           or str(pathlib.Path(sys.executable).with_name('simharness')))
    # The same commands in a shell:
    #   simharness sweep sweep.toml --results results
    #   simharness report results/tutorial-sweep
    # The sweep prints where its results, report, plots and tables are.
    subprocess.run([cli, 'sweep', str(config), '--results', str(results),
                    '--no-progress'], check=True)
    # The sweep wrote the report already; `simharness report` rebuilds it from
    # any folder of runs (after adding runs, say). Its lines repeat the
    # sweep's paths, so they are not shown.
    subprocess.run([cli, 'report', str(results / 'tutorial-sweep')],
                   check=True, capture_output=True)
    report = results / 'tutorial-sweep' / 'report.md'
    print(report.read_text())


if __name__ == '__main__':
    main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else 'sweep-tutorial'))
