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

import contextlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from diffbench.distributed.taskstore import TaskRecord, TaskStore, pack, task_id, unpack
from diffbench.quality.compare import PairOutcome, accumulate, load_scorers, new_stats, score_pair
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

    def score(self, specs: list[PairSpec]) -> list[PairOutcome]:
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

    def __init__(self, info: Any, actors: int | None = None, threads: int = 1, state: Path | None = None) -> None:
        from diffbench.distributed.cluster import default_actors

        self.info = info
        self.threads = threads
        self.state = state
        self._resumed = 0
        self.actors = actors if actors is not None else default_actors(info, gpu=False, cpus_per_actor=threads)
        self._asked = (f"--ray-actors {actors}" if actors is not None
                       else f"--ray-actors (default: the cluster's {info.cpus:g} CPUs / --ray-threads {threads})")
        self._stats: tuple[FeatureStats | None, FeatureStats | None] = (None, None)
        self._nodes: list[str] = []
        self._shards = 0

    def outcomes(self, specs: Sequence[PairSpec], opt: QualityOptions, pairing_mode: str,
                 lpips_model: Callable | None, feature_extractor: FeatureExtractor | None) -> Iterator[PairOutcome]:
        """Outcomes in the order of ``specs`` (each shard yielded once it and all before it are back)."""
        from diffbench.distributed.cluster import ActorDied, actor_pool, import_ray

        ray = import_ray()
        all_specs = list(specs)
        store = TaskStore(self.state) if self.state is not None else None
        ids = pair_task_ids(all_specs, opt, lpips_model, feature_extractor) if store is not None else []
        stored: dict[int, PairOutcome] = {}
        if store is not None:
            for i, tid in enumerate(ids):
                rec = store.done(tid)
                if rec is not None:
                    with contextlib.suppress(ValueError):  # a corrupt or foreign record: score the pair again
                        stored[i] = unpack(rec.data.get("outcome"))
        self._resumed = len(stored)
        todo_idx = [i for i in range(len(all_specs)) if i not in stored]
        specs = [all_specs[i] for i in todo_idx]
        # resumed pairs' features go into driver-side statistics, merged with the actors' (compensated sums: the
        # grouping does not change the result)
        res_b: FeatureStats | None = None
        res_c: FeatureStats | None = None
        for out in stored.values():
            if opt.fid and out.feats is not None and res_b is None:
                dim = int(out.feats[0].shape[1])
                res_b, res_c = FeatureStats(dim, keep=False), FeatureStats(dim, keep=False)
            accumulate(out, res_b, res_c)
        cuts = shards(len(specs), self.actors)
        self._shards = len(cuts)
        if not cuts:  # nothing (left) to score: no actors started
            self.actors = 0
            yield from (stored[i] for i in range(len(all_specs)))
            self._stats = _merge([(res_b, res_c)])
            return
        rest = deque(range(len(all_specs)))  # pairing order, not yet yielded: stored ones wait for their place
        kept = [len(stored)]
        n = max(1, min(self.actors, len(cuts)))
        asked = self._asked + (f" ({n} used: one per shard of {len(specs)} pair(s))" if n < self.actors else "")
        self.actors = n
        args = (opt, pairing_mode, self.threads, lpips_model, feature_extractor)
        with actor_pool(QualityActor, n, tag="quality", args=args, num_cpus=self.threads,
                        threads=self.threads, asked=asked, threads_option="--ray-threads") as pool:
            try:
                self._nodes = sorted(set(ray.get([a.node_ip.remote() for a in pool])))
                done: dict[int, list[PairOutcome]] = {}
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
                        if store is not None:  # each finished pair is kept at once: a death loses none of it
                            for j, out in zip(range(*cuts[i]), done[i], strict=True):
                                store.write(TaskRecord(id=ids[todo_idx[j]], kind="quality-pair",
                                                       data={"key": specs[j].key, "outcome": pack(out)}))
                                kept[0] += 1
                    while nxt in done:  # pairing order: a stored pair is yielded where it stands
                        for j, out in zip(range(*cuts[nxt]), done.pop(nxt), strict=True):
                            g = todo_idx[j]
                            while rest[0] < g:  # every index before g still waiting is a stored pair
                                yield stored[rest.popleft()]
                            rest.popleft()
                            yield out
                        nxt += 1
                parts = ray.get([a.stats.remote() for a in pool])
            except ray.exceptions.RayActorError as exc:
                what = (f"{kept[0]} of {len(all_specs)} pairs are scored and kept in {self.state}; rerun the same "
                        "command to score only the rest") if store is not None else \
                    "rerun the command (pairs are scored again; --ray-state DIR keeps scored pairs for a rerun)"
                raise ActorDied(f"a quality actor died during the run ({exc.__class__.__name__}); {what}") from None
        yield from (stored[k] for k in rest)  # stored pairs after the last shard
        self._stats = _merge([*parts, (res_b, res_c)])

    def stats(self) -> tuple[FeatureStats | None, FeatureStats | None]:
        return self._stats

    def describe(self) -> DistributedRun:
        return DistributedRun(address=self.info.address, actors=self.actors, threads_per_actor=self.threads,
                              shards=self._shards, resumed=self._resumed,
                              state=str(self.state) if self.state is not None else None, nodes=self._nodes, cluster_nodes=len(self.info.nodes),
                              ray_version=self.info.ray_version)




def _weights_identity(path: Path | None) -> object:
    """A weight file or folder as (path, bytes, mtime ns): a changed file changes the ids (cheap: no hashing)."""
    if path is None:
        return None
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return str(p)
    return [str(p.resolve()), st.st_size, st.st_mtime_ns]


def pair_task_ids(specs: Sequence[PairSpec], opt: QualityOptions, lpips_model: Callable | None,
                  feature_extractor: FeatureExtractor | None) -> list[str]:
    """A deterministic id per pair (``--ray-state``): the pair's key, the sha256 of both files (or frame folders)
    and every setting that decides its scores (metric options, weight files as path + size + mtime, given models
    by name); an edited output or another setting gives another id, so it is scored again."""
    from diffbench.quality.pairing import sha256_of

    settings = opt.model_dump(mode="json", exclude={"workers", "worst", "allow_missing", "verify_sha256"})
    settings["weights"] = [_weights_identity(w) for w in (opt.lpips_backbone, opt.inception, opt.clip, opt.pickscore,
                                                          opt.clip_iqa)]
    settings["models"] = [getattr(m, "description", None) or getattr(m, "name", None) or type(m).__name__
                          if m is not None else None for m in (lpips_model, feature_extractor)]
    out = []
    for spec in specs:
        shas = [sha256_of(p) if Path(p).exists() else "missing" for p in (spec.baseline, spec.candidate)]
        out.append(task_id("quality-pair", {"settings": settings, "key": spec.key, "prompt": spec.prompt,
                                             "sha256": shas}))
    return out


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
