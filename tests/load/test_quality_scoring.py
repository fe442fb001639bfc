"""``load --reference``: the quality floors of ``--goodput``, the replay schedule, scoring in the checker
processes and the per-row quality, each against an independent computation (scikit-image, numpy, records)."""

from __future__ import annotations

import base64
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from diffbench.core.records import RequestRecord
from diffbench.errors import UsageError
from diffbench.load.client.scoring import PSNR_IDENTICAL_DB, score_images
from diffbench.load.client.workload import ReferenceRequest, RequestPlanner, default_workload
from diffbench.load.goodput import (
    GoodputConstraint,
    QualityFloor,
    count_good,
    count_quality_good,
    parse_goodput_floors,
)
from diffbench.load.scored import quality_row
from diffbench.load.spec import LoadSpec

PIL = pytest.importorskip("PIL.Image")


def _png(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    PIL.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def _body(*arrays: np.ndarray) -> bytes:
    return json.dumps({"data": [{"b64_json": base64.b64encode(_png(a)).decode()} for a in arrays]}).encode()


def test_floors_parse_beside_time_constraints() -> None:
    cons, floors = parse_goodput_floors("latency:3 psnr:30 SSIM:0.9")
    assert cons == [GoodputConstraint(name="latency", max_s=3.0)]
    assert floors == [QualityFloor(name="psnr", min=30.0), QualityFloor(name="ssim", min=0.9)]
    assert parse_goodput_floors(["psnr:25"]) == ([], [QualityFloor(name="psnr", min=25.0)])


@pytest.mark.parametrize(("text", "fragment"), [
    ("psnr:-1", "positive finite number of dB"), ("ssim:1.5", "SSIM in (0, 1]"), ("psnr:x", "psnr:30"),
    ("psnr:30 psnr:31", "given twice"), ("latency:3 sharpness:2", "unknown constraint"),
])
def test_bad_floors_name_the_flag(text: str, fragment: str) -> None:
    with pytest.raises(UsageError) as exc:
        parse_goodput_floors(text)
    assert "--goodput" in str(exc.value) and fragment in str(exc.value)


@pytest.mark.parametrize(("given", "fragment"), [
    ({"goodput": ["psnr:30"]}, "--reference"),
    ({"quality_sample": 0.5}, "--reference"),
])
def test_quality_options_need_a_reference(given: dict[str, object], fragment: str) -> None:
    with pytest.raises(UsageError) as exc:
        LoadSpec(**given)
    assert fragment in str(exc.value)


@pytest.mark.parametrize("bad", [0.0, 1.5, -0.2, math.inf])
def test_quality_sample_outside_unit_interval_is_refused(bad: float) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as exc:
        LoadSpec(reference="refs", quality_sample=bad)
    assert "(0, 1]" in str(exc.value)


def _ref(label: str, seed: int) -> ReferenceRequest:
    return ReferenceRequest(label=label, prompt=f"prompt {label}", seed=seed, width=32, height=32, steps=3,
                            files=("/nowhere.png",))


@pytest.mark.parametrize(("sample", "expected"), [(None, 12), (1.0, 12), (0.25, 3), (0.5, 6), (1 / 3, 4)])
def test_a_fraction_of_the_schedule_replays_references_in_turn(sample: float | None, expected: int) -> None:
    refs = [_ref("a", 1), _ref("b", 2)]
    specs = RequestPlanner(default_workload(), ["w"], seed=0, references=refs, sample=sample).take(12)
    replayed = [s for s in specs if s.reference is not None]
    assert len(replayed) == expected  # floor(12 * F)
    assert [s.reference.label for s in replayed] == [("a", "b")[k % 2] for k in range(expected)]  # type: ignore[union-attr]
    assert all(s.prompt == s.reference.prompt and s.seed == s.reference.seed  # type: ignore[union-attr]
               and (s.shape.width, s.shape.steps, s.shape.n) == (32, 3, 1) for s in replayed)
    assert [s.index for s in specs] == list(range(12))


@pytest.mark.parametrize("sample", [None, 0.5])
def test_the_warm_up_sends_each_reference_key_and_leaves_the_turns_alone(sample: float | None) -> None:
    """The references' own keys (32x32 s3, and a 2-image batch) are warmed; the workload's shape only when some
    requests are the workload's; warming takes no reference turn and no extra random draw."""
    from diffbench.load.client.workload import Workload

    refs = [_ref("a", 1), _ref("b", 2).model_copy(update={"files": ("/x.png", "/y.png")})]
    wl = Workload(shapes=[{"size": "64x64", "steps": 2, "weight": 1}, {"size": "48x48", "steps": 2, "weight": 1}])
    planner = RequestPlanner(wl, ["w"], seed=0, references=refs, sample=sample)
    keys = planner.warmup_keys()
    labels = [shape.label() for shape, _ in keys]
    assert labels == ([] if sample is None else ["64x64 s2", "48x48 s2"]) + ["32x32 s3", "32x32 s3 n2"]
    warmed = [planner.warm_spec(shape, ref) for shape, ref in keys]
    assert [w.reference is not None for w in warmed] == [ref is not None for _, ref in keys]
    after = planner.take(8)
    plain = RequestPlanner(wl, ["w"], seed=0)  # without references: the measured draws are those of a planner
    for shape, _ in plain.warmup_keys():  # whose warm-up took one next() per key (the earlier path)
        plain.warm_spec(shape)
    old = RequestPlanner(wl, ["w"], seed=0)
    old.take(len(plain.warmup_keys()))
    assert [(s.index, s.seed, s.shape) for s in plain.take(8)] == [(s.index, s.seed, s.shape) for s in old.take(8)]
    replayed = [s.reference.label for s in after if s.reference is not None]
    assert replayed[:2] == ["a", "b"]  # the first measured reference request is the first reference


def test_scores_match_scikit_image_worst_of_batch(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    refs = [rng.integers(0, 256, (40, 48, 3), dtype=np.uint8) for _ in range(2)]
    answers = [np.clip(r.astype(np.int16) + rng.integers(-k, k + 1, r.shape), 0, 255).astype(np.uint8)
               for r, k in zip(refs, (6, 30), strict=True)]
    files = []
    for i, r in enumerate(refs):
        p = tmp_path / f"r{i}.png"
        p.write_bytes(_png(r))
        files.append(str(p))
    v = score_images(_body(*answers), 48, 40, 2, False, None, files)
    assert v.ok and v.quality is not None
    want_psnr = min(peak_signal_noise_ratio(r, a, data_range=255) for r, a in zip(refs, answers, strict=True))
    want_ssim = min(structural_similarity(r, a, data_range=255, channel_axis=2, gaussian_weights=True, sigma=1.5,
                                          use_sample_covariance=False) for r, a in zip(refs, answers, strict=True))
    assert v.quality["psnr_db"] == pytest.approx(want_psnr, abs=1e-9)
    assert v.quality["ssim"] == pytest.approx(want_ssim, abs=1e-4)
    same = score_images(_body(*refs), 48, 40, 2, False, None, files)
    assert same.quality == {"psnr_db": PSNR_IDENTICAL_DB, "ssim": pytest.approx(1.0)}
    wrong = score_images(_body(refs[0]), 48, 40, 2, False, None, files)
    assert not wrong.ok and wrong.quality is None


def _rec(i: int, *, psnr: float | None, latency: float, ok: bool = True, ref: bool = True) -> RequestRecord:
    return RequestRecord(id=i, intended_s=float(i), sent_s=float(i), done_s=i + latency,
                         outcome="ok" if ok else "timeout", reference="r" if ref else None, psnr_db=psnr,
                         ssim=None if psnr is None else min(1.0, psnr / 50))


def test_quality_goodput_and_row_recounted_from_records() -> None:
    rng = np.random.default_rng(2)
    recs = []
    for i in range(60):
        ref = i % 3 != 0
        ok = rng.random() > 0.1
        psnr = float(rng.uniform(20, 45)) if (ref and ok) else None
        recs.append(_rec(i, psnr=psnr, latency=float(rng.uniform(0.5, 5)), ok=ok, ref=ref))
    cons, floors = parse_goodput_floors("latency:3 psnr:30")
    q = count_quality_good(recs, cons, floors)
    refs = [r for r in recs if r.reference]
    good = sum(1 for r in refs if r.outcome == "ok" and r.done_s - r.intended_s <= 3  # type: ignore[operator]
               and r.psnr_db is not None and r.psnr_db >= 30)
    assert (q.n, q.n_good) == (len(refs), good)
    from scipy.stats import beta

    assert q.ci_low == pytest.approx(beta.ppf(0.025, good, len(refs) - good + 1))
    assert q.ci_high == pytest.approx(beta.ppf(0.975, good + 1, len(refs) - good))
    # the latency goodput over all requests ignores the floors
    assert count_good(recs, cons).n_good == sum(1 for r in recs if r.outcome == "ok"
                                                 and r.done_s - r.intended_s <= 3)  # type: ignore[operator]
    row = quality_row(recs, cons, floors)
    assert row is not None
    scores = np.array([r.psnr_db for r in refs if r.psnr_db is not None])
    assert row.n_reference == len(refs) and row.n_scored == scores.size
    assert row.psnr_p50_db == pytest.approx(float(np.median(scores)))
    assert row.psnr_p10_db == pytest.approx(float(np.quantile(scores, 0.1)))
    assert row.psnr_worst_db == pytest.approx(float(scores.min()))
    assert row.fraction_under_gate == pytest.approx(float((scores < 30).sum() / scores.size))
    assert quality_row([_rec(0, psnr=None, latency=1, ref=False)]) is None


@pytest.mark.parametrize("make", ["missing", "empty", "not_json"])
def test_reference_that_is_not_a_manifest_is_an_error_naming_the_flag(tmp_path: Path, make: str,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from diffbench.cli.main import main

    d = tmp_path / "refs"
    if make != "missing":
        d.mkdir()
    if make == "not_json":
        (d / "manifest.json").write_text("{not json")
    code = main(["load", "--url", "http://127.0.0.1:9", "--reference", str(d), "--rates", "1", "--duration", "1"])
    err = capsys.readouterr().err
    assert code == 2
    assert ("--reference" in err) if make != "not_json" else ("manifest.json" in err)


def test_quality_line_prints_the_row_figures() -> None:
    from diffbench.load.summary import summarize_rate
    from diffbench.report.load_table import quality_line

    cons, floors = parse_goodput_floors("latency:3 psnr:30")
    recs = [_rec(i, psnr=p, latency=1.0) for i, p in enumerate([200.0, 35.0, 25.0, 31.0])]
    row = summarize_rate(recs, offered_rate=1.0, duration_s=4.0, goodput=cons)
    row = row.model_copy(update={"quality": quality_row(recs, cons, floors)})
    line = quality_line(row)
    assert "4 scored of 4" in line and "worst 25.00 dB" in line and "25% under 30 dB" in line
    assert "quality goodput 3/4 = 75%" in line


def test_chat_answers_are_scored_like_image_answers(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    ref = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
    ans = np.clip(ref.astype(np.int16) + rng.integers(-9, 10, ref.shape), 0, 255).astype(np.uint8)
    path = tmp_path / "r.png"
    path.write_bytes(_png(ref))
    url = "data:image/png;base64," + base64.b64encode(_png(ans)).decode()
    body = json.dumps({"choices": [{"message": {"content": [{"type": "image_url", "image_url": {"url": url}}]}}]})
    v = score_images(body.encode(), 32, 32, 1, True, None, [str(path)])
    assert v.ok and v.quality is not None
    assert v.quality["psnr_db"] == pytest.approx(peak_signal_noise_ratio(ref, ans, data_range=255), abs=1e-9)


def test_an_answer_below_the_ssim_window_is_scored_by_psnr_alone(tmp_path: Path) -> None:
    """An 8x8 answer (the no-op server's) is ok and carries its PSNR; SSIM, undefined below the 11-px window,
    is None rather than failing the request."""
    rng = np.random.default_rng(9)
    ref = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
    answer = np.clip(ref.astype(np.int16) + rng.integers(-9, 10, ref.shape), 0, 255).astype(np.uint8)
    path = tmp_path / "r.png"
    path.write_bytes(_png(ref))
    v = score_images(_body(answer), 8, 8, 1, False, None, [str(path)])
    assert v.ok and v.quality is not None
    assert v.quality["psnr_db"] == pytest.approx(peak_signal_noise_ratio(ref, answer, data_range=255), abs=1e-9)
    assert v.quality["ssim"] is None
