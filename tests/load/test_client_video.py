"""Async video jobs: create, poll, download; a job that never completes times out and is not deleted."""

from __future__ import annotations

import asyncio
import json

import pytest

from diffbench.load.client import HttpBackend, RequestPlanner, Target, Workload, run_open_loop
from diffbench.queueing.schedules import constant

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]


def _video(url: str, *, timeout: float, n: int = 2, delete_abandoned: bool = False, dialect="vllm-omni"):
    async def go():
        backend = HttpBackend(Target(base_url=url, timeout_s=timeout, poll_interval_s=0.05,
                                     delete_abandoned=delete_abandoned, dialect=dialect))
        await backend.start()
        try:
            wl = Workload.model_validate({"kind": "video", "shapes": [{"size": "64x48", "steps": 2, "frames": 5}]})
            times = constant(10.0, n / 10.0)
            planner = RequestPlanner(wl, ["a wave"], seed=0)
            return await run_open_loop(times, planner.take(len(times)), backend, offered_rate=10.0,
                                       duration_s=n / 10.0), backend
        finally:
            await backend.close()

    return asyncio.run(go())


@pytest.mark.parametrize("dialect", ["vllm-omni", "sglang", "openai"])
def test_video_job_completes_after_polling(fake, dialect):
    fake.video_s = 0.3
    run, _ = _video(fake.url("vid"), timeout=5.0, dialect=dialect)
    assert [r.outcome for r in run.records] == ["ok", "ok"]
    for r in run.records:
        lat = r.latency_from_send_s
        # done after the job finished (0.3 s) and within one poll interval (0.05 s) plus overheads
        assert 0.3 <= lat <= 0.3 + 0.05 + 0.1
        assert r.server_stages_s == {"denoise": 0.2}
    assert fake.polls >= 2 * 5  # ~0.3 / 0.05 polls per job
    ctype = fake.create_headers["content-type"]
    if dialect == "sglang":  # JSON, as SGLang takes it
        assert ctype == "application/json" and json.loads(fake.create_body)["num_frames"] == 5
    else:  # a multipart form with a Content-Length (not chunked), as the videos API takes it
        assert ctype.startswith("multipart/form-data; boundary=")
        assert int(fake.create_headers["content-length"]) == len(fake.create_body)
        assert b'name="size"\r\n' in fake.create_body and b"\r\n\r\n64x48\r\n" in fake.create_body
        assert (b'name="num_frames"' in fake.create_body) == (dialect == "vllm-omni")  # openai: not sent


def test_video_job_never_completing_times_out_and_is_not_deleted(fake):
    run, backend = _video(fake.url("vidstuck"), timeout=0.5)
    assert [r.outcome for r in run.records] == ["timeout", "timeout"]
    assert all("left on the server (not deleted)" in (r.error or "") for r in run.records)
    assert fake.deleted == []
    assert len(backend.abandoned_jobs) == 2


def test_delete_abandoned_deletes_only_when_asked(fake):
    run, backend = _video(fake.url("vidstuck"), timeout=0.5, delete_abandoned=True)
    assert [r.outcome for r in run.records] == ["timeout", "timeout"]
    assert sorted(fake.deleted) == sorted(backend.deleted_jobs) and len(fake.deleted) == 2


@pytest.mark.parametrize("mode, outcome, error", [
    ("vidmp4", "ok", None),
    ("vidmp4short", "invalid_payload", "video has 4 frames, requested 5"),
    ("vidjobwrong", "invalid_payload", "video job reports 9 frames, requested 5"),
    ("vidblack", "invalid_payload", "frame 0: black_frame: all black"),
])
def test_video_with_another_frame_count_is_invalid_payload(fake, mode, outcome, error):
    pytest.importorskip("av")
    fake.video_s = 0.05
    run, _ = _video(fake.url(mode), timeout=10.0)
    assert [r.outcome for r in run.records] == [outcome, outcome]
    if error:
        assert all(error in r.error for r in run.records)
    if mode == "vidblack":  # decoded in the checker processes: every frame of the fake's clip is black
        assert {r.invalid_kind for r in run.records} == {"black_frame"}
    if mode == "vidmp4":  # each job's clip is tinted apart: two pixel hashes
        assert len({r.answer_hashes[0] for r in run.records}) == 2


def test_openai_dialect_labels_do_not_claim_steps_or_frames(fake):
    run, _ = _video(fake.url("vid"), timeout=5.0, dialect="openai")
    # openai sends neither steps nor frames (no fps given: no seconds either): the label is the size only
    assert {r.shape for r in run.records} == {"64x48"}
    run, _ = _video(fake.url("vid"), timeout=5.0, dialect="vllm-omni")
    assert {r.shape for r in run.records} == {"64x48 f5 s2"}


def test_adaptive_polling_states_its_granularity_and_the_latency_stays_within_it(fake):
    """Issue 24 item 14: a job of a known time (the fake finishes it ``video_s`` after the create) is measured
    within the granularity each record states, plus the create's round trip (when the job started on the
    server is only known to lie between the send and the create answer):
    video_s <= latency from send <= video_s + poll_granularity_s + (first_byte_s - sent_s)."""
    from diffbench.load.summary import summarize_rate

    fake.video_s = 0.3

    async def go():
        backend = HttpBackend(Target(base_url=fake.url("vid"), timeout_s=5.0))  # default polling
        await backend.start()
        try:
            wl = Workload.model_validate({"kind": "video", "shapes": [{"size": "64x48", "steps": 2, "frames": 5}]})
            times = constant(10.0, 0.2)
            return await run_open_loop(times, RequestPlanner(wl, ["a wave"], seed=0).take(len(times)), backend,
                                       offered_rate=10.0, duration_s=0.2)
        finally:
            await backend.close()

    run = asyncio.run(go())
    assert [r.outcome for r in run.records] == ["ok", "ok"]
    for r in run.records:
        g = r.poll_granularity_s
        assert g is not None and 0 < g < r.latency_from_send_s
        assert fake.video_s <= r.latency_from_send_s <= fake.video_s + g + (r.first_byte_s - r.sent_s)
    row = summarize_rate(run.records, offered_rate=10.0, duration_s=0.2)
    assert row.poll_granularity_s == max(r.poll_granularity_s for r in run.records)
