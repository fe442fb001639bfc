"""``diffbench review``: pair selection, the key, the page's secrecy, scoring and its interval, bad inputs.

Outputs here are synthetic (seeded noise of a known, different strength per pair, with manifests as
``bench --save-outputs`` writes them), so which pairs are the worst is known independently: PSNRs are
recomputed with scikit-image. The browser test (tests/report/test_review_page.py) uses real tiny-flux runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy.stats import binomtest
from skimage.metrics import peak_signal_noise_ratio

from diffbench.cli.main import main
from diffbench.core.manifest import Manifest, ManifestEntry, write_manifest
from diffbench.quality.review_score import clopper_pearson, min_pairs_to_pass

N_PAIRS = 12
SIGMAS = [2.0 + 1.5 * i for i in range(N_PAIRS)]  # pair i gets noise sd SIGMAS[perm[i]]


def _write_run(d: Path, imgs: dict[str, np.ndarray]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    entries = []
    for key, img in imgs.items():
        pid, seed = key.split("/")
        f = f"{pid}_s{seed}_i0.png"
        Image.fromarray(img).save(d / f)
        entries.append(ManifestEntry(prompt_id=pid, prompt=f"prompt {pid}", seed=int(seed), height=img.shape[0],
                                     width=img.shape[1], file=f, sha256=hashlib.sha256((d / f).read_bytes()).hexdigest()))
    write_manifest(d, Manifest(conditions={"model": "synthetic"}, entries=entries))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A baseline and a noisier candidate; ``psnr`` maps pairing key → PSNR by scikit-image."""
    root = tmp_path_factory.mktemp("review")
    rng = np.random.default_rng(7)
    perm = rng.permutation(N_PAIRS)
    base, cand, psnr = {}, {}, {}
    for i in range(N_PAIRS):
        key = f"p{i:02d}/{i % 2}"
        b = rng.integers(40, 216, (24, 32, 3), dtype=np.uint8)
        noise = rng.normal(0.0, SIGMAS[perm[i]], b.shape)
        c = np.clip(np.rint(b + noise), 0, 255).astype(np.uint8)
        base[key], cand[key] = b, c
        psnr[f"p{i:02d}/seed{i % 2}/0"] = peak_signal_noise_ratio(b, c, data_range=255)
    _write_run(root / "run-baseline-x1", base)
    _write_run(root / "run-candidate-y2", cand)
    return {"root": root, "base": root / "run-baseline-x1", "cand": root / "run-candidate-y2", "psnr": psnr}


def _review(runs: dict, name: str, *extra: str) -> tuple[dict, str]:
    out = Path(runs["root"]) / f"{name}.html"
    rc = main(["review", str(runs["base"]), str(runs["cand"]), "-o", str(out), "--quiet", *extra])
    assert rc == 0
    key = json.loads(out.with_name(f"{name}.key.json").read_text())
    return key, out.read_text(encoding="utf-8")


def test_worst_by_psnr_plus_a_seeded_random_sample(runs: dict) -> None:
    key, _ = _review(runs, "a", "--worst", "4", "--random", "3", "--seed", "5")
    psnr = runs["psnr"]
    expected_worst = sorted(psnr, key=psnr.get)[:4]  # lowest PSNR by scikit-image
    worst = [p for p in key["pairs"] if p["selection"] == "worst"]
    rand = [p for p in key["pairs"] if p["selection"] == "random"]
    assert sorted(p["key"] for p in worst) == sorted(expected_worst)
    assert len(rand) == 3 and not {p["key"] for p in rand} & set(expected_worst)
    for p in key["pairs"]:
        assert p["value"] == pytest.approx(psnr[p["key"]], abs=1e-9)
    assert [p["id"] for p in key["pairs"]] == [f"r{i:02d}" for i in range(1, 8)]
    assert key["n_compared"] == N_PAIRS and key["seed"] == 5 and key["random_taken"] == 3
    for side in ("baseline", "candidate"):
        sha = hashlib.sha256((Path(runs["base" if side == "baseline" else "cand"]) / "manifest.json").read_bytes())
        assert key[f"{side}_manifest_sha256"] == sha.hexdigest()
        assert key[side] == str(Path(runs["base" if side == "baseline" else "cand"]).resolve())
    # the sample, the order and the sides follow default_rng(seed), as the module docstring states
    rng = np.random.default_rng(5)
    rest = sorted(k for k in psnr if k not in expected_worst)
    drawn = [rest[int(i)] for i in rng.choice(len(rest), size=3, replace=False)]
    chosen = sorted(expected_worst, key=psnr.get) + drawn
    order = rng.permutation(7)
    sides = rng.integers(0, 2, size=7)
    assert [p["key"] for p in key["pairs"]] == [chosen[int(i)] for i in order]
    assert [p["candidate_side"] for p in key["pairs"]] == ["left" if s == 0 else "right" for s in sides]


def test_same_seed_same_key_other_seed_other_review(runs: dict) -> None:
    k1, h1 = _review(runs, "s1", "--worst", "3", "--random", "4", "--seed", "11")
    k2, h2 = _review(runs, "s2", "--worst", "3", "--random", "4", "--seed", "11")
    k3, _ = _review(runs, "s3", "--worst", "3", "--random", "4", "--seed", "12")
    assert k1 == k2 and h1 == h2
    assert k3["review_id"] != k1["review_id"]
    assert [(p["key"], p["candidate_side"]) for p in k3["pairs"]] != [(p["key"], p["candidate_side"]) for p in k1["pairs"]]


def test_page_holds_no_key_no_paths_no_names(runs: dict) -> None:
    key, html = _review(runs, "secret", "--worst", "5", "--random", "5", "--seed", "3")
    text = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", html)  # pixels are not text
    for forbidden in (str(runs["base"]), str(runs["cand"]), "run-baseline-x1", "run-candidate-y2", "baseline",
                      "candidate", "secret.key", "manifest", "_s0_i0", "_s1_i0", "psnr", "worst", "random"):
        assert forbidden.lower() not in text.lower(), forbidden
    for p in key["pairs"]:
        assert p["key"] not in text
    data = json.loads(re.search(r'id="review-data">(.*?)</script>', html).group(1))
    assert data == {"review_id": key["review_id"], "pairs": [p["id"] for p in key["pairs"]]}
    # the left/right images are exactly the candidate/baseline pixels the key says (re-encoded, no metadata)
    imgs = re.findall(r'data-side="(left|right)"><h2>[^<]*</h2><img[^>]*src="data:image/png;base64,([^"]+)"', html)
    assert len(imgs) == 2 * len(key["pairs"])
    import base64
    import io

    for i, p in enumerate(key["pairs"]):
        left = np.asarray(Image.open(io.BytesIO(base64.b64decode(imgs[2 * i][1]))))
        cand = np.asarray(Image.open(p["candidate_file"]))
        base = np.asarray(Image.open(p["baseline_file"]))
        assert np.array_equal(left, cand if p["candidate_side"] == "left" else base)


def test_pairs_are_the_quality_pairs_and_quality_json_metrics_are_used(runs: dict, tmp_path: Path) -> None:
    q = tmp_path / "q.json"
    assert main(["quality", str(runs["base"]), str(runs["cand"]), "--no-ms-ssim", "--json", str(q)]) == 0
    rep = json.loads(q.read_text())
    # fabricate LPIPS values in the saved result: the review must rank by them (higher LPIPS is worse)
    lp = {p["key"]: 0.01 * ((7 * i) % N_PAIRS) for i, p in enumerate(rep["pairs"])}
    for p in rep["pairs"]:
        p["metrics"]["lpips"] = lp[p["key"]]
    q.write_text(json.dumps(rep))
    key, _ = _review(runs, "lp", "--by", "lpips", "--quality", str(q), "--worst", "3", "--random", "0")
    assert sorted(p["key"] for p in key["pairs"]) == sorted(sorted(lp, key=lp.get, reverse=True)[:3])
    assert all(p["value"] == lp[p["key"]] for p in key["pairs"]) and "q.json" in key["metric_source"]
    key_all, _ = _review(runs, "all", "--worst", str(N_PAIRS), "--random", "0")
    assert sorted(p["key"] for p in key_all["pairs"]) == sorted(p["key"] for p in rep["pairs"])


def test_identical_pairs_rank_last_and_are_noted(runs: dict, capsys) -> None:
    out = Path(runs["root"]) / "ident.html"
    assert main(["review", str(runs["base"]), str(runs["base"]), "-o", str(out), "--worst", "2", "--random", "1",
                 "--quiet"]) == 0
    key = json.loads(out.with_name("ident.key.json").read_text())
    assert [p["value"] for p in key["pairs"]] == ["inf"] * 3  # strict JSON: +inf written as "inf"
    assert "3 of the 3 chosen pair(s) are pixel-identical" in " ".join(capsys.readouterr().out.split())


def test_random_asks_more_than_remain_takes_all_and_says_so(runs: dict, capsys) -> None:
    key, _ = _review(runs, "many", "--worst", "10", "--random", "5")
    assert key["random_taken"] == 2 and len(key["pairs"]) == N_PAIRS
    assert "only 2 pair(s) left" in capsys.readouterr().out


@pytest.mark.parametrize(("k", "n"), [(0, 1), (0, 10), (1, 10), (3, 7), (7, 7), (12, 40), (0, 36), (5, 200)])
@pytest.mark.parametrize("conf", [0.9, 0.95, 0.99])
def test_clopper_pearson_matches_scipy_binomtest(k: int, n: int, conf: float) -> None:
    lo, hi = clopper_pearson(k, n, conf)
    ref = binomtest(k, n).proportion_ci(confidence_level=conf, method="exact")
    assert lo == pytest.approx(ref.low, abs=1e-12) and hi == pytest.approx(ref.high, abs=1e-12)


def test_zero_worse_upper_bound_closed_form_and_pairs_needed() -> None:
    for n in (1, 5, 20, 100):
        assert clopper_pearson(0, n, 0.95)[1] == pytest.approx(1 - 0.025 ** (1 / n), rel=1e-12)
    m = min_pairs_to_pass(0.1)
    assert m == 36 and clopper_pearson(0, m)[1] <= 0.1 < clopper_pearson(0, m - 1)[1]


def _verdicts(key: dict, pattern: list[str]) -> dict:
    return {"kind": "diffbench-review-verdicts", "schema_version": 1, "review_id": key["review_id"],
            "verdicts": [{"pair": p["id"], "verdict": pattern[i % len(pattern)], "time_ms": 1000.0 + i}
                         for i, p in enumerate(key["pairs"])]}


def test_score_maps_verdicts_through_the_key_and_gates_on_the_upper_bound(runs: dict, tmp_path: Path,
                                                                          capsys) -> None:
    key, _ = _review(runs, "sc", "--worst", "4", "--random", "6", "--seed", "9")
    kpath = Path(runs["root"]) / "sc.key.json"
    pattern = ["left", "right", "same", "left", "left"]
    v = tmp_path / "v.json"
    v.write_text(json.dumps(_verdicts(key, pattern)))
    exp = {"worse": 0, "same": 0, "better": 0}
    for i, p in enumerate(key["pairs"]):
        verdict = pattern[i % len(pattern)]
        exp["same" if verdict == "same" else ("better" if verdict == p["candidate_side"] else "worse")] += 1
    out = tmp_path / "s.json"
    assert main(["review", "--score", str(v), "--key", str(kpath), "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert {k: res["counts"][k] for k in exp} == exp and res["counts"]["n"] == 10
    ref = binomtest(exp["worse"], 10).proportion_ci(method="exact")
    assert res["worse"]["share"] == exp["worse"] / 10 and res["worse"]["ci_high"] == pytest.approx(ref.high)
    assert res["time_ms_total"] == pytest.approx(sum(1000.0 + i for i in range(10)))
    assert res["passed"] is None
    capsys.readouterr()
    # gate: the upper bound, not the point estimate
    share, hi = exp["worse"] / 10, ref.high
    lim_between = (share + hi) / 2
    assert main(["review", "--score", str(v), "--key", str(kpath), "--max-worse", f"{lim_between:.6f}"]) == 1
    cap = capsys.readouterr()
    assert "FAIL" in cap.out and "upper bound" in cap.err
    assert main(["review", "--score", str(v), "--key", str(kpath), "--max-worse", f"{min(1.0, hi + 1e-6):.6f}"]) == 0
    # --json - prints only the JSON on stdout
    capsys.readouterr()
    assert main(["review", "--score", str(v), "--key", str(kpath), "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"] == res["counts"]


@pytest.mark.e2e
def test_progress_goes_to_stderr_only(runs: dict, tmp_path: Path) -> None:
    outs = []
    for mode in ("always", "never"):
        env = {**os.environ, "DIFFBENCH_PROGRESS": mode, "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).resolve().parents[2] / "src"), os.environ.get("PYTHONPATH", "")])}
        cp = subprocess.run([sys.executable, "-m", "diffbench.cli.main", "review", str(runs["base"]), str(runs["cand"]),
                             "-o", str(tmp_path / "p.html"), "--worst", "2", "--random", "1"],
                            capture_output=True, text=True, env=env, timeout=120, check=False)
        assert cp.returncode == 0, cp.stderr
        outs.append(cp)
    assert outs[0].stdout == outs[1].stdout and "review " in outs[0].stdout
    assert "review:" in outs[0].stderr and outs[1].stderr == ""


# ------------------------------------------------------------------------------------------ bad input

def _bad_setup(tmp: Path, runs: dict) -> dict[str, str]:
    key, _ = _review(runs, "bad", "--worst", "2", "--random", "1")
    kpath = Path(runs["root"]) / "bad.key.json"
    good = _verdicts(key, ["left"])
    files = {
        "OTHERID": {**good, "review_id": "0" * 16},
        "PARTIAL": {**good, "verdicts": good["verdicts"][:2]},
        "UNKNOWNPAIR": {**good, "verdicts": [*good["verdicts"], {"pair": "r99", "verdict": "left"}]},
        "BADVALUE": {**good, "verdicts": [{**good["verdicts"][0], "verdict": "better"}, *good["verdicts"][1:]]},
        "TWICE": {**good, "verdicts": [*good["verdicts"], good["verdicts"][0]]},
        "WRONGKIND": {**good, "kind": "diffbench-quality"},
        "GOOD": good,
    }
    ph = {"B": str(runs["base"]), "C": str(runs["cand"]), "K": str(kpath), "T": str(tmp), "MISSING": str(tmp / "nope")}
    for name, data in files.items():
        (tmp / f"{name}.json").write_text(json.dumps(data))
        ph[name] = str(tmp / f"{name}.json")
    (tmp / "notjson.json").write_text("{not json")
    ph["NOTJSON"] = str(tmp / "notjson.json")
    q = tmp / "q-other.json"
    small = tmp / "small"
    _write_run(small, {"z00/0": np.zeros((16, 16, 3), np.uint8)})
    assert main(["quality", str(small), str(small), "--no-ms-ssim", "--json", str(q)]) == 0
    ph["QOTHER"], ph["SMALL"] = str(q), str(small)
    qb = tmp / "q-nolpips.json"
    assert main(["quality", ph["B"], ph["C"], "--no-ms-ssim", "--json", str(qb)]) == 0
    ph["QNOLPIPS"] = str(qb)
    sz = tmp / "size"
    _write_run(sz, {f"p{i:02d}/{i % 2}": np.zeros((24, 30, 3), np.uint8) for i in range(N_PAIRS)})
    ph["SIZE"] = str(sz)
    for side in ("RA", "RB"):
        (tmp / side).mkdir()
        Image.fromarray(np.full((16, 16, 4), 200, np.uint8)).save(tmp / side / "x.png")
        ph[side] = str(tmp / side)
    return ph


REVIEW = ["{B}", "{C}", "-o", "{T}/r.html"]
CASES = [
    ("no-dirs", ["-o", "{T}/r.html"], 2, "give BASELINE and CANDIDATE"),
    ("no-output", ["{B}", "{C}"], 2, "-o/--output: name the review page"),
    ("bad-by", [*REVIEW, "--by", "ssim"], 2, "--by 'ssim': choose one of psnr, lpips"),
    ("nothing-selected", [*REVIEW, "--worst", "0", "--random", "0"], 2, "select nothing"),
    ("negative-worst", [*REVIEW, "--worst", "-1"], 2, "--worst and --random must be >= 0"),
    ("tiny-max-px", [*REVIEW, "--max-px", "4"], 2, "--max-px 4: must be >= 16"),
    ("bad-alpha", [*REVIEW, "--alpha", "keep"], 2, "--alpha 'keep'"),
    ("output-missing-parent", ["{B}", "{C}", "-o", "{T}/no/r.html"], 2, "pass --mkdir"),
    ("key-missing-parent", [*REVIEW, "--key", "{T}/no/k.json"], 2, "--key {T}/no/k.json"),
    ("key-is-output", [*REVIEW, "--key", "{T}/r.html"], 2, "the key must be a separate file"),
    ("missing-baseline", ["{MISSING}", "{C}", "-o", "{T}/r.html"], 2, "BASELINE {MISSING} does not exist"),
    ("missing-quality-json", [*REVIEW, "--quality", "{MISSING}"], 2, "--quality {MISSING}: no such file"),
    ("quality-json-of-other-dirs", [*REVIEW, "--quality", "{QOTHER}"], 2, "does not match"),
    ("lpips-not-in-quality-json", [*REVIEW, "--by", "lpips", "--quality", "{QNOLPIPS}"], 2,
     "no lpips for 12 pair(s)"),
    ("pair-size-mismatch", ["{B}", "{SIZE}", "-o", "{T}/r.html"], 2, "12 pair(s) could not be compared"),
    ("lpips-without-weights", [*REVIEW, "--by", "lpips", "--lpips-backbone", "{MISSING}"], 3,
     "LPIPS backbone weights not found at {MISSING}"),
    ("rgba-under-alpha-reject", ["{RA}", "{RB}", "-o", "{T}/r.html"], 2, "has an alpha channel; choose --alpha"),
    ("max-worse-without-score", [*REVIEW, "--max-worse", "0.1"], 2, "apply to --score"),
    ("score-without-key", ["--score", "{GOOD}"], 2, "--score needs --key"),
    ("score-with-dirs", ["{B}", "--score", "{GOOD}", "--key", "{K}"], 2, "--score takes no BASELINE"),
    ("score-missing-file", ["--score", "{MISSING}", "--key", "{K}"], 2, "--score {MISSING}: no such file"),
    ("score-not-json", ["--score", "{NOTJSON}", "--key", "{K}"], 2, "not JSON"),
    ("score-wrong-kind", ["--score", "{WRONGKIND}", "--key", "{K}"], 2, "is not a verdict file"),
    ("score-missing-key", ["--score", "{GOOD}", "--key", "{MISSING}"], 2, "--key {MISSING}: no such file"),
    ("score-key-not-a-key", ["--score", "{GOOD}", "--key", "{GOOD}"], 2, "is not a review key"),
    ("score-other-review", ["--score", "{OTHERID}", "--key", "{K}"], 2, "is review 0000000000000000, but --key"),
    ("score-missing-pairs", ["--score", "{PARTIAL}", "--key", "{K}"], 2, "1 of 3 pair(s) have no verdict"),
    ("score-unknown-pair", ["--score", "{UNKNOWNPAIR}", "--key", "{K}"], 2, "pairs not in the key (r99)"),
    ("score-unknown-verdict", ["--score", "{BADVALUE}", "--key", "{K}"], 2, "unknown verdict 'better'"),
    ("score-judged-twice", ["--score", "{TWICE}", "--key", "{K}"], 2, "is judged twice"),
    ("score-max-worse-above-1", ["--score", "{GOOD}", "--key", "{K}", "--max-worse", "1.5"], 2, "in (0, 1]"),
    ("score-max-worse-zero", ["--score", "{GOOD}", "--key", "{K}", "--max-worse", "0"], 2, "in (0, 1]"),
    ("score-confidence-1", ["--score", "{GOOD}", "--key", "{K}", "--confidence", "1"], 2, "must be in (0, 1)"),
    ("output-inside-baseline", ["{B}", "{C}", "-o", "{B}/r.html"], 2, "is inside the input directory"),
    ("key-inside-candidate", [*REVIEW, "--key", "{C}/manifest.json"], 2, "is inside the input directory"),
    ("score-json-is-the-verdicts", ["--score", "{GOOD}", "--key", "{K}", "--json", "{GOOD}"], 2,
     "is also an input"),
    ("score-json-is-the-key", ["--score", "{GOOD}", "--key", "{K}", "--json", "{K}"], 2, "is also an input"),
    ("score-json-missing-parent", ["--score", "{GOOD}", "--key", "{K}", "--json", "{T}/no/s.json"], 2,
     "pass --mkdir"),
]


@pytest.fixture(scope="module")
def bad_ph(runs: dict, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return _bad_setup(tmp_path_factory.mktemp("bad"), runs)


@pytest.mark.parametrize(("case", "argv", "code", "fragment"), CASES, ids=[c[0] for c in CASES])
def test_bad_input(bad_ph: dict, capsys, one_line_error, case: str, argv: list[str], code: int,
                   fragment: str) -> None:
    capsys.readouterr()
    rc = main(["review", *[a.format(**bad_ph) for a in argv]])
    cap = capsys.readouterr()
    one_line_error(rc, " ".join(cap.err.split()), code, [fragment.format(**bad_ph)])
    assert "Traceback" not in cap.out + cap.err
    assert not (Path(bad_ph["T"]) / "no").exists()
    assert not (Path(bad_ph["T"]) / "r.html").exists()


def _page_pngs(html: str) -> list[np.ndarray]:
    import base64
    import io

    return [np.asarray(Image.open(io.BytesIO(base64.b64decode(b))))
            for b in re.findall(r'src="data:image/png;base64,([^"]+)"', html)]


def test_video_pairs_show_their_worst_frame(tmp_path: Path) -> None:
    # frame folders (path pairing): the candidate differs most in frame 2, so the page shows frame 2
    rng = np.random.default_rng(3)
    frames = rng.integers(30, 220, (4, 20, 24, 3), dtype=np.uint8)
    noisy = frames.copy()
    for t, sd in enumerate([1.0, 3.0, 12.0, 2.0]):
        noisy[t] = np.clip(np.rint(frames[t] + rng.normal(0, sd, frames[t].shape)), 0, 255).astype(np.uint8)
    for side, arr in (("A", frames), ("B", noisy)):
        (tmp_path / side / "clip").mkdir(parents=True)
        for t in range(4):
            Image.fromarray(arr[t]).save(tmp_path / side / "clip" / f"{t:05d}.png")
    out = tmp_path / "v.html"
    assert main(["review", str(tmp_path / "A"), str(tmp_path / "B"), "-o", str(out), "--worst", "1", "--random",
                 "0", "--quiet"]) == 0
    key = json.loads((tmp_path / "v.key.json").read_text())
    (p,) = key["pairs"]
    psnrs = [peak_signal_noise_ratio(frames[t], noisy[t], data_range=255) for t in range(4)]
    assert p["frame"] == int(np.argmin(psnrs)) == 2 and p["frames"] == 4
    assert p["value"] == pytest.approx(np.mean(psnrs))  # the pair's PSNR as quality reports it (frame mean)
    html = out.read_text()
    left, right = _page_pngs(html)
    cand, base = (left, right) if p["candidate_side"] == "left" else (right, left)
    assert np.array_equal(cand, noisy[2]) and np.array_equal(base, frames[2])
    assert "frame 3 of 4" in html


def test_alpha_policy_reaches_the_pairs_and_the_page(tmp_path: Path) -> None:
    rgba = np.dstack([np.full((16, 16, 3), 90, np.uint8), np.full((16, 16), 128, np.uint8)])
    for side in ("A", "B"):
        (tmp_path / side).mkdir()
        Image.fromarray(rgba).save(tmp_path / side / "x.png")
    out = tmp_path / "a.html"
    assert main(["review", str(tmp_path / "A"), str(tmp_path / "B"), "-o", str(out), "--alpha", "composite-white",
                 "--quiet"]) == 0
    expected = np.rint(90 * 128 / 255 + 255 * (1 - 128 / 255))  # over white
    assert all((x == expected).all() and x.shape == (16, 16, 3) for x in _page_pngs(out.read_text()))


def test_large_images_are_downscaled_and_say_so(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (300, 400, 3), dtype=np.uint8)
    b = a.copy()
    b[:10] = 0
    for side, arr in (("A", a), ("B", b)):
        (tmp_path / side).mkdir()
        Image.fromarray(arr).save(tmp_path / side / "x.png")
    out = tmp_path / "big.html"
    assert main(["review", str(tmp_path / "A"), str(tmp_path / "B"), "-o", str(out), "--max-px", "200",
                 "--quiet"]) == 0
    assert [x.shape for x in _page_pngs(out.read_text())] == [(150, 200, 3), (150, 200, 3)]
    assert "downscaled to 200x150 for the page" in out.read_text()


def test_by_lpips_computed_here_equals_quality_lpips(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from diffbench.quality.lpips import BACKBONE_FILE

    from .conftest import make_random_alexnet_state

    bb = tmp_path / BACKBONE_FILE
    torch.save(make_random_alexnet_state(2), bb)
    rng = np.random.default_rng(5)
    base = {f"p{i:02d}/0": rng.integers(0, 256, (64, 64, 3), dtype=np.uint8) for i in range(5)}
    cand = {k: np.clip(np.rint(v + rng.normal(0, 4 + 6 * i, v.shape)), 0, 255).astype(np.uint8)
            for i, (k, v) in enumerate(base.items())}
    _write_run(tmp_path / "A", base)
    _write_run(tmp_path / "B", cand)
    q = tmp_path / "q.json"
    assert main(["quality", str(tmp_path / "A"), str(tmp_path / "B"), "--no-ms-ssim", "--lpips", "--lpips-backbone",
                 str(bb), "--json", str(q)]) == 0
    lp = {p["key"]: p["metrics"]["lpips"] for p in json.loads(q.read_text())["pairs"]}
    out = tmp_path / "l.html"
    assert main(["review", str(tmp_path / "A"), str(tmp_path / "B"), "-o", str(out), "--by", "lpips",
                 "--lpips-backbone", str(bb), "--worst", "2", "--random", "0", "--quiet"]) == 0
    key = json.loads((tmp_path / "l.key.json").read_text())
    assert sorted(p["key"] for p in key["pairs"]) == sorted(sorted(lp, key=lp.get, reverse=True)[:2])
    assert all(p["value"] == pytest.approx(lp[p["key"]], rel=1e-6) for p in key["pairs"])


@pytest.mark.e2e
def test_review_by_psnr_and_score_never_import_torch(runs: dict, tmp_path: Path) -> None:
    key, _ = _review(runs, "nt", "--worst", "2", "--random", "1")
    v = tmp_path / "v.json"
    v.write_text(json.dumps(_verdicts(key, ["same"])))
    code = (
        "import sys; from diffbench.cli.main import main; "
        f"assert main(['review', {str(runs['base'])!r}, {str(runs['cand'])!r}, '-o', {str(tmp_path / 'x.html')!r}, "
        "'--quiet']) == 0; "
        f"assert main(['review', '--score', {str(v)!r}, '--key', {str(Path(runs['root']) / 'nt.key.json')!r}]) == 0; "
        "assert 'torch' not in sys.modules and 'matplotlib' not in sys.modules"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert cp.returncode == 0, cp.stderr
