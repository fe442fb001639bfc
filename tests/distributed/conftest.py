"""One private Ray cluster on loopback (2 CPUs) for the whole test session: starting Ray takes seconds, so the
distributed tests share it; every command run in-process reuses it (``connect`` leaves an open session open)
and removes the actors it created."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    """The session's local Ray cluster (:class:`~diffbench.distributed.cluster.ClusterInfo`). Skips without the
    ray extra, except under CI (``CI`` set), where a missing extra fails."""
    if os.environ.get("CI"):
        import ray  # noqa: F401  (CI installs the ray extra: a missing one must fail, not skip)
    else:
        pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e '.[ray]')")
    from diffbench.distributed.cluster import connect

    with connect("local", num_cpus=2) as info:
        yield info
