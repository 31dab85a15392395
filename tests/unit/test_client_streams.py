"""The strategy's streaming is an object it owns (`ClientStreams`), over frozen `ClientGroups`."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import tensorflow as tf

import simharness as sh
from simharness.executors.leaf.eager_tf import EagerTFExecutor
from simharness.executors.federating import FederatingExecutor
from simharness.executors.reference_resolving import ReferenceResolvingExecutor
from simharness.executors.strategy.resolving_strategy import FederatedResolvingStrategy
from simharness.executors.strategy.resolving_streams import ClientStreams
from simharness.executors.strategy.strategy_plans import ClientGroups, LazyMap, Leaf


def test_client_groups_are_contiguous_and_frozen():
    a, b, c = EagerTFExecutor(), EagerTFExecutor(), EagerTFExecutor()
    groups = ClientGroups.of([(a, 2), (b, 0), (c, 3)])
    assert groups.executors == (a, b, c)
    assert groups.sizes == (2, 0, 3) and groups.starts == (0, 2, 2)
    assert groups.num_clients == 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        groups.num_clients = 6  # type: ignore[misc]
    assert ClientGroups.of([]).num_clients == 0


def test_a_lazy_plan_has_one_lock():
    async def go():
        lazy = LazyMap(Leaf([[]], False), None)
        assert lazy.lock() is lazy.lock()

    asyncio.run(go())


@sh.tf_computation(tf.float32)
def _add_one(x):
    return x + 1.0


@sh.federated_computation(sh.type_at_clients(tf.float32))
def _mean_and_sum(xs):
    ys = sh.federated_map(_add_one, xs)
    return sh.federated_mean(ys), sh.federated_sum(ys)


def test_the_strategy_owns_its_streams_and_reads_their_settings():
    server, unplaced = EagerTFExecutor(), EagerTFExecutor()
    groups = [(EagerTFExecutor(), 2), (EagerTFExecutor(), 3)]
    fed = FederatingExecutor(FederatedResolvingStrategy.factory(server, groups), unplaced)
    strategy = fed.strategy
    assert isinstance(strategy, FederatedResolvingStrategy)
    streams = strategy.client_streams
    assert isinstance(streams, ClientStreams) and streams.groups is strategy.groups
    assert strategy.num_clients == 5 and strategy.stream and strategy.stream_slice is None
    strategy.stream_slice = 16
    assert streams.stream_slice == 16
    assert strategy.stream_stats is streams.stats

    async def go(ex):
        comp = await ex.create_value(
            _mean_and_sum.to_building_block(), _mean_and_sum.type_signature
        )
        arg = await ex.create_value(
            [1.0, 2.0, 3.0, 4.0, 5.0], _mean_and_sum.type_signature.parameter
        )
        return await (await ex.create_call(comp, arg)).compute()

    with ReferenceResolvingExecutor(fed) as ex:
        mean, total = asyncio.run(go(ex))
        # The round's two reductions of one map went in one stream batch.
        assert strategy.stream_stats == {'reductions': 2, 'batches': 1, 'recomputed': 0}
        strategy.stream = False
        assert not streams.stream
        assert [float(x) for x in asyncio.run(go(ex))] == [float(mean), float(total)] == [4.0, 20.0]
        assert streams.stats['batches'] == 1
