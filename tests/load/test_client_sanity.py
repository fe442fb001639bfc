"""Answer sanity: black and constant pictures, pixel hashes, and duplicates across seeds within a row."""

from __future__ import annotations

import base64
import hashlib
import io
import json

import numpy as np
import pytest
from PIL import Image

from diffbench.cli.main import main
from diffbench.core.records import RequestRecord
from diffbench.load.client import read_jsonl
from diffbench.load.client.payload import check_chat, check_images
from diffbench.load.client.sanity import (
    BLACK_MAX_LEVEL,
    CONSTANT_STD_FLOOR,
    image_kind,
    mark_duplicates,
    max_std,
    pixel_hash,
    request_key,
)


def _img(pixels: np.ndarray) -> Image.Image:
    return Image.fromarray(pixels.astype(np.uint8), "RGB")


def _b64(img: Image.Image, **save: object) -> str:
    buf = io.BytesIO()
    img.save(buf, format="PNG", **save)
    return base64.b64encode(buf.getvalue()).decode()


RNG = np.random.default_rng(7)
NOISE = RNG.integers(0, 256, (48, 64, 3))
NEAR_FLAT = 128 + RNG.integers(-1, 2, (48, 64, 3))  # +-1 level of dither around grey


@pytest.mark.parametrize("pixels, kind", [
    (np.zeros((48, 64, 3)), "black_image"),
    (RNG.integers(0, BLACK_MAX_LEVEL + 1, (48, 64, 3)), "black_image"),  # dark codec ringing is still black
    (np.full((48, 64, 3), (200, 30, 30)), "constant_image"),
    (NEAR_FLAT, "constant_image" if NEAR_FLAT.std(axis=(0, 1)).max() < CONSTANT_STD_FLOOR else None),
    (NOISE, None),
])
def test_image_kind_against_numpy(pixels, kind):
    img = _img(pixels)
    assert image_kind(img)[0] == kind
    # the std the check uses is numpy's population std of each channel
    assert max_std(img) == pytest.approx(float(pixels.astype(np.float64).std(axis=(0, 1)).max()), abs=1e-6)


def test_one_bright_pixel_is_not_black_but_still_constant():
    pixels = np.zeros((48, 64, 3))
    pixels[3, 5] = (BLACK_MAX_LEVEL + 1, 0, 0)
    std = float(pixels.std(axis=(0, 1)).max())  # 9 / sqrt(3072) ~ 0.16 levels
    assert image_kind(_img(pixels))[0] == ("constant_image" if std < CONSTANT_STD_FLOOR else None)
    assert image_kind(_img(pixels), frame=True) == (None, None)  # a constant frame is not flagged


def test_pixel_hash_is_of_the_pixels_not_the_png_bytes():
    img = _img(NOISE)
    a = base64.b64decode(_b64(img, compress_level=0))
    b = base64.b64decode(_b64(img, compress_level=9))
    assert a != b
    with Image.open(io.BytesIO(a)) as ia, Image.open(io.BytesIO(b)) as ib:
        assert pixel_hash(ia) == pixel_hash(ib)
    want = hashlib.blake2b(b"RGB 64x48\n" + NOISE.astype(np.uint8).tobytes(), digest_size=16).hexdigest()
    assert pixel_hash(img) == want
    other = NOISE.copy()
    other[0, 0, 0] ^= 1
    assert pixel_hash(_img(other)) != want


@pytest.mark.slow
def test_nan_latents_arrive_as_a_black_image():
    """diffusers' own post-processing of an all-NaN decode (clamp keeps NaN, cast to uint8 gives 0)."""
    import warnings

    torch = pytest.importorskip("torch")
    image_processor = pytest.importorskip("diffusers.image_processor")

    nan = torch.full((1, 3, 16, 16), float("nan"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy: invalid value encountered in cast
        pil = image_processor.VaeImageProcessor().postprocess(nan, output_type="pil")[0]
    assert np.asarray(pil).max() == 0
    assert image_kind(pil)[0] == "black_image"


def _images_body(*imgs: Image.Image) -> bytes:
    return json.dumps({"data": [{"b64_json": _b64(i)} for i in imgs]}).encode()


def test_check_images_names_the_kind_and_returns_hashes():
    black, flat, noise = _img(np.zeros((48, 64, 3))), _img(np.full((48, 64, 3), 90)), _img(NOISE)
    v = check_images(_images_body(noise, black), 64, 48, 2, sanity=True)
    assert not v.ok and v.invalid_kind == "black_image" and v.error.startswith("data[1]: black_image")
    v = check_images(_images_body(flat), 64, 48, 1, sanity=True)
    assert not v.ok and v.invalid_kind == "constant_image"
    v = check_images(_images_body(noise, noise), 64, 48, 2, sanity=True)
    assert v.ok and v.hashes == [pixel_hash(noise)] * 2
    v = check_images(_images_body(black), 64, 48, 1)  # sanity off: the old format check only
    assert v.ok and v.hashes is None and v.invalid_kind is None
    v = check_images(_images_body(black), 64, 40, 1, sanity=True)  # a format failure has no kind
    assert not v.ok and v.invalid_kind is None
    chat = {"choices": [{"message": {"content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + _b64(black)}}]}}]}
    v = check_chat(json.dumps(chat).encode(), 64, 48, 1, sanity=True)
    assert not v.ok and v.invalid_kind == "black_image"


def _rec(i: int, key: str | None, hashes: list[str] | None, outcome: str = "ok") -> RequestRecord:
    return RequestRecord(id=i, intended_s=0.0, done_s=1.0, outcome=outcome, answer_hashes=hashes,  # type: ignore[arg-type]
                         request_key=key)


def test_mark_duplicates_flags_every_answer_of_a_picture_shared_across_keys():
    recs = [
        _rec(0, "k0", ["A"]), _rec(1, "k1", ["A"]), _rec(2, "k2", ["A"]),  # one picture, three seeds
        _rec(3, "k3", ["B"]), _rec(4, "k3", ["B"]),  # same seed and prompt: legitimately equal
        _rec(5, "k5", ["C", "D"]), _rec(6, "k6", ["E", "D"]),  # share one of their images
        _rec(7, "k7", ["F"]), _rec(8, "k8", None), _rec(9, "k9", ["F"], outcome="timeout"),
    ]
    out = mark_duplicates(recs)
    flagged = {r.id for r in out if r.invalid_kind == "duplicate_across_seeds"}
    # independently: ok answers whose hash set meets that of an ok answer with another key
    want = {a.id for a in recs for b in recs if a.outcome == b.outcome == "ok" and a.answer_hashes
            and b.answer_hashes and a.request_key != b.request_key and set(a.answer_hashes) & set(b.answer_hashes)}
    assert flagged == want == {0, 1, 2, 5, 6}
    assert all(r.outcome == "invalid_payload" for r in out if r.id in flagged)
    assert [r.id for r in out] == list(range(10)) and out[3] is recs[3]


def test_request_key_leaves_out_an_unsent_seed():
    assert request_key("p", 1) != request_key("p", 2) != request_key("q", 2)
    assert request_key("p", None) == request_key("p", None) != request_key("p", 0)
    assert request_key("p", 1, "a.png") != request_key("p", 1, "b.png")


# --- end to end: the fake server's sanity modes, counted per row -------------------------------------------

def _load(fake, tmp_path, mode: str, *extra: str) -> tuple[dict, list[RequestRecord]]:
    out, jl = tmp_path / f"{mode}.json", tmp_path / f"{mode}.jsonl"
    code = main(["load", "--url", fake.url(mode), "--warmup", "0", "--timeout", "5", "--size", "64x48",
                 "--rates", "20", "--duration", "0.5", "--arrival", "constant", "--json", str(out), "--jsonl",
                 str(jl), "--quiet", *extra])
    assert code in (0, 1)
    return json.loads(out.read_text()), read_jsonl(jl)


@pytest.mark.e2e
@pytest.mark.parametrize("mode, kind", [("const", "constant_image"), ("black", "black_image"),
                                        ("same", "duplicate_across_seeds"), ("ok", None)])
def test_fake_server_answers_are_counted_by_kind(fake, tmp_path, mode, kind):
    res, recs = _load(fake, tmp_path, mode)
    row = res["rates"][0]
    n = len(recs)
    assert n == row["n"] == 10  # 20 req/s x 0.5 s, constant arrivals
    assert all(r.outcome == "ok" or r.outcome == "invalid_payload" for r in recs)
    if kind is None:
        assert row["outcomes"]["ok"] == n and row.get("invalid_kinds", {}) == {}
        assert len({h for r in recs for h in r.answer_hashes}) == n  # 10 seeds, 10 pictures
        return
    assert row["outcomes"]["invalid_payload"] == n and row["outcomes"]["ok"] == 0
    assert row["invalid_kinds"] == {kind: n}
    if kind == "duplicate_across_seeds":  # decided with the row: the streamed records hold the hashes
        assert {r.outcome for r in recs} == {"ok"} and len({r.answer_hashes[0] for r in recs}) == 1
        assert len({r.request_key for r in recs}) == n
        assert {r.invalid_kind for r in mark_duplicates(recs)} == {kind}
    else:
        assert all(r.invalid_kind == kind and kind in r.error for r in recs)


@pytest.mark.e2e
def test_openai_dialect_same_prompt_equal_pictures_are_not_duplicates(fake, tmp_path):
    # the openai dialect sends no seed: one prompt, one picture is what a seedless server may answer
    res, recs = _load(fake, tmp_path, "same", "--dialect", "openai", "--prompts", str(_one_prompt(tmp_path)))
    assert res["rates"][0]["outcomes"]["ok"] == len(recs) == 10
    assert len({r.request_key for r in recs}) == 1


def _one_prompt(tmp_path) -> object:
    p = tmp_path / "p.txt"
    p.write_text("a lighthouse\n")
    return p


@pytest.mark.e2e
@pytest.mark.slow
def test_real_tiny_flux_answers_pass(tmp_path):
    """The reference service (tiny-flux on CPU) answers pictures that pass every sanity check."""
    out, jl = tmp_path / "r.json", tmp_path / "r.jsonl"
    assert main(["load", "--rates", "1", "--num-requests", "4", "--duration", "4", "--arrival", "constant",
                 "--size", "64x64", "--steps", "2", "--json", str(out), "--jsonl", str(jl), "--timeout", "60",
                 "--quiet"]) == 0
    row = json.loads(out.read_text())["rates"][0]
    recs = read_jsonl(jl)
    assert row["outcomes"]["ok"] == row["n"] == len(recs) == 4 and row.get("invalid_kinds", {}) == {}
    assert all(r.answer_hashes and len(r.answer_hashes) == 1 for r in recs)
    assert len({r.answer_hashes[0] for r in recs}) == 4  # four seeds, four pictures
