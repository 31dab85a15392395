"""The remote stack (2 executor services on loopback) next to its peers, in one run.

The three measurements of issue 13, each a pair of cases whose ratio is in
``extra_info`` of the remote case (medians of the same session):

* ``map+sum over 1000 clients``: a trivial federated_map + federated_sum on
  ``remote-2`` (2 services started by this module with ``simharness serve``)
  and ``process-2`` (2 local worker processes): ``ms_per_client`` and
  ``ratio_to_process_2``.
* ``broadcast+aggregate``: a model of 16 / 128 MB broadcast to 2 clients
  (one per service) and summed back, against plain chunked gRPC streaming of
  the same bytes (1 MiB messages of raw bytes sent to, and echoed back by, 2
  plain gRPC servers in 2 processes, concurrently; `grpc_echo_server.py`):
  ``fraction_of_plain_grpc`` = plain median / remote median (1.0: as fast
  as the plain stream; the goal is >= 0.8). ``bytes_moved`` is 4 x the model
  in both (to each service and back).
* ``fedavg round``: the FedAvg reference round (100 clients, reference MLP)
  on remote-2 and process-2: ``ratio_to_process_2`` (process median /
  remote median is the speed ratio; the goal is >= 0.8x).

With ``--benchmark-disable`` (CI) the 128 MB size is skipped and each body
runs once, checked.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from computations import broadcast_aggregate, map_sum_add_one  # noqa: E402  (tests/computations.py)

from .helpers import MB, check_then_time, median_seconds

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

STACKS = ('process-2', 'remote-2')
SIZES_MB = [16, pytest.param(128, marks=pytest.mark.timing_only)]
CHUNK = 1 << 20
ECHO = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'grpc_echo_server.py')
FEDAVG_CLIENTS = 100
FEDAVG_ROUNDS = 5


@pytest.fixture(scope='module')
def factories():
    """{'process-2': 2 local workers, 'remote-2': 2 services started here} (closed at the end)."""
    import simharness as sh
    from remote_services import ServicePair  # tests/remote_services.py

    pair = ServicePair(2)
    process = sh.framework.process_executor_factory(num_workers=2)
    remote = sh.framework.remote_executor_factory(services=pair.services)
    try:
        yield {'process-2': process, 'remote-2': remote}
    finally:
        remote.close()
        process.close()
        pair.close()


@pytest.fixture(scope='module')
def medians():
    return {}


def _in_context(factory, fn, *args):
    import simharness as sh

    with sh.execution_context(factory):
        return fn(*args)


# ---------------------------------------------------------------- map + sum


@pytest.fixture(scope='module')
def map_sum():
    return map_sum_add_one()


@pytest.mark.parametrize('stack', STACKS)
def test_map_sum_1000_clients(benchmark, factories, medians, map_sum, stack):
    import simharness as sh

    benchmark.group = 'remote: map+sum over 1000 clients'
    xs = [np.float32(i % 7) for i in range(1000)]
    expected = float(sum(i % 7 + 1 for i in range(1000)))
    with sh.execution_context(factories[stack]):
        check_then_time(
            benchmark,
            map_sum,
            (xs,),
            lambda r: float(r) == expected or pytest.fail(f'{r} != {expected}'),
        )
    t = median_seconds(benchmark)
    if t is None:
        return
    medians[('map_sum', stack)] = t
    benchmark.extra_info.update(stack=stack, ms_per_client=1e3 * t / 1000)
    if stack == 'remote-2' and ('map_sum', 'process-2') in medians:
        p = medians[('map_sum', 'process-2')]
        benchmark.extra_info.update(
            process_2_seconds=p,
            ratio_to_process_2=t / p,
            overhead_ms_per_client_over_process_2=1e3 * (t - p) / 1000,
        )


# ---------------------------------------------------------------- broadcast + aggregate


class EchoServers:
    """2 plain gRPC echo servers (subprocesses) and a channel to each."""

    def __init__(self, n: int = 2):
        import grpc

        self.procs = []
        self.channels = []
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
        opts = [
            ('grpc.max_send_message_length', 4 << 20),
            ('grpc.max_receive_message_length', 4 << 20),
        ]
        try:
            for _ in range(n):
                p = subprocess.Popen(
                    [sys.executable, ECHO], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
                )
                self.procs.append(p)
                port = int(p.stdout.readline())
                ch = grpc.insecure_channel(f'127.0.0.1:{port}', options=opts)
                self.channels.append(ch)
            self.calls = [
                ch.stream_stream(
                    '/bench.Echo/Stream',
                    request_serializer=lambda b: b,
                    response_deserializer=lambda b: b,
                )
                for ch in self.channels
            ]
        except BaseException:
            self.close()
            raise

    def round_trip(self, w: np.ndarray) -> list:
        """Sends `w` to every server in 1 MiB messages and reassembles the echoes, concurrently."""
        raw = memoryview(np.ascontiguousarray(w).reshape(-1).view(np.uint8))
        outs = [np.empty(w.nbytes, np.uint8) for _ in self.calls]

        def one(call, out):
            def chunks():
                for off in range(0, len(raw), CHUNK):
                    yield bytes(raw[off : off + CHUNK])

            pos = 0
            for msg in call(chunks()):
                out[pos : pos + len(msg)] = np.frombuffer(msg, np.uint8)
                pos += len(msg)

        threads = [threading.Thread(target=one, args=(c, o)) for c, o in zip(self.calls, outs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [o.view(w.dtype) for o in outs]

    def close(self) -> None:
        for ch in self.channels:
            ch.close()
        for p in self.procs:
            p.stdin.close()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
            p.stdout.close()


@pytest.fixture(scope='module')
def echo_servers():
    s = EchoServers(2)
    yield s
    s.close()


def _model(mb: int) -> np.ndarray:
    return np.random.default_rng(mb).standard_normal(mb * MB // 4).astype(np.float32)


@pytest.mark.parametrize('mb', SIZES_MB)
def test_plain_grpc_streaming(benchmark, echo_servers, medians, mb):
    """Baseline: the model's bytes to 2 plain gRPC servers and back, 1 MiB messages."""
    benchmark.group = f'remote: broadcast+aggregate {mb} MB'
    w = _model(mb)

    def check(outs):
        assert all(np.array_equal(o, w) for o in outs)

    check_then_time(benchmark, echo_servers.round_trip, (w,), check, target_seconds=2.0)
    t = median_seconds(benchmark)
    if t is not None:
        medians[('plain', mb)] = t
        benchmark.extra_info.update(bytes_moved=4 * w.nbytes, gb_per_second=4 * w.nbytes / t / 1e9)


@pytest.mark.parametrize('mb', SIZES_MB)
def test_broadcast_aggregate_through_2_services(benchmark, factories, medians, mb):
    import simharness as sh

    benchmark.group = f'remote: broadcast+aggregate {mb} MB'
    w = _model(mb)
    comp = broadcast_aggregate(w.size)

    def check(result):
        assert np.array_equal(np.asarray(result), w)

    # 2 clients: one in each service.
    factory = sh.framework.remote_executor_factory(
        services=factories['remote-2'].group, num_clients=2
    )
    with factory, sh.execution_context(factory):
        check_then_time(benchmark, comp, (w,), check, target_seconds=2.0)
    t = median_seconds(benchmark)
    if t is None:
        return
    benchmark.extra_info.update(bytes_moved=4 * w.nbytes, gb_per_second=4 * w.nbytes / t / 1e9)
    plain = medians.get(('plain', mb))
    if plain is not None:
        benchmark.extra_info.update(plain_grpc_seconds=plain, fraction_of_plain_grpc=plain / t)


# ---------------------------------------------------------------- FedAvg


@pytest.fixture(scope='module')
def workload():
    from simharness.learning import reference_fedavg_workload
    from simharness.learning import FedAvg, FedAvgConfig
    from simharness.learning.models import reference_mlp_spec

    cd, w0 = reference_fedavg_workload()
    arrays = [cd.client_arrays(cid) for cid in cd.client_ids[:FEDAVG_CLIENTS]]
    fedavg = FedAvg(reference_mlp_spec(), FedAvgConfig(), 50)
    return {'fedavg': fedavg, 'padded': fedavg.pad(arrays), 'state': fedavg.initialize(w0)}


@pytest.mark.parametrize('stack', STACKS)
def test_fedavg_round(benchmark, factories, medians, workload, stack):
    import simharness as sh

    benchmark.group = 'remote: fedavg round (100 clients, reference MLP)'
    fedavg, state, padded = workload['fedavg'], workload['state'], workload['padded']
    results = medians.setdefault('fedavg_weights', {})

    def check(result):
        new_state, metrics = result
        assert metrics['num_examples'] == FEDAVG_CLIENTS * 50, metrics
        weights = [np.asarray(v) for v in new_state['weights']]
        results[stack] = weights
        other = results.get('process-2' if stack == 'remote-2' else 'remote-2')
        if other is not None:  # the two stacks agree bit for bit
            assert all(a.tobytes() == b.tobytes() for a, b in zip(weights, other))

    with sh.execution_context(factories[stack]):
        check_then_time(benchmark, fedavg.next, (state, padded), check, rounds=FEDAVG_ROUNDS)
    t = median_seconds(benchmark)
    if t is None:
        return
    medians[('fedavg', stack)] = t
    benchmark.extra_info.update(stack=stack, clients_per_second=FEDAVG_CLIENTS / t)
    if stack == 'remote-2' and ('fedavg', 'process-2') in medians:
        p = medians[('fedavg', 'process-2')]
        benchmark.extra_info.update(
            process_2_seconds=p, ratio_to_process_2=t / p, speed_relative_to_process_2=p / t
        )
