"""A Ray cluster of several nodes on loopback, started and stopped by the test session.

```
LoopbackCluster(2)
  head:   ray start --head --node-ip-address=127.0.0.2 --block   (own session, core 0)
  node 1: ray start --address=127.0.0.2:P --node-ip-address=127.0.0.3 --block   (core 1)
          (each detached: no child of the test process, whose tests check their children)
  driver: ray.init(address=127.0.0.2:P, _node_ip_address=127.0.0.2)   (this process)
close(): ray.shutdown(); SIGTERM to each node's process group, SIGKILL after a grace;
         then no process of the cluster may be left (`leftover_processes`)
```

Pitfalls measured here: Ray rewrites 127.0.0.1 to the machine's primary IP,
so the nodes use 127.0.0.2 and 127.0.0.3; token authentication is on by
default for a new cluster, so every process (nodes and driver) runs with
``RAY_AUTH_MODE=disabled`` (loopback only); ``ray stop`` would kill every Ray
process of the machine (other users' too), so only the process groups
started here are signalled. Every port is chosen free on its node's address
(Ray's fixed defaults -- 10001 for the client server, 8265 for the dashboard
-- would collide with another cluster on the same machine). Each node is
pinned to its own core, as separate machines would be, so the actors'
pinning plan gives them different cores.

No TensorFlow and no simharness import here.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

_STARTED = 'Ray runtime started'


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _ray_cli() -> List[str]:
    exe = os.path.join(os.path.dirname(sys.executable), 'ray')
    if os.path.exists(exe):
        return [exe]
    return [
        sys.executable,
        '-c',
        'import sys; from ray.scripts.scripts import main; sys.argv[0] = "ray"; sys.exit(main())',
    ]


class LoopbackCluster:
    """`num_nodes` Ray nodes on 127.0.0.2, 127.0.0.3, ..., each with `cpus_per_node` CPUs.

    Args:
      num_nodes: nodes (the first is the head).
      cpus_per_node: Ray CPUs of each node.
      object_store_bytes: each node's object store (small: the machine is shared).
      start_timeout: seconds to wait for each node.
      pin_nodes: run node k on core ``k % cores`` only (as if on its own machine).
      connect: make this process the cluster's driver (else a driver of another
        process joins it at `address`, or at `client_address` through Ray Client).
    """

    def __init__(
        self,
        num_nodes: int = 2,
        cpus_per_node: int = 1,
        object_store_bytes: int = 200 << 20,
        start_timeout: float = 120.0,
        pin_nodes: bool = True,
        connect: bool = True,
    ):
        self.num_nodes = num_nodes
        self.cpus_per_node = cpus_per_node
        self.object_store_bytes = object_store_bytes
        self.start_timeout = start_timeout
        self.pin_nodes = pin_nodes
        self.ips = [f'127.0.0.{2 + k}' for k in range(num_nodes)]
        self.temp_dir = tempfile.mkdtemp(prefix='shray', dir='/tmp')  # short: socket paths
        self.env = dict(
            os.environ,
            RAY_AUTH_MODE='disabled',
            RAY_USAGE_STATS_ENABLED='0',
            TF_CPP_MIN_LOG_LEVEL='3',
        )
        self.pgids: List[int] = []  # one process group (and session) per node
        self.logs: List[str] = []
        # Every port this cluster hands Ray, distinct: two draws of a free port can give the
        # same number (it was free both times), and Ray refuses a node whose components share
        # one ("metrics_export is trying to use a port number 50107 that is used by other
        # components": a CI run on 2026-11-27).
        self._ports: set = set()
        self.port = self._distinct_port(self.ips[0])
        self.address = f'{self.ips[0]}:{self.port}'
        self.client_port = self._distinct_port(self.ips[0])
        self.client_address = f'ray://{self.ips[0]}:{self.client_port}'
        self._saved_env: Dict[str, Optional[str]] = {}
        self._connected = False
        self._seen: set = set()
        self.closed = False
        try:
            for k in range(num_nodes):
                self._start_node(k)
            if connect:
                self.connect()
        except BaseException:
            self.close()
            raise

    def _distinct_port(self, ip: str) -> int:
        while True:
            port = _free_port(ip)
            if port not in self._ports:
                self._ports.add(port)
                return port

    def add_node(self, env: Optional[Dict[str, str]] = None) -> int:
        """Starts one more node (127.0.0.<2 + k>, `cpus_per_node` CPUs, `env` added to its
        environment) joined to the head; returns its index k."""
        k = len(self.ips)
        self.ips.append(f'127.0.0.{2 + k}')
        self.num_nodes += 1
        self._start_node(k, env)
        return k

    def kill_node(self, k: int) -> List[int]:
        """SIGKILL to node k (not the head) and every process it started: a machine lost.
        Returns their pids."""
        import psutil

        group = self._members(self.pgids[k])
        victims = set(group)
        for pid in group:
            try:
                victims.update(c.pid for c in psutil.Process(pid).children(recursive=True))
            except psutil.Error:
                pass
        self._seen.update(victims)
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return sorted(victims)

    def _start_node(self, k: int, env: Optional[Dict[str, str]] = None) -> None:
        ip = self.ips[k]
        args = _ray_cli() + [
            'start',
            '--block',
            f'--node-ip-address={ip}',
            f'--num-cpus={self.cpus_per_node}',
            '--num-gpus=0',
            f'--object-store-memory={self.object_store_bytes}',
            f'--dashboard-agent-listen-port={self._distinct_port(ip)}',
            f'--dashboard-agent-grpc-port={self._distinct_port(ip)}',
            f'--metrics-export-port={self._distinct_port(ip)}',
            f'--runtime-env-agent-port={self._distinct_port(ip)}',
            '--disable-usage-stats',
        ]
        if k == 0:
            args += [
                '--head',
                f'--port={self.port}',
                '--include-dashboard=false',
                f'--dashboard-port={self._distinct_port(ip)}',
                f'--ray-client-server-port={self.client_port}',
                f'--temp-dir={self.temp_dir}',
            ]
        else:
            args += [f'--address={self.address}']
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else []
        core = cores[k % len(cores)] if cores and self.pin_nodes else None

        def pin() -> None:
            if core is not None:
                os.sched_setaffinity(0, {core})

        log = os.path.join(self.temp_dir, f'node{k}.log')
        self.logs.append(log)
        # Detached (a shell starts it in the background and exits): the node's processes
        # are no children of this process, whose other tests check their own children.
        sh = subprocess.Popen(
            ['/bin/sh', '-c', 'exec "$@" </dev/null >"$0" 2>&1 &', log] + args,
            env=dict(self.env, **(env or {})),
            start_new_session=True,
            preexec_fn=pin,
        )
        sh.wait()
        self.pgids.append(sh.pid)  # the group outlives its leader
        deadline = time.monotonic() + self.start_timeout
        while True:
            text = self._log_text(k)
            if _STARTED in text:
                return
            if not self._members(sh.pid) or time.monotonic() > deadline:
                raise RuntimeError(f'Ray node {k} ({ip}) did not start:\n{text[-3000:]}')
            time.sleep(0.2)

    def _log_text(self, k: int) -> str:
        try:
            with open(self.logs[k], 'rb') as f:
                return f.read().decode(errors='replace')
        except OSError:
            return ''

    @staticmethod
    def _members(pgid: int) -> List[int]:
        import psutil

        out = []
        for p in psutil.process_iter(['pid', 'status']):
            try:
                if p.info['status'] != psutil.STATUS_ZOMBIE and os.getpgid(p.pid) == pgid:
                    out.append(p.pid)
            except (ProcessLookupError, psutil.Error, OSError):
                pass
        return out

    def connect(self) -> None:
        """Connects this process as the cluster's driver (``ray.init``)."""
        import ray

        for key in ('RAY_AUTH_MODE', 'RAY_USAGE_STATS_ENABLED'):
            self._saved_env[key] = os.environ.get(key)
            os.environ[key] = self.env[key]
        ray.init(
            address=self.address,
            _node_ip_address=self.ips[0],
            logging_level='WARNING',
            configure_logging=True,
            log_to_driver=False,
        )
        self._connected = True
        deadline = time.monotonic() + self.start_timeout
        while len([n for n in ray.nodes() if n.get('Alive')]) < self.num_nodes:
            if time.monotonic() > deadline:
                raise RuntimeError(f'only {len(ray.nodes())} of {self.num_nodes} Ray nodes joined')
            time.sleep(0.2)

    def note_processes(self) -> None:
        """Remembers the processes the nodes started so far (checked again by `close`)."""
        self._seen.update(self.descendants())

    def descendants(self) -> List[int]:
        """Live processes started by the nodes (Ray's daemons, and workers in their own groups)."""
        import psutil

        out = []
        for pgid in self.pgids:
            for pid in self._members(pgid):
                try:
                    out.append(pid)
                    out.extend(c.pid for c in psutil.Process(pid).children(recursive=True))
                except psutil.Error:
                    pass
        return sorted(set(out))

    def pids(self) -> List[int]:
        """Live processes of the cluster: its process groups and every process it started."""
        import psutil

        groups = set(self.pgids)
        known = set(self._seen)
        out = []
        for p in psutil.process_iter(['pid', 'status']):
            try:
                if p.info['status'] == psutil.STATUS_ZOMBIE or p.pid == os.getpid():
                    continue
                if p.pid in known or os.getpgid(p.pid) in groups:
                    out.append(p.pid)
            except (ProcessLookupError, psutil.Error, OSError):
                pass
        return out

    def leftover_processes(self) -> List[str]:
        """What is still alive of the cluster (pid: command line)."""
        import psutil

        out = []
        for pid in self.pids():
            try:
                out.append(f'{pid}: {" ".join(psutil.Process(pid).cmdline())[:120]}')
            except psutil.Error:
                pass
        return out

    def close(self, grace: float = 5.0) -> None:
        """Disconnects the driver and stops the nodes this object started. Idempotent."""
        if self.closed:
            return
        self.closed = True
        self._seen.update(self.descendants())
        if self._connected:
            import ray

            try:
                ray.shutdown()
            finally:
                self._connected = False
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for pgid in reversed(self.pgids):  # worker nodes first, the head last
            try:
                os.killpg(pgid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.2)
        for pgid in self.pgids:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in self.pids():  # started by the nodes in groups of their own
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        import shutil

        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> 'LoopbackCluster':
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class RayStackResource:
    """The 'ray-2' stack's session resource: the loopback cluster and two shared actors."""

    def __init__(self) -> None:
        # 2 Ray CPUs per node: the shared actors take one on each node, tests that
        # make actors of their own (timeouts, experiments) get the others.
        self.cluster = LoopbackCluster(2, cpus_per_node=2)
        try:
            from simharness.runtime.ray.workers import RayWorkers
            from simharness.hosts.ray_actor import RayWorker

            # SPREAD: one actor per node; clients_per_worker=3 makes the actors cut
            # their blocks into several TF calls (as the process-2 stack does).
            self.workers = RayWorkers(
                2, placement_strategy='SPREAD', clients_per_worker=3, actor=RayWorker
            )
            self.workers.start()
        except BaseException:
            self.cluster.close()
            raise
        self.leftover: Optional[List[str]] = None

    def close(self) -> None:
        try:
            self.workers.close()
        finally:
            self.cluster.close()
            self.leftover = self.cluster.leftover_processes()
            if self.leftover:
                raise RuntimeError(f'Ray processes left after the session: {self.leftover}')
