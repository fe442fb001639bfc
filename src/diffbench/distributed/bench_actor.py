"""The engine actor of the distributed bench: one engine on one device (see :mod:`diffbench.distributed.bench`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from diffbench.bench.protocol import BenchConfig, ShapeRun, make_attempt, repro_result, timed_run, warm_up
from diffbench.bench.result import Note, WorkerInfo
from diffbench.distributed.bench_tasks import BenchTask
from diffbench.distributed.cluster import import_ray, process_nice
from diffbench.distributed.taskstore import TaskRecord, TaskStore, pack
from diffbench.engines.base import GenerationRequest, GenerationResult
from diffbench.engines.config import EngineConfig


class BenchActor:
    """An engine on one device (a Ray actor): warms each shape up on first use, runs tasks, writes their outputs
    and records to the shared directory."""

    def __init__(self, engine: EngineConfig, threads: int, out_dir: str, inputs: dict[str, str]):
        # Ray gives a GPU actor one device (CUDA_VISIBLE_DEVICES): it is cuda:0 inside the actor, whatever index was asked
        device = "cuda" if engine.device.startswith("cuda") else engine.device
        self.cfg_engine = engine.model_copy(update={"threads": threads, "device": device})
        self.threads, self.dir, self.inputs, self.index = threads, Path(out_dir), inputs, 0
        self.groups: list[list[GenerationRequest]] = []
        self.cfg = BenchConfig()
        self.runs: dict[int, ShapeRun] = {}
        self.attempts: dict[int, Any] = {}

    def start(self, index: int) -> dict[str, Any]:
        """Start the engine as actor ``index``; return its info, this worker's description and the deployment
        fingerprint (captured on this actor's node: its GPU and driver)."""
        import os

        self.index = index

        from diffbench.bench.session import engine_fingerprint
        from diffbench.core.clock import Timer
        from diffbench.core.env import capture_env
        from diffbench.engines.registry import create_engine

        self.engine = create_engine(self.cfg_engine)
        self.info = self.engine.start()
        self.timer = Timer(sync=self.engine.sync, clock=self.engine.clock)
        from diffbench.engines.instrument.energy import EnergyTally, meter_for

        self.energy = EnergyTally(meter_for(self.info.engine, self.info.device))  # this actor's device counter
        env = capture_env()
        gpu = self.info.device.startswith("cuda")
        hardware = ", ".join(g.name for g in env.gpus) if gpu else env.cpu
        ray = import_ray()
        worker = WorkerInfo(index=self.index, node_ip=ray.util.get_node_ip_address(), pid=os.getpid(),
                            device=self.info.device, device_class=f"{hardware} (driver {env.driver})" if gpu else hardware,
                            driver=env.driver, threads=self.threads, nice=process_nice())
        self.store = TaskStore(self.dir)
        return {"info": self.info, "worker": worker, "env": env,
                "fingerprint": engine_fingerprint(self.engine, self.info, env)}

    def validate(self, requests: list[GenerationRequest]) -> None:
        """Check every request against the model (ShapeError for one it cannot take)."""
        for r in requests:
            self.engine.validate(r)

    def set_workload(self, groups: list[list[GenerationRequest]], cfg: BenchConfig) -> None:
        """The workload grouped by shape (as :func:`~diffbench.bench.protocol.group_by_shape`) and the protocol."""
        self.groups, self.cfg = groups, cfg

    def run(self, task: BenchTask) -> TaskRecord:
        """Run ``task`` (after this actor's warmup of its shape), write its outputs, then its record."""
        from diffbench.bench.outputs import save_images

        group = self.groups[task.shape]
        warm: list[float] = []
        notes: list[Note] = []
        if task.shape not in self.runs:
            run = self.runs[task.shape] = ShapeRun(group[0])
            self.attempts[task.shape] = make_attempt(self.engine, run.result)
            warm_up(self.attempts[task.shape], self.timer, group, self.cfg, run.result)
            warm, notes = list(run.result.warmup_s), list(run.result.warnings)
        run, attempt = self.runs[task.shape], self.attempts[task.shape]
        failed_before = len(run.result.failed_runs)
        req = group[task.request]
        data: dict[str, Any] = {"phase": task.phase, "run": task.run, "warmup_s": warm,
                                "notes": [n.model_dump() for n in notes]}
        res: GenerationResult | None
        if task.phase == "timed":
            mark = self.energy.begin()
            timed = timed_run(attempt, self.engine, self.timer, task.run, req)
            res = timed[1] if timed else None
            if timed is not None:
                window = self.energy.end(mark)  # read after the run's final synchronization, as bench does
                data["energy"] = ({"joules": window[0], "seconds": window[1]} if isinstance(window, tuple)
                                  else {"unavailable": window.reason})
                data["energy"].update(source=self.energy.meter.source, scope=self.energy.meter.scope)
                e2e, got, pending = timed
                slim = GenerationResult(images=None, stages=got.stages, memory=got.memory, extra=dict(got.extra),
                                        signals=got.signals)
                data.update(e2e_s=e2e, pending_s=pending, result=pack(slim))
        else:
            res = attempt("output", 0, req)
            self.engine.sync()
        data["failed"] = [f.model_dump() for f in run.result.failed_runs[failed_before:]]
        files: dict[str, str] = {}
        if task.save and res is not None and res.images is not None:
            entries = save_images(self.dir, req, res.images, self.inputs)
            files = {e.file: e.sha256 for e in entries}
            data["entries"] = [e.model_dump(mode="json") for e in entries]
        import os

        record = TaskRecord(id=task.id, kind="bench", files=files, data=data,
                            worker={"index": self.index, "pid": os.getpid()})
        self.store.write(record)
        return record

    def regenerate(self, shape: int, request: int) -> np.ndarray | None:
        """The images of one request generated again (the reproducibility check)."""
        res = self.engine.generate(self.groups[shape][request])
        self.engine.sync()
        return res.images

    def repro_result(self, cfg: BenchConfig, prompt_id: str, seed: int, psnr: float | None) -> Any:
        """The :class:`~diffbench.bench.result.ReproResult` of this actor's engine for a PSNR (dB)."""
        return repro_result(self.engine, cfg, prompt_id, seed, psnr)

    def load(self) -> tuple[float, int] | None:
        """This node's 1-minute load average and CPU count (None where ``os.getloadavg`` is unavailable)."""
        import os

        try:
            return float(os.getloadavg()[0]), int(os.cpu_count() or 1)
        except (AttributeError, OSError):
            return None

    def stop(self) -> None:
        """Stop the engine (release the device)."""
        self.engine.stop()


