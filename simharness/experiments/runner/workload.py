"""What a run trains: the data of ``[data]`` (`_build_workload`; data-layer errors become
ConfigErrors), the cohorts (`_cohort`), the model of ``[model]`` with its central evaluation
(`_build_model`) and the config's ``tff.learning`` process composed with the data
(`_build_process`: ``next(state, client_ids)``)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Callable, List, Sequence, Tuple

import numpy as np

from simharness.errors import ConfigError, SimharnessTypeError, SimharnessValueError
from simharness.experiments.config import ExperimentConfig, KerasModel


@dataclasses.dataclass
class _Workload:
    client_data: Any
    x_key: str
    y_key: str
    eval_x: Any
    eval_y: Any
    eval_on: str
    input_shape: Tuple[int, ...]
    num_classes: int
    label_shape: Tuple[int, ...] = ()
    x_dtype: Any = np.float32


def _stack_clients(cd: Any, key: str) -> Any:
    return np.concatenate([cd.client_arrays(c)[key] for c in cd.client_ids])


#: All clients' examples up to this size are held by the driver for the central evaluation;
#: beyond it they are read from the clients a batch at a time, at each evaluation.
EVAL_IN_MEMORY_BYTES = 256 << 20


def _eval_rows(rows: Any) -> Any:
    """The examples of a central evaluation on all clients: held if small, else read lazily."""
    if math.prod(rows.shape) * rows.dtype.itemsize <= EVAL_IN_MEMORY_BYTES:
        return np.asarray(rows)
    return rows


def _build_workload(config: ExperimentConfig) -> _Workload:
    """Loads the data of `config`; data-layer errors become ConfigErrors."""
    from simharness import data as D  # pylint: disable=import-outside-toplevel
    from simharness.learning import reference_fedavg_workload  # pylint: disable=import-outside-toplevel

    # The variant class of data.dataset (config.FilesData, ...): exactly its options.
    d: Any = config.data
    x_key, y_key = 'x', 'y'
    test = None
    cd: Any
    try:
        if d.dataset == 'synthetic':
            cd = D.synthetic_alpha_beta(
                alpha=d.alpha,
                beta=d.beta,
                num_clients=d.num_clients,
                samples_per_client=d.samples_per_client,
                dim=d.dim,
                num_classes=d.num_classes,
                seed=d.seed,
                iid=d.iid,
            )
        elif d.dataset == 'reference':
            cd, _ = reference_fedavg_workload()
        elif d.dataset in ('emnist', 'cifar100', 'shakespeare', 'stackoverflow'):
            cd, test = _load_benchmark(d)
        elif d.dataset == 'hf':
            from simharness.data.benchmarks import load_hf_dataset

            x_key, y_key = 'x', 'y'
            cd = load_hf_dataset(
                d.path,
                d.x_key,
                d.y_key,
                split=d.hf_split,
                partition=d.partition,
                client_id_column=d.client_id_key,
                num_clients=d.num_clients,
                alpha=d.dirichlet_alpha,
                seed=d.seed,
                min_size=d.min_size,
                cache_dir=d.cache_dir,
            )
        elif d.dataset == 'digits':
            cd, test = D.load_digits_federated(
                num_clients=d.num_clients,
                partition=d.partition,
                alpha=d.dirichlet_alpha,
                test_fraction=d.test_fraction,
                seed=d.seed,
                min_size=d.min_size,
                as_images=config.model.name == 'cnn',
            )
            if len(test[1]) == 0:
                test = None
        else:
            x_key, y_key = d.x_key, d.y_key
            path = Path(d.path)
            if path.is_dir():
                cd = D.FileClientData.from_npz_dir(path, x_key=x_key, y_key=y_key)
            else:
                cd = D.FileClientData.from_single_file(
                    path, client_id_key=d.client_id_key, x_key=x_key, y_key=y_key
                )
    except (SimharnessValueError, SimharnessTypeError) as e:
        raise ConfigError(f'[data] {d.dataset}: {e}', key='data', value=d.dataset) from e
    spec = cd.array_spec
    sequence = d.dataset in ('shakespeare', 'stackoverflow')
    if not np.issubdtype(spec[y_key][0], np.integer) or (spec[y_key][1] != () and not sequence):
        raise ConfigError(
            f'[data]: labels {y_key!r} must be integer class ids of shape [n], got '
            f'{spec[y_key][0]} {list(spec[y_key][1])}',
            key='data.y_key',
            value=y_key,
        )
    if test is not None:
        eval_x, eval_y, eval_on = test[0], test[1], 'test set'
    else:
        eval_x, eval_y, eval_on = (
            _eval_rows(D.StackedRows(cd, x_key)),
            _stack_clients(cd, y_key),
            'all clients',
        )
    num_classes = _BENCHMARK_CLASSES.get(d.dataset, getattr(d, 'num_classes', None))
    if d.dataset == 'emnist' and d.only_digits:
        num_classes = 10
    if d.dataset == 'stackoverflow':
        num_classes = d.vocab_size + 4
    if num_classes is None:
        num_classes = max(2, int(np.max(eval_y if test is None else _stack_clients(cd, y_key))) + 1)
    x_dtype = np.int32 if np.issubdtype(spec[x_key][0], np.integer) else np.float32
    return _Workload(
        cd,
        x_key,
        y_key,
        eval_x,
        eval_y,
        eval_on,
        tuple(spec[x_key][1]),
        int(num_classes),
        tuple(spec[y_key][1]),
        x_dtype,
    )


#: Classes of the benchmark data sets (shakespeare: 86 characters + pad, oov, bos, eos).
_BENCHMARK_CLASSES = {'emnist': 62, 'cifar100': 100, 'shakespeare': 90}


def _load_benchmark(d: Any) -> Tuple[Any, Any]:
    """(train clients, (test x, test y)) of a TFF benchmark from d.cache_dir."""
    from simharness.data import benchmarks as B  # pylint: disable=import-outside-toplevel
    from simharness.data.client_data import ArrayClientData  # pylint: disable=import-outside-toplevel

    loaders = {
        'emnist': lambda split: B.load_emnist(d.cache_dir, d.only_digits, split),
        'cifar100': lambda split: B.load_cifar100(d.cache_dir, split),
        'shakespeare': lambda split: B.load_shakespeare(d.cache_dir, split, d.sequence_length),
        'stackoverflow': lambda split: B.load_stackoverflow(
            d.cache_dir, split, d.vocab_size, d.sequence_length, d.max_clients
        ),
    }
    train = loaders[d.dataset]('train')
    ids = train.client_ids[: d.max_clients] if d.max_clients else train.client_ids
    if len(ids) < len(train.client_ids):
        train = ArrayClientData({c: train.client_arrays(c) for c in ids})
    if d.dataset == 'stackoverflow':  # its vocabulary comes from the train clients
        return train, None
    test = loaders[d.dataset]('test')
    keep = [c for c in test.client_ids if c in set(ids)] or test.client_ids
    return train, (
        np.concatenate([test.client_arrays(c)['x'] for c in keep]),
        np.concatenate([test.client_arrays(c)['y'] for c in keep]),
    )


def _cohort(config: ExperimentConfig, ids: Sequence[str], round_num: int) -> List[str]:
    from simharness.data import sample_clients  # pylint: disable=import-outside-toplevel

    k, n = config.training.clients_per_round, len(ids)
    if k > n:
        raise ConfigError(
            f'training.clients_per_round = {k} is more than the {n} clients of the data',
            key='training.clients_per_round',
            value=k,
        )
    if config.training.cohort == 'reference':
        return [ids[(round_num * k + i) % n] for i in range(k)]
    return sample_clients(ids, k, round_num, config.training.seed)


@dataclasses.dataclass
class _Model:
    """The model of a run: the `FunctionalModel` and its central evaluator (of a weights list,
    trainable then non-trainable)."""

    functional: Any
    evaluate: Callable[[Sequence[Any]], Tuple[float, float]]


def _build_model(config: ExperimentConfig, work: _Workload) -> _Model:
    # pylint: disable=import-outside-toplevel
    from simharness.experiments import processes as P
    from simharness.learning.models import get_model, numpy_evaluate

    if isinstance(config.model, KerasModel):
        from simharness.core.determinism import pin_tensorflow_threads

        pin_tensorflow_threads()  # before Keras runs its first op: same bits as the workers
        builder = str(config.model.keras)  # required: the config checked it
        fn = P.keras_builder(builder)
        try:
            fm = P.model_from_keras_builder(
                fn,
                work.input_shape,
                work.num_classes,
                config.init_seed,
                y_shape=work.label_shape,
                x_dtype=work.x_dtype,
                ignore_label=0 if work.label_shape else None,
            )
        except (SimharnessValueError, SimharnessTypeError) as e:
            raise ConfigError(
                f'[model] keras {builder}: {e}', key='model.keras', value=builder
            ) from e
        _check_model_fits(fm, work, builder)
        nt = len(fm.initial_weights[0])

        def evaluate(weights: Sequence[Any]) -> Tuple[float, float]:
            out = P.central_evaluation(fm, (weights[:nt], weights[nt:]), work.eval_x, work.eval_y)
            return out['loss'], out.get('accuracy', float('nan'))

        return _Model(fm, evaluate)
    try:
        spec = get_model(
            config.model.name, work.input_shape, work.num_classes, **config.model.options()
        )
    except (SimharnessValueError, SimharnessTypeError) as e:  # ConfigError included
        raise ConfigError(
            f'[model] {config.model.name}: {e}', key='model', value=config.model.name
        ) from e
    return _Model(
        P.model_from_spec(spec, config.init_seed),
        lambda w: numpy_evaluate(spec, w, work.eval_x, work.eval_y),
    )


def _sample_inputs(work: _Workload, n: int = 2) -> Any:
    cd = work.client_data
    for c in cd.client_ids:
        x = np.asarray(cd.client_arrays(c)[work.x_key][:n])
        if len(x):
            return x.astype(work.x_dtype, copy=False)
    return np.zeros((1,) + tuple(work.input_shape), work.x_dtype)


def _check_model_fits(fm: Any, work: _Workload, builder: str) -> None:
    """The model run on two examples of the data before the first round: a model whose
    input does not take the data's examples, or whose outputs are not one per class, is a
    ConfigError naming both (one line; no TensorFlow traceback)."""
    x = _sample_inputs(work)
    data = (
        f"the data's examples have shape {list(x.shape[1:])} "
        f'({np.dtype(work.x_dtype).name}) and {work.num_classes} classes'
    )
    try:
        out = fm.predict_on_batch(fm.initial_weights, x, training=False)
    except Exception as e:  # pylint: disable=broad-exception-caught  # TF / Keras shape errors
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        raise ConfigError(
            f"[model] keras {builder}: the model does not take the data's "
            f'examples: {data}; the model says: {first[:300]}',
            key='model.keras',
            value=builder,
        ) from None
    if isinstance(out, (list, tuple, dict)):
        return  # several outputs: the builder's own loss knows them
    shape = tuple(getattr(out, 'shape', ()))
    want = (len(x),) + tuple(work.label_shape) + (work.num_classes,)
    binary = shape[-1:] == (1,) and work.num_classes == 2  # one sigmoid output
    if len(shape) == len(want) and shape[-1] != work.num_classes and not binary:
        raise ConfigError(
            f'[model] keras {builder}: the model has {shape[-1]} output(s) per '
            f'example; {data} (one output per class: '
            f'num_classes = {work.num_classes})',
            key='model.keras',
            value=builder,
        )


def _build_process(
    config: ExperimentConfig, model: Any, work: _Workload, evaluation: bool = False
) -> Tuple[Any, Callable[[Sequence[str]], Any]]:
    """The config's tff.learning process (or, with `evaluation`, its ``build_fed_eval``
    process) and what its ``next`` takes for a round's client ids: in-memory data as the
    clients' batches (`processes.client_batches`), other data by id (the process composed
    with the data's dataset computation: ``next(state, client_ids)``)."""
    # pylint: disable=import-outside-toplevel
    from simharness.experiments import processes as P
    from simharness.learning import algorithms

    a = config.algorithm
    if evaluation:
        process, epochs = algorithms.build_fed_eval(model), 1
    else:
        try:
            process = P.build_learning_process(config, model)
        except (SimharnessValueError, SimharnessTypeError, ValueError) as e:
            # e.g. a DP noise_multiplier >= 2 * clipped_count_stddev (TFF's limit)
            raise ConfigError(
                f'[algorithm] / [aggregator]: {e}',
                key='aggregator',
                value=config.aggregator.noise_multiplier,
            ) from e
        epochs = 1 if a.name == 'fedsgd' else a.local_epochs  # one gradient per client
    feed = P.client_batches(
        work.client_data, a.batch_size, epochs, work.x_key, work.y_key, work.x_dtype
    )
    if feed is not None:
        return process, feed
    return P.compose_with_client_data(
        process, work.client_data, a.batch_size, epochs, work.x_key, work.y_key, work.x_dtype
    ), list
