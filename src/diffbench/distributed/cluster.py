"""Connecting to a Ray cluster for ``--ray ADDRESS`` and describing what it has.

``ADDRESS`` is ``local`` (start a private cluster inside this command, on loopback only, stopped when the command
ends), ``auto`` (the cluster ``ray start --head`` began on this machine) or ``HOST:PORT`` of a head node.

Loopback: Ray binds its servers to the node IP it detects, which is the machine's routable address; for a
``local`` cluster :func:`connect` sets ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` before Ray is imported, which
makes Ray take ``127.0.0.1`` as the node IP (its single-machine mode, see ``ray/_private/services.py``
``get_node_ip_address``), so every Ray process listens on 127.0.0.1 only. Usage statistics are disabled
(``RAY_USAGE_STATS_ENABLED=0``): nothing leaves the machine.

Priority: Ray starts its workers at nice 15 (its ``worker_niceness`` setting), so on a node with any other
work the OS gives an actor a small share of a CPU (CFS weight 36 against 1024 at nice 0) and every time it
measures is inflated. A ``local`` cluster starts its workers at nice :data:`WORKER_NICENESS` (0, the
priority of the command itself); for a cluster started with ``ray start`` the actors report their nice value
and :func:`niceness_warning` says how to start the nodes (``RAY_worker_niceness=0 ray start ...``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel

from diffbench.errors import DiffbenchError, MissingDependencyError, UsageError

RAY_INSTALL = 'pip install -c constraints.txt -e ".[ray]"'
PROBE_TIMEOUT_S = 3.0  # seconds a TCP connect to a --ray HOST:PORT may take before it is called unreachable
RELEASE_WAIT_S = 10.0  # how long actor_pool waits for the resources of just-killed actors to come back
WORKER_NICENESS = 0  # nice value of a local cluster's workers (Ray's default 15 starves them on a busy node)
_ADDRESS = re.compile(r"^(local|auto|(ray://)?[A-Za-z0-9.\-_\[\]:]+:\d{1,5})$")


class NodeInfo(BaseModel):
    """One alive node: its Ray id, IP, and the CPUs / GPUs it offers Ray (counts, may be fractional)."""

    node_id: str
    ip: str
    cpus: float = 0.0
    gpus: float = 0.0


class ClusterInfo(BaseModel):
    """What ``--ray`` ran on: the address given, whether this command started the cluster, its nodes."""

    address: str
    started_here: bool
    ray_version: str
    nodes: list[NodeInfo] = []

    @property
    def cpus(self) -> float:
        """CPUs over all alive nodes."""
        return sum(n.cpus for n in self.nodes)

    @property
    def gpus(self) -> float:
        """GPUs over all alive nodes."""
        return sum(n.gpus for n in self.nodes)


class ActorDied(DiffbenchError):
    """An actor (or its node) died during a distributed run; finished items are kept for a rerun (exit 5)."""

    exit_code = 5


def check_address(address: str) -> str:
    """``local``, ``auto`` or ``[ray://]HOST:PORT``.

    Raises:
        UsageError: anything else (names ``--ray`` and the accepted forms).
    """
    text = address.strip()
    if not _ADDRESS.match(text):
        raise UsageError(f"--ray {address!r}: expected 'local' (a private cluster on this machine, loopback only), "
                         "'auto' (the cluster `ray start --head` started here) or HOST:PORT of a head node")
    if text not in ("local", "auto") and not 1 <= int(text.rsplit(":", 1)[1]) <= 65535:
        raise UsageError(f"--ray {address!r}: the port must be 1-65535 (Ray's head listens on 6379 by default)")
    return text


def _probe(address: str) -> str:
    """The ``host:port`` Ray connects to for ``address`` (``auto`` resolved, a loopback host mapped to the
    node's IP as Ray does), after checking that something accepts a TCP connection there within
    :data:`PROBE_TIMEOUT_S` (``ray.init`` itself retries an unreachable address for minutes).

    Raises:
        DiffbenchError: no cluster was found (``auto``) or nothing listens at the address.
    """
    import socket

    from ray._private import services

    try:
        resolved = (services.canonicalize_bootstrap_address_or_die(address) if address == "auto"
                    else services.canonicalize_bootstrap_address(address.removeprefix("ray://")))
    except (ConnectionError, ValueError) as exc:
        raise DiffbenchError(f"--ray {address}: no Ray cluster found ({exc}); start one with `ray start --head` "
                             "on the head node, or use --ray local") from None
    host, _, port = str(resolved).rpartition(":")
    if address == "auto" and (host.startswith("127.") or host.strip("[]") == "::1"):
        # `ray start --head` listens on the node's IP; a loopback-only GCS is a private cluster of another
        # process (another diffbench --ray local, a test suite): never join it
        raise DiffbenchError(f"--ray auto: the only Ray cluster found here ({resolved}) is another process's "
                             "private loopback cluster, not one `ray start --head` started; start one with "
                             "`ray start --head`, or use --ray local")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        mapped = f" (Ray's address for {address})" if resolved != address.removeprefix("ray://") else ""
        raise DiffbenchError(f"--ray {address}: nothing accepts connections at {resolved}{mapped} ({exc}); start "
                             "a cluster with `ray start --head` on the head node and give its address, or use "
                             "--ray local") from None
    return str(resolved)


def import_ray() -> Any:
    """Import ``ray``, for a local cluster on loopback only.

    Raises:
        MissingDependencyError: ray is not installed (names the extra to install).
    """
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError as exc:
        raise MissingDependencyError(f"--ray needs the ray extra ({exc}); install it with: {RAY_INSTALL}") from exc
    return ray


def thread_env(threads: int) -> dict[str, str]:
    """Environment variables that cap a worker's math libraries at ``threads`` threads (OpenMP, MKL, OpenBLAS),
    so that actors sharing a machine do not oversubscribe its cores."""
    n = str(threads)
    return {"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n, "TOKENIZERS_PARALLELISM": "false"}


def process_nice() -> int | None:
    """This process's nice value (-20..19; None where the OS has none): what an actor reports of its priority."""
    try:
        return os.nice(0)
    except (AttributeError, OSError):
        return None


def niceness_warning(actors: Iterable[tuple[str, int | None]], what: str) -> str | None:
    """The warning for actors that ran below normal priority, or None when every actor ran at nice <= 0.

    Args:
        actors: (node IP, nice value) of each actor of the run (None: not reported); a node is named with the
            highest nice value of its actors.
        what: what the actors measured (``"timings"``, ``"latencies"``), named in the message.
    """
    low: dict[str, int] = {}
    for ip, nice in actors:
        if nice is not None and nice > 0:
            low[ip] = max(low.get(ip, nice), nice)
    if not low:
        return None
    where = ", ".join(f"{ip} (nice {n})" for ip, n in sorted(low.items()))
    return (f"actors ran below normal priority on {where}: Ray starts workers at nice 15 (worker_niceness), so any "
            f"other work on those nodes takes most of their CPU and the {what} are slower than the deployment's; "
            "start each node with `RAY_worker_niceness=0 ray start ...` (or use --ray local, which does)")


def cluster_info(ray: Any, address: str, started_here: bool) -> ClusterInfo:
    """The alive nodes of the connected cluster."""
    nodes = [
        NodeInfo(node_id=str(n.get("NodeID", "")), ip=str(n.get("NodeManagerAddress", "")),
                 cpus=float(n.get("Resources", {}).get("CPU", 0.0)), gpus=float(n.get("Resources", {}).get("GPU", 0.0)))
        for n in ray.nodes() if n.get("Alive")
    ]
    return ClusterInfo(address=address, started_here=started_here, ray_version=str(ray.__version__), nodes=nodes)


@contextmanager
def connect(address: str, *, num_cpus: int | None = None, num_gpus: int | None = None) -> Iterator[ClusterInfo]:
    """Connect to (or, for ``local``, start) a Ray cluster for the duration of the block.

    A Ray session already open in this process (a test's cluster) is reused and left open.

    Args:
        address: ``local``, ``auto`` or ``[ray://]HOST:PORT`` (:func:`check_address`).
        num_cpus: CPUs a ``local`` cluster offers (default: the machine's).
        num_gpus: GPUs a ``local`` cluster offers (default: the ones Ray detects).

    Raises:
        UsageError: a malformed address, or ``num_cpus``/``num_gpus`` with a remote cluster.
        DiffbenchError: no cluster at that address (names ``ray start --head``).
        MissingDependencyError: ray is not installed.
    """
    address = check_address(address)
    if address == "local":
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # node IP 127.0.0.1: loopback only (module doc)
    ray = import_ray()
    if address == "local":
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False  # read at import: also when ray was imported before this call
    if ray.is_initialized():
        yield cluster_info(ray, address, started_here=False)
        return
    import logging

    # Ray 2.60 logs a WARNING on every start that token authentication is on (it stays on); keep stderr for errors
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    kwargs: dict[str, Any] = dict(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False,
                                  configure_logging=True)
    if address == "local":
        kwargs.update(num_cpus=num_cpus, num_gpus=num_gpus, _system_config={"worker_niceness": WORKER_NICENESS})
    elif num_cpus is not None or num_gpus is not None:
        raise UsageError(f"--ray {address}: the CPUs and GPUs of an existing cluster are set by `ray start`, not here")
    if address != "local":
        _probe(address)
    try:
        # the address as given: Ray reads the token of a token-authenticated cluster (~/.ray/auth_token) for
        # 'auto' only; an explicit address needs RAY_AUTH_MODE=token (Ray's token-auth docs)
        ray.init(address=address, **kwargs)
    except (ConnectionError, RuntimeError) as exc:
        auth = ("; if the cluster uses token authentication (Ray's default), set RAY_AUTH_MODE=token and put "
                "its token in ~/.ray/auth_token or RAY_AUTH_TOKEN" if address != "auto"
                and not os.environ.get("RAY_AUTH_MODE") else "")
        raise DiffbenchError(f"--ray {address}: no Ray cluster could be reached ({exc}); start one with "
                             f"`ray start --head` on the head node, or use --ray local{auth}") from None
    from diffbench.core import interrupt

    interrupt.install()  # ray.init set its own SIGTERM handler (sys.exit(15)): SIGTERM is Ctrl-C again
    try:
        yield cluster_info(ray, address, started_here=True)
    finally:
        ray.shutdown()


def default_actors(info: ClusterInfo, *, gpu: bool, cpus_per_actor: float) -> int:
    """One actor per GPU of the cluster for a CUDA device, else as many as its CPUs hold at ``cpus_per_actor``
    each (at least 1)."""
    if gpu:
        return max(1, int(info.gpus))
    return max(1, int(info.cpus // max(cpus_per_actor, 1e-9)))


@contextmanager
def actor_pool(cls: type, n: int, *, tag: str, args: tuple[Any, ...] = (), num_cpus: float = 1.0,
               num_gpus: float = 0.0, threads: int = 1,
               options: dict[str, Any] | None = None, asked: str | None = None,
               threads_option: str = "--threads") -> Iterator[list[Any]]:
    """``n`` Ray actors of ``cls`` (a plain class, made remote here), killed when the block ends.

    ``options``: further keyword arguments of ``.options()`` (e.g. ``scheduling_strategy="SPREAD"``).
    ``asked`` / ``threads_option``: how the error names what the user typed (default ``--ray-actors n``) and the
    option that sets threads per actor.

    Each actor is named ``diffbench-<tag>-<i>-<random>`` (found with ``ray.util.list_named_actors``) and runs with
    its math libraries capped at ``threads`` threads (:func:`thread_env`).

    Raises:
        UsageError: the cluster has not the free CPUs / GPUs for ``n`` actors (instead of waiting forever).
    """
    import time
    import uuid

    ray = import_ray()
    deadline = time.monotonic() + RELEASE_WAIT_S
    while True:  # actors killed just before (a previous pool) release their resources asynchronously
        free = ray.available_resources()
        short = [(what, per, have) for what, per, have in (("CPU", num_cpus, free.get("CPU", 0.0)),
                                                             ("GPU", num_gpus, free.get("GPU", 0.0)))
                 if per > 0 and n * per > have + 1e-9]
        if not short or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for what, per, have in short:
        raise UsageError(f"{asked or f'--ray-actors {n}'}: {n} actors need {n * per:g} {what}s and the cluster "
                         f"has {have:g} free; use fewer actors (or fewer {threads_option} per actor)")
    remote = ray.remote(cls)
    suffix = uuid.uuid4().hex[:6]
    handles = [
        remote.options(name=f"diffbench-{tag}-{i}-{suffix}", num_cpus=num_cpus, num_gpus=num_gpus,
                       max_restarts=0, runtime_env={"env_vars": thread_env(threads)},
                       **(options or {})).remote(*args)
        for i in range(n)
    ]
    try:
        yield handles
    finally:
        import contextlib

        for h in handles:
            with contextlib.suppress(Exception):  # already dead: nothing to release
                ray.kill(h, no_restart=True)
