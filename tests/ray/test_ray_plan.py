"""Unit tests of the Ray backend's pure parts: the pinning plan and argument checks (no Ray)."""

from __future__ import annotations

import numpy as np
import pytest

from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.runtime.ray.placement import (
    check_ray_arguments,
    placement_from_dict,
    placement_to_dict,
    plan_ray_placements,
)

A, B = 'node-a', 'node-b'


def _cpus(plan):
    return [p.cpus for p in plan]


def test_actors_on_one_node_get_disjoint_cores_in_bundle_order():
    plan = plan_ray_placements([A, A, A], {A: [4, 5, 6, 7]}, 1)
    assert _cpus(plan) == [(4,), (5,), (6,)]
    assert [p.worker_id for p in plan] == [0, 1, 2]
    assert all(p.intra_op_threads == 1 and p.inter_op_threads == 1 for p in plan)
    assert all(p.gpu is None and p.env == {'CUDA_VISIBLE_DEVICES': ''} for p in plan)


def test_cores_are_node_local():
    # Bundles interleaved over two nodes: each node's actors count from its own first core.
    plan = plan_ray_placements([A, B, A, B], {A: [0, 1], B: [8, 9]}, 1)
    assert _cpus(plan) == [(0,), (8,), (1,), (9,)]


def test_several_cpus_per_worker():
    plan = plan_ray_placements([A, A], {A: [0, 1, 2, 3, 4]}, 2)
    assert _cpus(plan) == [(0, 1), (2, 3)]


def test_fractional_cpus_share_cores():
    plan = plan_ray_placements([A, A, A, A], {A: [0, 1]}, 0.5)
    assert _cpus(plan) == [(0,), (0,), (1,), (1,)]
    plan = plan_ray_placements([A, A], {A: [0, 1, 2]}, 1.5)
    assert _cpus(plan) == [(0, 1), (1, 2)]


def test_more_logical_cpus_than_cores_wrap_around():
    plan = plan_ray_placements([A, A, A], {A: [2, 3]}, 1)
    assert _cpus(plan) == [(2,), (3,), (2,)]


def test_without_affinity_every_actor_may_use_its_nodes_cores():
    plan = plan_ray_placements([A, B], {A: [1, 0], B: [5]}, 1, cpu_affinity=False)
    assert _cpus(plan) == [(0, 1), (5,)]


def test_gpus_come_from_ray_and_shared_gpus_grow_memory():
    plan = plan_ray_placements([A, A], {A: [0, 1]}, 1, 0.5, gpu_ids=[3, 3])
    assert [p.gpu for p in plan] == [3, 3]
    # Ray sets CUDA_VISIBLE_DEVICES itself: the plan does not override it.
    assert all(p.env == {'TF_FORCE_GPU_ALLOW_GROWTH': 'true'} for p in plan)
    whole = plan_ray_placements([A], {A: [0]}, 1, 1, gpu_ids=[0])
    assert whole[0].gpu == 0 and whole[0].env == {}


def test_plan_errors_name_the_problem():
    with pytest.raises(SimharnessValueError, match="node 'node-b'"):
        plan_ray_placements([A, B], {A: [0]}, 1)
    with pytest.raises(SimharnessValueError, match='no usable cores'):
        plan_ray_placements([A], {A: []}, 1)
    with pytest.raises(SimharnessValueError, match='Ray gave it none'):
        plan_ray_placements([A], {A: [0]}, 1, 1, gpu_ids=[None])
    with pytest.raises(SimharnessValueError, match='2 bundles'):
        plan_ray_placements([A, A], {A: [0]}, 1, 0, gpu_ids=[None])
    with pytest.raises(SimharnessValueError, match='num_cpus_per_worker'):
        plan_ray_placements([A], {A: [0]}, 0)


def test_placement_round_trips_as_plain_data():
    p = plan_ray_placements([A, A], {A: [0, 1]}, 1, 0.25, gpu_ids=[1, 2])[1]
    d = placement_to_dict(p)
    assert all(isinstance(v, (int, list, dict, type(None))) for v in d.values())
    assert placement_from_dict(d) == p


_GOOD = dict(
    num_workers=2,
    num_cpus_per_worker=1,
    num_gpus_per_worker=0,
    clients_per_worker=8,
    placement_strategy='PACK',
    ready_timeout=10.0,
    max_restarts=3,
    call_timeout=None,
    cpu_affinity=True,
    address=None,
)


def test_good_arguments_pass_and_the_strategy_is_normalised():
    assert check_ray_arguments(**_GOOD) == 'PACK'
    assert check_ray_arguments(**dict(_GOOD, placement_strategy='spread')) == 'SPREAD'
    check_ray_arguments(
        **dict(
            _GOOD,
            num_workers=None,
            clients_per_worker=None,
            num_cpus_per_worker=0.5,
            num_gpus_per_worker=0.25,
            max_restarts=-1,
            call_timeout=30,
            address='auto',
        )
    )


@pytest.mark.parametrize(
    'key, value, error, words',
    [
        ('num_workers', 0, SimharnessValueError, 'num_workers'),
        ('num_workers', 1.5, SimharnessTypeError, 'num_workers'),
        ('num_workers', True, SimharnessTypeError, 'num_workers'),
        ('num_cpus_per_worker', 0, SimharnessValueError, 'num_cpus_per_worker'),
        ('num_cpus_per_worker', '1', SimharnessTypeError, 'num_cpus_per_worker'),
        ('num_gpus_per_worker', -1, SimharnessValueError, 'num_gpus_per_worker'),
        ('num_gpus_per_worker', 2, SimharnessValueError, 'one GPU'),
        ('clients_per_worker', 0, SimharnessValueError, 'clients_per_worker'),
        ('placement_strategy', 'DENSE', SimharnessValueError, 'STRICT_SPREAD'),
        ('placement_strategy', 1, SimharnessTypeError, 'placement_strategy'),
        ('ready_timeout', 0, SimharnessValueError, 'ready_timeout'),
        ('max_restarts', -2, SimharnessValueError, 'max_restarts'),
        ('max_restarts', 1.0, SimharnessTypeError, 'max_restarts'),
        ('call_timeout', -1, SimharnessValueError, 'call_timeout'),
        ('cpu_affinity', 1, SimharnessTypeError, 'cpu_affinity'),
        ('address', 6379, SimharnessTypeError, 'address'),
        ('address', '', SimharnessTypeError, 'address'),
    ],
)
def test_bad_arguments_name_the_argument(key, value, error, words):
    with pytest.raises(error, match=words):
        check_ray_arguments(**dict(_GOOD, **{key: value}))


def test_factory_checks_arguments_before_anything_starts():
    import simharness as sh

    with pytest.raises(SimharnessValueError, match='placement_strategy'):
        sh.framework.ray_executor_factory(placement_strategy='NOPE')
    with pytest.raises(SimharnessTypeError, match='workers must be a RayWorkers'):
        sh.framework.ray_executor_factory(workers=object())
    # A valid factory starts nothing until it is used (Ray is not even initialised).
    f = sh.framework.ray_executor_factory(num_workers=1)
    assert not f.group.started
    f.close()
    f.close()  # idempotent


def test_without_ray_the_error_names_the_extra(monkeypatch):
    import sys

    from simharness.errors import MissingDependencyError
    from simharness.runtime.ray import RayWorkers
    from simharness.hosts.ray_actor import RayWorker

    monkeypatch.setitem(sys.modules, 'ray', None)  # as if Ray were not installed
    workers = RayWorkers(1, actor=RayWorker)
    with pytest.raises(MissingDependencyError, match=r'pip install "simharness\[ray\]"') as info:
        workers.start()
    assert isinstance(info.value, ImportError)
    workers.close()


def test_stack_config_of_kind_ray():
    from simharness.errors import ConfigError
    from simharness.experiments.config import StackConfig, apply_overrides, config_from_dict

    s = StackConfig(kind='ray')
    assert (
        s.address,
        s.num_workers,
        s.num_cpus_per_worker,
        s.num_gpus_per_worker,
        s.placement_strategy,
        s.clients_per_worker,
        s.cpu_affinity,
    ) == (None, None, 1, 0, 'PACK', 256, True)
    c = config_from_dict(
        {
            'name': 'x',
            'stack': {
                'kind': 'ray',
                'address': 'auto',
                'num_workers': 4,
                'num_gpus_per_worker': 0.5,
                'placement_strategy': 'SPREAD',
            },
        }
    )
    assert 'address = "auto"' in c.to_toml()
    # Switching the kind drops the options the new kind does not take.
    assert not hasattr(apply_overrides(c, ['stack.kind=thread']).stack, 'address')
    for bad, key in [
        ({'num_gpus_per_worker': 2}, 'num_gpus_per_worker'),
        ({'num_cpus_per_worker': 0}, 'num_cpus_per_worker'),
        ({'placement_strategy': 'pack'}, 'placement_strategy'),
        ({'address': ''}, 'address'),
        ({'devices': 'cuda:0'}, 'devices'),
    ]:
        with pytest.raises(ConfigError, match=key) as info:
            StackConfig(kind='ray', **bad)
        assert info.value.key == f'stack.{key}'
    with pytest.raises(ConfigError, match="address is an option of kind 'ray'"):
        StackConfig(kind='process', address='auto')


def test_the_runner_builds_a_ray_factory_from_the_config():
    from simharness.experiments.config import config_from_dict
    from simharness.experiments.runner import _make_factory
    from simharness.runtime.ray.workers import RayWorkers

    c = config_from_dict(
        {
            'name': 'x',
            'stack': {
                'kind': 'ray',
                'address': '10.0.0.1:6379',
                'num_workers': 3,
                'num_cpus_per_worker': 2,
                'placement_strategy': 'SPREAD',
                'clients_per_worker': 7,
            },
        }
    )
    f = _make_factory(c)
    try:
        assert isinstance(f.group, RayWorkers) and not f.group.started  # nothing started
        w = f.group
        assert (
            w.address,
            w.requested_workers,
            w.num_cpus_per_worker,
            w.placement_strategy,
            w.clients_per_worker,
        ) == ('10.0.0.1:6379', 3, 2, 'SPREAD', 7)
    finally:
        f.close()


def test_a_slot_moved_to_another_node_is_planned_again_there():
    # Ray reschedules a bundle whose node died: the restarted actor gets cores of its new
    # node, disjoint from the actors already there; the other slots keep their placements.
    from simharness.runtime.ray.handle import RayWorkerHandle
    from simharness.runtime.ray.workers import RayWorkers
    from simharness.hosts.ray_actor import RayWorker

    workers = RayWorkers(3, actor=RayWorker)
    handles = [RayWorkerHandle(workers, k) for k in range(3)]
    plan = plan_ray_placements([A, B, B], {A: [0, 1], B: [4, 5, 6]}, 1)
    for h, p, node, cpus in zip(handles, plan, [A, B, B], [[0, 1], [4, 5, 6], [4, 5, 6]]):
        h.placement, h.node_id, h.node_cpus = p, node, cpus
    workers.handles.extend(handles)
    moved = workers._replan(handles[0], {'node_id': B, 'cpus': [4, 5, 6], 'gpu_ids': []})
    assert moved.cpus == (6,) and moved.worker_id == 0
    assert [h.placement.cpus for h in handles[1:]] == [(4,), (5,)]
    workers.close()


def test_a_broadcast_outlives_its_reads_until_its_bytes_change():
    """A worker whose read ends before the next worker acquires the same value does not
    make the value put again; an array changed in place since is put again."""
    from simharness.runtime.ray.broadcast import RayBroadcast

    class _FakeRay:
        def __init__(self):
            self.objects = []

        def put(self, value):
            self.objects.append([np.array(b) for b in value])
            return len(self.objects) - 1

    fake = _FakeRay()
    bc = RayBroadcast(fake)
    model = np.arange(8, dtype=np.float32)
    first = bc.acquire(model, [model])
    bc.release(first)  # worker 1 is done before worker 2 asks
    assert bc.acquire(model, [model]) == first and bc.puts == 1
    bc.release(first)
    model[0] = 42.0  # the same object, other bytes
    again = bc.acquire(model, [model])
    assert again != first and bc.puts == 2 and fake.objects[again[0]][0][0] == 42.0
