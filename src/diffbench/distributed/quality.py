"""``diffbench quality --ray ADDRESS``: the per-pair work as Ray actors, merged on the driver.

The driver pairs the two directories (:func:`~diffbench.quality.pairing.pair_outputs`) once, cuts the pairs into
contiguous shards and hands them to ``N`` actors, each of which loads the metric models once
(:func:`~diffbench.quality.compare.load_scorers`), scores its shards with the single-process code
(:func:`~diffbench.quality.compare.score_pair`) and accumulates its own FID statistics
(:func:`~diffbench.quality.compare.accumulate`). The driver gets back, per shard, the per-pair outcomes (rows,
frames, pair errors, and the float64 feature rows KID needs: 8·d bytes per image, 16 KiB at d = 2048), and at the
end each actor's :class:`~diffbench.quality.distribution.FeatureStats` (2·(d + d²) float64 per side, 64 MiB at
d = 2048), merged with :meth:`~diffbench.quality.distribution.FeatureStats.merge`. The report is then assembled
by :func:`~diffbench.quality.compare.compare_dirs` exactly as in one process, from the outcomes in pairing order.

Every file path (outputs, ``--inception``, ``--lpips-backbone``, ``--clip`` ...) must be readable under the same
name on every node (a shared directory): the actors open them. Ray is imported only inside functions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from diffbench.quality.compare import _Outcome, accumulate, load_scorers, new_stats, score_pair
from diffbench.quality.distribution import FeatureExtractor, FeatureStats
from diffbench.quality.models import DistributedRun, QualityOptions
from diffbench.quality.pairing import PairSpec

SHARDS_PER_ACTOR = 4  # more shards than actors: a slow shard does not hold the others back, progress moves


class QualityActor:
    """One Ray actor: the scorers of a ``quality`` run, loaded once, and its share of the FID statistics.

    Args:
        opt: the run's options. pairing_mode: ``manifest`` | ``path`` (prompted scorers need manifests).
        threads: torch intra-op threads (results depend on it: the single-process run to compare with uses the
            same count). lpips_model, feature_extractor: models given to ``compare_dirs`` (shipped by value).
    """

    def __init__(self, opt: QualityOptions, pairing_mode: str, threads: int, lpips_model: Callable | None = None,
                 feature_extractor: FeatureExtractor | None = None) -> None:
        import torch

        torch.set_num_threads(threads)
        self.opt = opt
        self.sc = load_scorers(opt, pairing_mode, lpips_model, feature_extractor)
        self.st_b, self.st_c = new_stats(self.sc)

    def node_ip(self) -> str:
        """The IP of the node this actor runs on."""
        import ray

        return str(ray.util.get_node_ip_address())

    def score(self, specs: list[PairSpec]) -> list[_Outcome]:
        """Outcomes of ``specs`` in their order; their features are added to this actor's statistics."""
        outs = []
        for spec in specs:
            out = score_pair(spec, self.opt, self.sc)
            accumulate(out, self.st_b, self.st_c)
            outs.append(out)
        return outs

    def stats(self) -> tuple[FeatureStats | None, FeatureStats | None]:
        """This actor's FID statistics of both sides (None without ``--fid``)."""
        return self.st_b, self.st_c


def shards(n_pairs: int, actors: int) -> list[tuple[int, int]]:
    """Contiguous ``[start, stop)`` ranges covering ``n_pairs``: about ``SHARDS_PER_ACTOR`` per actor, sizes
    differing by at most one."""
    k = max(1, min(n_pairs, actors * SHARDS_PER_ACTOR))
    q, r = divmod(n_pairs, k)
    out, start = [], 0
    for i in range(k):
        stop = start + q + (1 if i < r else 0)
        out.append((start, stop))
        start = stop
    return [s for s in out if s[1] > s[0]]


class RayPairs:
    """A :class:`~diffbench.quality.compare.PairExecutor` on a connected Ray cluster.

    Args:
        info: the cluster (:func:`diffbench.distributed.cluster.connect`). actors: how many (None: as many as the
            cluster's CPUs hold at ``threads`` each). threads: CPUs and torch threads per actor.

    Raises (from :meth:`outcomes`):
        UsageError: the cluster lacks the CPUs for the actors. ActorDied: an actor died mid-run (exit 5).
    """

    def __init__(self, info: Any, actors: int | None = None, threads: int = 1) -> None:
        from diffbench.distributed.cluster import default_actors

        self.info = info
        self.threads = threads
        self.actors = actors if actors is not None else default_actors(info, gpu=False, cpus_per_actor=threads)
        self._stats: tuple[FeatureStats | None, FeatureStats | None] = (None, None)
        self._nodes: list[str] = []
        self._shards = 0

    def outcomes(self, specs: Sequence[PairSpec], opt: QualityOptions, pairing_mode: str,
                 lpips_model: Callable | None, feature_extractor: FeatureExtractor | None) -> Iterator[_Outcome]:
        """Outcomes in the order of ``specs`` (each shard yielded once it and all before it are back)."""
        from diffbench.distributed.cluster import ActorDied, actor_pool, import_ray

        ray = import_ray()
        specs = list(specs)
        cuts = shards(len(specs), self.actors)
        self._shards = len(cuts)
        if not cuts:  # nothing to score (every pair failed at pairing): no actors started
            self.actors = 0
            return
        n = max(1, min(self.actors, len(cuts)))
        self.actors = n
        args = (opt, pairing_mode, self.threads, lpips_model, feature_extractor)
        with actor_pool(QualityActor, n, tag="quality", args=args, num_cpus=self.threads,
                        threads=self.threads) as pool:
            try:
                self._nodes = sorted(set(ray.get([a.node_ip.remote() for a in pool])))
                done: dict[int, list[_Outcome]] = {}
                running: dict[Any, tuple[int, Any]] = {}
                todo = list(range(len(cuts)))
                idle = list(pool)
                nxt = 0
                while todo or running:
                    while todo and idle:  # at most one shard per actor in flight: free actors take the next one
                        i, a = todo.pop(0), idle.pop(0)
                        running[a.score.remote(specs[cuts[i][0]:cuts[i][1]])] = (i, a)
                    ready, _ = ray.wait(list(running), num_returns=1)
                    for ref in ready:
                        i, a = running.pop(ref)
                        done[i] = ray.get(ref)
                        idle.append(a)
                    while nxt in done:
                        yield from done.pop(nxt)
                        nxt += 1
                parts = ray.get([a.stats.remote() for a in pool])
            except ray.exceptions.RayActorError as exc:
                raise ActorDied(f"a quality actor died during the run ({exc.__class__.__name__}); rerun the "
                                "command (pairs are scored again: quality keeps no partial state)") from None
        self._stats = _merge(parts)

    def stats(self) -> tuple[FeatureStats | None, FeatureStats | None]:
        return self._stats

    def describe(self) -> DistributedRun:
        return DistributedRun(address=self.info.address, actors=self.actors, threads_per_actor=self.threads,
                              shards=self._shards, nodes=self._nodes, cluster_nodes=len(self.info.nodes),
                              ray_version=self.info.ray_version)


def _merge(parts: list[tuple[FeatureStats | None, FeatureStats | None]]
           ) -> tuple[FeatureStats | None, FeatureStats | None]:
    """Sum the actors' statistics per side (compensated: the order does not change the result)."""
    merged: list[FeatureStats | None] = []
    for side in (0, 1):
        got = [p[side] for p in parts if p[side] is not None]
        if not got:
            merged.append(None)
            continue
        total = FeatureStats(got[0].dim, keep=False)  # type: ignore[union-attr]
        for st in got:
            total.merge(st)  # type: ignore[arg-type]
        merged.append(total)
    return merged[0], merged[1]
