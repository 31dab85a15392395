"""Unit tests of simharness.experiments.config: parsing, validation, overrides, sweeps."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from simharness.errors import ConfigError
from simharness.experiments import config as C
from simharness.experiments.config import (
    DEFAULT_RUN_ID,
    apply_overrides,
    config_from_dict,
    expand_sweep,
    load_config,
    run_id_for,
    tomllib,
    valid_keys,
)

FULL = """
name = "full"

[data]
dataset = "digits"
num_clients = 10
partition = "iid"
test_fraction = 0.25
seed = 3

[model]
name = "cnn"
conv_filters = [4, 8]
kernel_size = 5

[algorithm]
name = "fedavg"
client_learning_rate = 0.1
local_epochs = 2
batch_size = 20
server_learning_rate = 1
server_momentum = 0.9

[training]
rounds = 7
clients_per_round = 5
seed = 11
eval_every = 3
cohort = "reference"

[stack]
kind = "process"
num_workers = 2
clients_per_worker = 64
cpu_affinity = false
devices = [0, "cuda:1"]
workers_per_gpu = 2

[sweep.grid]
"stack.num_workers" = [1, 2]
training.clients_per_round = [2, 5]
"""


def _write(tmp_path: Path, text: str, name: str = 'exp.toml') -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text), encoding='utf-8')
    return p


def _raises(raw, key: str, *fragments: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        config_from_dict(raw, default_name='t')
    assert info.value.key == key, str(info.value)
    for f in fragments:
        assert f in str(info.value), str(info.value)
    return info.value


# --------------------------------------------------------------------- parsing


def test_load_full_config(tmp_path):
    c = load_config(_write(tmp_path, FULL))
    assert c.name == 'full'
    assert c.data.dataset == 'digits' and c.data.num_clients == 10
    assert c.data.partition == 'iid' and c.data.test_fraction == 0.25 and c.data.seed == 3
    assert c.data.dirichlet_alpha == 0.5 and c.data.min_size == 5  # defaults filled
    assert type(c.data) is C.DigitsData and isinstance(c.data, C.DataConfig)
    assert not hasattr(c.data, 'alpha') and not hasattr(c.data, 'path')  # other datasets' options
    assert c.model.name == 'cnn' and c.model.conv_filters == (4, 8)
    assert c.model.kernel_size == 5 and c.model.pool_size == 2
    assert type(c.model) is C.CnnModel and not hasattr(c.model, 'hidden_sizes')
    assert c.algorithm.server_learning_rate == 1.0
    assert isinstance(c.algorithm.server_learning_rate, float)
    assert c.training == C.TrainingConfig(
        rounds=7, clients_per_round=5, seed=11, eval_every=3, cohort='reference'
    )
    assert c.stack.kind == 'process' and c.stack.num_workers == 2
    assert c.stack.devices == (0, 'cuda:1') and not hasattr(c.stack, 'clients_per_thread')
    assert c.sweep.grid == (('stack.num_workers', (1, 2)), ('training.clients_per_round', (2, 5)))
    assert c.init_seed == 11


def test_defaults_and_name_from_file_stem(tmp_path):
    c = load_config(_write(tmp_path, '', name='my-exp.toml'))
    assert c.name == 'my-exp'
    assert c.data == C.DataConfig(
        dataset='synthetic',
        num_clients=20,
        alpha=1.0,
        beta=1.0,
        samples_per_client=50,
        dim=60,
        num_classes=10,
        iid=False,
        seed=0,
    )
    assert c.model.hidden_sizes == (256, 256)
    assert c.stack == C.StackConfig(kind='thread', clients_per_thread=1)
    assert c.training.rounds == 10 and c.training.cohort == 'random'
    assert c.sweep.grid == ()


def test_reference_dataset_has_no_options_and_1000_clients():
    c = config_from_dict(
        {'data': {'dataset': 'reference'}, 'training': {'clients_per_round': 1000}}, 'r'
    )
    assert c.data.known_num_clients == 1000
    assert c.init_seed == 1
    _raises(
        {'data': {'dataset': 'reference'}, 'training': {'clients_per_round': 1001}},
        'training.clients_per_round',
        '1000',
    )
    _raises(
        {'data': {'dataset': 'reference', 'num_clients': 5}},
        'data.num_clients',
        "'reference'",
        'none',
    )


def test_files_path_is_relative_to_config_file(tmp_path):
    p = _write(tmp_path, '[data]\ndataset = "files"\npath = "clients"\n')
    c = load_config(p)
    assert c.data.path == str((tmp_path / 'clients').resolve())
    assert (c.data.x_key, c.data.y_key, c.data.client_id_key) == ('x', 'y', 'client_id')
    assert c.data.num_classes is None


def test_resolved_toml_round_trips(tmp_path):
    c = load_config(_write(tmp_path, FULL))
    text = c.to_toml()
    assert tomllib.loads(text) == c.to_dict()
    again = load_config(_write(tmp_path, text, name='again.toml'))
    assert again == c


def test_dumps_toml_quotes_and_escapes():
    doc = {
        'name': 'x',
        'data': {'path': 'a "b"\\c\n\u00e9'},
        'sweep': {'grid': {'training.seed': [0, 1], 'model.hidden_sizes': [[8], [8, 8]]}},
    }
    text = C.dumps_toml(doc)
    assert tomllib.loads(text) == doc
    # tomli-w writes an array one item per line: the dotted key is quoted, its list follows.
    assert '[sweep.grid]' in text and '"training.seed" = [' in text
    assert C.dumps_toml({'a': {'b': float('inf'), 'c': True}}) == '[a]\nb = inf\nc = true\n'


def test_grid_accepts_nested_tables_and_lists_of_lists(tmp_path):
    c = load_config(
        _write(
            tmp_path,
            """
        [sweep.grid]
        model.hidden_sizes = [[8], [16, 16]]
        training.seed = [0, 1]
        """,
        )
    )
    assert c.sweep.grid == (('model.hidden_sizes', ((8,), (16, 16))), ('training.seed', (0, 1)))


# ------------------------------------------------------------------ validation


def test_missing_file_and_invalid_toml(tmp_path):
    with pytest.raises(ConfigError, match='does not exist'):
        load_config(tmp_path / 'nope.toml')
    with pytest.raises(ConfigError, match='invalid TOML'):
        load_config(_write(tmp_path, 'name = \n'))


def test_errors_from_files_name_the_file(tmp_path):
    p = _write(tmp_path, '[training]\nrounds = 0\n')
    with pytest.raises(ConfigError) as info:
        load_config(p)
    assert str(p) in str(info.value) and info.value.key == 'training.rounds'


def test_unknown_top_level_key_lists_allowed():
    e = _raises({'trainig': {}}, 'trainig', "'data'", "'training'", "'sweep'")
    assert 'trainig' in str(e)


def test_unknown_key_in_table_lists_allowed():
    _raises(
        {'training': {'round': 3}}, 'training.round', 'rounds', 'clients_per_round', 'eval_every'
    )
    _raises({'stack': {'workers': 3}}, 'stack.workers', 'num_workers')
    _raises({'sweep': {'grids': {}}}, 'sweep.grids', 'grid')


@pytest.mark.parametrize('table', ['data', 'model', 'algorithm', 'training', 'stack', 'sweep'])
def test_table_must_be_a_table(table):
    _raises({table: 3}, table, 'must be a table')


@pytest.mark.parametrize(
    'key,value,fragment',
    [
        (
            'data.dataset',
            'mnist',
            "'cifar100', 'digits', 'emnist', 'files', 'hf', 'reference', "
            "'shakespeare', 'stackoverflow', 'synthetic'",
        ),
        ('model.name', 'resnet', "'cnn', 'keras', 'logreg', 'mlp'"),
        (
            'algorithm.name',
            'fedfoo',
            "'fedadagrad', 'fedadam', 'fedavg', 'fedavgm', 'fedprox', 'fedsgd', 'fedyogi'",
        ),
        ('training.cohort', 'all', "'random', 'reference', 'weighted', 'with_replacement'"),
        ('stack.kind', 'gpu', "'process', 'ray', 'thread'"),
    ],
)
def test_choices_list_allowed_values(key, value, fragment):
    table, field = key.split('.')
    _raises({table: {field: value}}, key, fragment, repr(value))


@pytest.mark.parametrize(
    'key,value',
    [
        ('data.num_clients', 0),
        ('data.num_clients', 2.5),
        ('data.num_clients', True),
        ('data.alpha', -1.0),
        ('data.alpha', 'x'),
        ('data.beta', float('nan')),
        ('data.samples_per_client', 0),
        ('data.dim', 0),
        ('data.num_classes', 1),
        ('data.iid', 1),
        ('data.seed', -1),
        ('training.rounds', 0),
        ('training.rounds', '3'),
        ('training.clients_per_round', 0),
        ('training.seed', -1),
        ('training.eval_every', -1),
        ('algorithm.client_learning_rate', 0),
        ('algorithm.client_learning_rate', False),
        ('algorithm.server_learning_rate', -0.5),
        ('algorithm.local_epochs', 0),
        ('algorithm.batch_size', 1.0),
        ('algorithm.server_momentum', 1.0),
        ('algorithm.server_momentum', -0.1),
        ('model.hidden_sizes', []),
        ('model.hidden_sizes', [0]),
        ('model.hidden_sizes', 8),
        ('stack.clients_per_thread', 0),
    ],
)
def test_bad_values(key, value):
    table, field = key.split('.')
    _raises({table: {field: value}}, key, field)


@pytest.mark.parametrize(
    'table,base,key,value,fragment',
    [
        ('data', {'dataset': 'digits'}, 'data.partition', 'shards', "'dirichlet', 'iid'"),
        ('data', {'dataset': 'digits'}, 'data.dirichlet_alpha', 0, '> 0'),
        ('data', {'dataset': 'digits'}, 'data.test_fraction', 1.0, '< 1'),
        ('data', {'dataset': 'digits'}, 'data.min_size', 0, '>= 1'),
        ('data', {'dataset': 'files', 'path': 'p'}, 'data.x_key', '', 'non-empty'),
        ('data', {'dataset': 'files', 'path': 'p'}, 'data.num_classes', 1, '>= 2'),
        ('model', {'name': 'cnn'}, 'model.conv_filters', [4], '2 ints'),
        ('model', {'name': 'cnn'}, 'model.kernel_size', 0, '>= 1'),
        ('model', {'name': 'cnn'}, 'model.pool_size', 'two', '>= 1'),
        ('stack', {'kind': 'process'}, 'stack.num_workers', 0, '>= 1'),
        ('stack', {'kind': 'process'}, 'stack.clients_per_worker', 0, '>= 1'),
        ('stack', {'kind': 'process'}, 'stack.workers_per_gpu', 0, '>= 1'),
        ('stack', {'kind': 'process'}, 'stack.cpu_affinity', 'yes', 'true or false'),
        ('stack', {'kind': 'process'}, 'stack.devices', [], 'GPU ids'),
        ('stack', {'kind': 'process'}, 'stack.devices', [-1], 'GPU ids'),
        ('stack', {'kind': 'process'}, 'stack.devices', 3, 'GPU ids'),
    ],
)
def test_bad_variant_values(table, base, key, value, fragment):
    raw = {table: dict(base, **{key.split('.')[1]: value})}
    if table == 'model':
        raw['data'] = {'dataset': 'digits'}
    _raises(raw, key, fragment)


@pytest.mark.parametrize(
    'table,base,field,value,takers',
    [
        ('data', {'dataset': 'synthetic'}, 'partition', 'iid', "'digits'"),
        ('data', {'dataset': 'digits'}, 'alpha', 1.0, "'synthetic'"),
        ('data', {'dataset': 'synthetic'}, 'path', 'x', "'files'"),
        ('model', {'name': 'mlp'}, 'kernel_size', 3, "'cnn'"),
        ('model', {'name': 'logreg'}, 'hidden_sizes', [8], "'mlp'"),
        ('stack', {'kind': 'thread'}, 'num_workers', 2, "'process'"),
        ('stack', {'kind': 'process'}, 'clients_per_thread', 2, "'thread'"),
    ],
)
def test_option_of_another_variant(table, base, field, value, takers):
    _raises({table: dict(base, **{field: value})}, f'{table}.{field}', 'does not apply', takers)


def test_files_needs_a_path_and_distinct_keys():
    _raises({'data': {'dataset': 'files'}}, 'data.path', 'required')
    _raises({'data': {'dataset': 'files', 'path': 'p', 'y_key': 'x'}}, 'data.y_key', 'differ')


def test_cross_table_checks():
    _raises(
        {'data': {'num_clients': 5}, 'training': {'clients_per_round': 6}},
        'training.clients_per_round',
        '5 clients',
    )
    _raises({'model': {'name': 'cnn'}}, 'model.name', 'image data')
    _raises({'data': {'dataset': 'reference'}, 'model': {'name': 'cnn'}}, 'model.name')


@pytest.mark.parametrize('name', ['', 'a/b', '..', '.hidden', 3, 'with space'])
def test_bad_names(name):
    _raises({'name': name}, 'name', 'name')


def test_name_is_required_without_default():
    with pytest.raises(ConfigError) as info:
        config_from_dict({})
    assert info.value.key == 'name'


@pytest.mark.parametrize(
    'grid,key,fragment',
    [
        ({'stack.workers': [1]}, 'sweep.grid.stack.workers', 'valid keys'),
        ({'name': ['a']}, 'sweep.grid.name', 'valid keys'),
        ({'training.seed': []}, 'sweep.grid.training.seed', 'non-empty list'),
        ({'training.seed': 3}, 'sweep.grid.training.seed', 'non-empty list'),
        (3, 'sweep.grid', 'table'),
    ],
)
def test_bad_sweep_grids(grid, key, fragment):
    _raises({'sweep': {'grid': grid}}, key, fragment)


def test_configs_are_frozen():
    c = config_from_dict({}, 'x')
    with pytest.raises(AttributeError):
        c.training.rounds = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    'union,tag,variants',
    [
        (
            C.DataConfig,
            'dataset',
            {
                'synthetic': C.SyntheticData,
                'digits': C.DigitsData,
                'files': C.FilesData,
                'reference': C.ReferenceData,
                'emnist': C.EmnistData,
                'cifar100': C.Cifar100Data,
                'shakespeare': C.ShakespeareData,
                'stackoverflow': C.StackOverflowData,
                'hf': C.HfData,
            },
        ),
        (
            C.ModelConfig,
            'name',
            {'logreg': C.LogregModel, 'mlp': C.MlpModel, 'cnn': C.CnnModel, 'keras': C.KerasModel},
        ),
        (
            C.StackConfig,
            'kind',
            {'thread': C.ThreadStack, 'process': C.ProcessStack, 'ray': C.RayStack},
        ),
    ],
)
def test_one_class_per_variant(union, tag, variants):
    """The tag picks the class; a variant holds its tag (first, fixed) and its options only."""
    assert union.VARIANTS == variants
    every = set()
    for value, cls in variants.items():
        assert issubclass(cls, union)
        names = [f.name for f in dataclasses.fields(cls)]
        assert names[0] == tag and names.count(tag) == 1
        every |= set(names)
        with pytest.raises(TypeError):
            cls(**{tag: value})  # the tag is not an argument: the class is the tag
    assert set(C.table_keys(union)) == every
    default = union()
    assert type(default) is variants[union.DEFAULT] and getattr(default, tag) == union.DEFAULT


def test_union_constructor_builds_the_variant_and_checks_its_keys():
    assert C.StackConfig(kind='process', num_workers=2) == C.ProcessStack(num_workers=2)
    assert C.DataConfig(num_clients=None) == C.SyntheticData()  # None: not set
    assert C.DataConfig(dataset='files', path='p').known_num_clients is None
    with pytest.raises(ConfigError, match='unknown key stack.foo; allowed keys in'):
        C.StackConfig(kind='thread', foo=1)
    with pytest.raises(ConfigError, match="num_workers is an option of kind 'process', 'ray'"):
        C.StackConfig(kind='thread', num_workers=2)
    with pytest.raises(ConfigError) as info:
        C.FilesData()
    assert info.value.key == 'data.path' and 'required' in str(info.value)
    with pytest.raises(ConfigError) as info:
        C.SyntheticData(num_clients=None)  # a variant's own defaults are not optional
    assert info.value.key == 'data.num_clients'
    with pytest.raises(ValueError):
        dataclasses.replace(C.ThreadStack(), kind='process')


# ------------------------------------------------------------------- overrides


def test_override_values_are_toml_literals_or_bare_strings():
    c = config_from_dict({}, 'x')
    c2 = apply_overrides(
        c,
        [
            'training.rounds=3',
            'algorithm.client_learning_rate=0.5',
            'stack.kind=process',
            'stack.cpu_affinity=false',
            'stack.devices=[0, 1]',
            'model.hidden_sizes = [4, 4]',
            'name="renamed"',
        ],
    )
    assert c2.training.rounds == 3 and c2.algorithm.client_learning_rate == 0.5
    assert c2.stack.kind == 'process' and c2.stack.cpu_affinity is False
    assert c2.stack.devices == (0, 1) and c2.model.hidden_sizes == (4, 4)
    assert c2.name == 'renamed'
    assert c.training.rounds == 10  # the original is unchanged
    assert C.parse_value('a b') == 'a b' and C.parse_value('"1"') == '1'


def test_override_errors():
    c = config_from_dict({}, 'x')
    with pytest.raises(ConfigError) as info:
        apply_overrides(c, ['training.round=3'])
    assert info.value.key == 'training.round'
    assert 'valid keys' in str(info.value) and 'training.rounds' in str(info.value)
    with pytest.raises(ConfigError, match='key=value'):
        apply_overrides(c, ['training.rounds'])
    with pytest.raises(ConfigError) as info:
        apply_overrides(c, ['training.rounds=0'])
    assert info.value.key == 'training.rounds'
    with pytest.raises(ConfigError) as info:
        apply_overrides(c, ['stack.num_workers=2'])  # the stack is 'thread'
    assert info.value.key == 'stack.num_workers'


def test_changing_a_discriminator_drops_options_it_does_not_take():
    c = config_from_dict(
        {
            'stack': {'kind': 'process', 'num_workers': 2},
            'data': {'dataset': 'synthetic', 'alpha': 0.5, 'num_clients': 30},
        },
        'x',
    )
    t = apply_overrides(c, ['stack.kind=thread'])
    assert t.stack == C.StackConfig(kind='thread', clients_per_thread=1)
    d = apply_overrides(c, ['data.dataset=digits'])
    assert not hasattr(d.data, 'alpha') and d.data.num_clients == 30
    assert d.data == C.DigitsData(num_clients=30)
    p = apply_overrides(t, ['stack.kind=process', 'stack.num_workers=3'])
    assert p.stack.num_workers == 3 and p.stack.clients_per_worker == 256
    with pytest.raises(ConfigError) as info:
        apply_overrides(c, ['stack.kind=thread', 'stack.num_workers=2'])
    assert info.value.key == 'stack.num_workers'


def test_override_sweep_grid():
    c = config_from_dict({}, 'x')
    s = apply_overrides(c, ['sweep.grid={"training.seed" = [0, 1]}'])
    assert s.sweep.grid == (('training.seed', (0, 1)),)
    assert [rid for rid, _ in expand_sweep(s)] == ['seed=0', 'seed=1']


def test_valid_keys():
    keys = valid_keys()
    assert keys[0] == 'name' and 'stack.num_workers' in keys and 'sweep.grid' in keys
    assert 'sweep.grid' not in valid_keys(include_sweep=False)


# ---------------------------------------------------------------------- sweeps


def test_expand_sweep_order_ids_and_configs(tmp_path):
    base = load_config(
        _write(
            tmp_path,
            """
        name = "scaling"
        [stack]
        kind = "process"
        [data]
        num_clients = 1000
        [sweep.grid]
        "stack.num_workers" = [1, 2]
        "training.clients_per_round" = [10, 100, 1000]
        "training.seed" = [0]
        """,
        )
    )
    runs = expand_sweep(base)
    assert [rid for rid, _ in runs] == [
        f'num_workers={w},clients_per_round={k},seed=0' for w in (1, 2) for k in (10, 100, 1000)
    ]
    for rid, cfg in runs:
        assert cfg.sweep.grid == () and cfg.name == 'scaling'
        assert rid == (
            f'num_workers={cfg.stack.num_workers},'
            f'clients_per_round={cfg.training.clients_per_round},seed=0'
        )
    assert expand_sweep(base) == runs  # deterministic


def test_expand_without_grid_is_one_default_run():
    c = config_from_dict({}, 'x')
    assert expand_sweep(c) == [(DEFAULT_RUN_ID, c)]


def test_run_ids_use_full_keys_when_last_parts_collide_and_are_safe():
    assert run_id_for([('data.seed', 1), ('training.seed', 2)]) == 'data.seed=1,training.seed=2'
    assert (
        run_id_for([('model.hidden_sizes', [8, 8]), ('stack.cpu_affinity', False)])
        == 'hidden_sizes=8-8,cpu_affinity=false'
    )
    assert run_id_for([('data.path', '/a b/c')]) == 'path=_a_b_c'
    assert run_id_for([]) == DEFAULT_RUN_ID


def test_sweep_over_a_discriminator():
    c = config_from_dict(
        {
            'stack': {'kind': 'process', 'num_workers': 2},
            'sweep': {'grid': {'stack.kind': ['thread', 'process']}},
        },
        'x',
    )
    (tid, t), (pid, p) = expand_sweep(c)
    assert (tid, pid) == ('kind=thread', 'kind=process')
    assert t.stack == C.ThreadStack() and p.stack.num_workers == 2


def test_invalid_sweep_point_names_the_run():
    c = config_from_dict(
        {'data': {'num_clients': 50}, 'sweep': {'grid': {'training.clients_per_round': [10, 100]}}},
        'x',
    )
    with pytest.raises(ConfigError) as info:
        expand_sweep(c)
    assert 'clients_per_round=100' in str(info.value)
    assert info.value.key == 'training.clients_per_round'


def test_colliding_run_ids_are_an_error():
    c = config_from_dict(
        {
            'sweep': {
                'grid': {'data.path': ['a/b', 'a_b']},
            },
            'data': {'dataset': 'files', 'path': 'p'},
        },
        'x',
    )
    with pytest.raises(ConfigError, match='same run id|both get the run id'):
        expand_sweep(c)


# --------------------------------------------------------- shipped config files

_ROOT = Path(__file__).resolve().parents[2]
_SHIPPED = sorted([*(_ROOT / 'configs').glob('*.toml'), *(_ROOT / 'experiments').glob('*.toml')])


@pytest.mark.parametrize('path', _SHIPPED, ids=[p.name for p in _SHIPPED])
def test_shipped_configs_are_valid(path):
    c = load_config(path)
    assert expand_sweep(c)


def test_reference_experiment_is_the_benchmark_workload():
    c = load_config(_ROOT / 'experiments' / 'reference.toml')
    for _, run in expand_sweep(c):
        assert run.data.dataset == 'reference'
        assert run.model == C.ModelConfig(name='mlp', hidden_sizes=(256, 256))
        assert run.algorithm == C.AlgorithmConfig()  # lr 0.05, 1 epoch, batch 10, server 1.0
        assert (run.training.rounds, run.training.clients_per_round, run.training.cohort) == (
            6,
            100,
            'reference',
        )


def test_scaling_experiment_grid():
    c = load_config(_ROOT / 'experiments' / 'scaling.toml')
    ids = [rid for rid, _ in expand_sweep(c)]
    assert len(ids) == 6 and ids[0] == 'num_workers=1,clients_per_round=10,seed=0'
