"""Token counts, per-forward FLOPs, text-encoder/VAE FLOPs and parameter counts against values derived by hand
from the formulas of docs/concepts/time-model.md and against published counts."""

from __future__ import annotations

import pytest

from diffbench.ledger import (
    count_tokens,
    derived_params,
    forward_flops,
    forwards_per_step,
    get_model,
    load_catalog,
    text_encode_flops,
    vae_decode_flops,
)

TF = 1e12


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def _fwd(cat, model, w, h, f=1, tt=None):
    m = get_model(cat, model)
    t = count_tokens(m, w, h, f, tt)
    return t, forward_flops(m, t, w, h)


def test_flux_dev_1024_tokens_and_flops(cat):
    t, f = _fwd(cat, "flux.1-dev", 1024, 1024)
    # (1024/16)² = 4,096 image tokens + 512 T5 tokens = 4,608
    assert (t.visual, t.text_joint, t.seq) == (64 * 64, 512, 4608)
    # derived by hand: 59.5 linear + 14.9 attention = 74.4 TF per forward
    assert f.linear / TF == pytest.approx(59.5, rel=0.02)
    assert f.attention / TF == pytest.approx(14.9, rel=0.02)
    assert f.total / TF == pytest.approx(74.4, rel=0.02)
    assert f.attention_share == pytest.approx(0.20, abs=0.01)


def test_wan14b_720p_81f_tokens_and_flops(cat):
    t, f = _fwd(cat, "wan2.1-14b", 1280, 720, 81)
    # latent grid 21 × 45 × 80 = 75,600; 512 text tokens only via cross-attention
    assert t.latent_frames == 1 + (81 - 1) // 4 == 21
    assert t.visual == 21 * 45 * 80 == 75600
    assert (t.text_joint, t.text_cross, t.seq) == (0, 512, 75600)
    # derived by hand: 1,810 linear + 4,714 attention = 6,523 TF per forward (72 % attention)
    assert f.linear / TF == pytest.approx(1810, rel=0.02)
    assert f.attention / TF == pytest.approx(4714, rel=0.02)
    assert f.total / TF == pytest.approx(6523, rel=0.02)
    assert f.attention_share == pytest.approx(0.72, abs=0.01)


@pytest.mark.parametrize(
    ("model", "w", "h", "frames", "seq", "total_tf"),
    [  # all derived by hand
        ("flux.1-dev", 512, 512, 1, 1536, 21.5),
        ("flux.1-schnell", 1024, 1024, 1, 4352, 69.5),
        ("flux.1-dev", 1536, 1536, 1, 9728, 191.9),
        ("flux.1-dev", 2048, 2048, 1, 16896, 418.1),
        ("qwen-image", 1024, 1024, 1, 4224, 70.6),
        ("qwen-image", 1328, 1328, 1, 7017, 131.7),
        ("sd3.5-large", 1024, 1024, 1, 4429, 31.2),
        ("cogvideox-5b", 720, 480, 49, 17776, 332),
        ("wan2.1-14b", 832, 480, 81, 32760, 1678),
        ("wan2.1-1.3b", 832, 480, 81, 32760, 283),
        ("hunyuanvideo", 1280, 720, 129, 119056, 12068),
    ],
)
def test_flop_table(cat, model, w, h, frames, seq, total_tf):
    t, f = _fwd(cat, model, w, h, frames)
    assert t.seq == seq
    assert f.total / TF == pytest.approx(total_tf, rel=0.02)


def test_sdxl_unet_evaluation(cat):
    # derived by hand from sd_xl_base.yaml: 6.76 TF at 1024² (≈0.75 TF attention), 1.59 TF at 512²
    _, f1024 = _fwd(cat, "sdxl-base", 1024, 1024)
    _, f512 = _fwd(cat, "sdxl-base", 512, 512)
    assert f1024.total / TF == pytest.approx(6.76, rel=0.02)
    assert f1024.attention / TF == pytest.approx(0.75, rel=0.05)
    assert f512.total / TF == pytest.approx(1.59, rel=0.05)


def test_sd35_medium_dual_attention(cat):
    # derived by hand: 6.0 TF linear without the extra attention, + 13·(8d²N' + 4N'²d), N' = image tokens
    _, f = _fwd(cat, "sd3.5-medium", 1024, 1024)
    d, n_img = 1536, 4096
    extra = 13 * (8 * d * d * n_img + 4 * n_img * n_img * d)
    base_linear = 24 * 24 * d * d * 4429
    assert f.total == pytest.approx(base_linear + 24 * 4 * 4429**2 * d + extra, rel=1e-9)
    assert base_linear / TF == pytest.approx(6.0, rel=0.02)


def test_forwards_per_step(cat):
    # verl-project/verl-omni:verl_omni/utils/mfu/diffusion_flops_counter.py order: guidance-distilled → 1; schnell → 1 regardless; CFG scale > 1 → 2
    assert forwards_per_step(get_model(cat, "flux.1-dev"), 3.5) == 1
    assert forwards_per_step(get_model(cat, "flux.1-schnell"), 7.0) == 1
    assert forwards_per_step(get_model(cat, "hunyuanvideo"), None) == 1
    assert forwards_per_step(get_model(cat, "sdxl-base"), None) == 2
    assert forwards_per_step(get_model(cat, "sdxl-base"), 1.0) == 1
    assert forwards_per_step(get_model(cat, "wan2.1-14b"), 5.0) == 2


def test_text_encoder_flops(cat):
    # derived by hand: T5-XXL at 512 tokens ≈ 4.9 TF; umT5 at 512 ≈ 5.8 TF (twice with CFG)
    flux = get_model(cat, "flux.1-dev")
    assert text_encode_flops(flux, 1) / TF == pytest.approx(4.9 + 2 * 123e6 * 77 / TF, rel=0.02)
    wan = get_model(cat, "wan2.1-14b")
    assert text_encode_flops(wan, 2) / TF == pytest.approx(2 * 5.8, rel=0.02)
    sdxl = get_model(cat, "sdxl-base")
    assert text_encode_flops(sdxl, 1) / TF == pytest.approx(0.13, rel=0.05)


@pytest.mark.parametrize(("px", "tf"), [(512, 2.5), (1024, 10.5), (2048, 48.5)])
def test_vae_2d_decode_flops(cat, px, tf):
    # derived by hand from the autoencoder topology
    assert vae_decode_flops(get_model(cat, "flux.1-dev"), px, px, 1) / TF == pytest.approx(tf, rel=0.02)


@pytest.mark.parametrize(("w", "h", "per_frame", "total"), [(1280, 720, 31, 660), (832, 480, 13.5, 285)])
def test_vae_3d_decode_flops(cat, w, h, per_frame, total):
    # derived by hand from Wan-Video/Wan2.1@9737cba:wan/modules/vae.py: ≈31 / 13.5 TF per latent frame; ≈660 / 285 TF for 81 frames (ceilings)
    wan = get_model(cat, "wan2.1-14b")
    assert vae_decode_flops(wan, w, h, 1) / TF == pytest.approx(per_frame, rel=0.02)
    assert vae_decode_flops(wan, w, h, 21) / TF == pytest.approx(total, rel=0.02)


@pytest.mark.parametrize(
    ("model", "published"),
    [  # published counts: model cards / READMEs (the catalog's source fields)
        ("flux.1-dev", 12e9), ("wan2.1-14b", 14e9), ("sd3.5-large", 8.1e9), ("qwen-image", 20e9),
        ("hunyuanvideo", 13e9),
    ],
)
def test_denoiser_params_vs_published(cat, model, published):
    assert derived_params(get_model(cat, model)) == pytest.approx(published, rel=0.03)


def test_wan13b_params_vs_derived(cat):
    # Wan2.1's README rounds to 1.3B; counting the config's layers gives 1.42B
    assert derived_params(get_model(cat, "wan2.1-1.3b")) == pytest.approx(1.42e9, rel=0.02)


def test_encoder_params_closed_form(cat):
    # encoder shapes from the model configs: T5-XXL 24 × (4d² + 3·d·f) + vocab·d; CLIP-L 12 × (4d² + 2·d·4d) + vocab·d
    t5 = 24 * (4 * 4096**2 + 3 * 4096 * 10240) + 32128 * 4096
    clip = 12 * (4 * 768**2 + 2 * 768 * 3072) + 49408 * 768 + 77 * 768
    flux = get_model(cat, "flux.1-dev")
    enc = {e.name: e.params for e in flux.text_encoders}
    assert enc["t5-v1.1-xxl"] == pytest.approx(t5, rel=0.03)
    assert enc["clip-vit-l"] == pytest.approx(clip, rel=0.03)
    sdxl = get_model(cat, "sdxl-base")
    assert sum(e.params for e in sdxl.text_encoders) == pytest.approx(817e6, rel=0.03)  # SDXL paper §2.1


# -- latent patch, VAE compression, linear attention, image-to-video conditioning -----------------------------

def test_ltx_video_tokens_use_its_32x_vae_and_unit_patch(cat):
    # LTX-Video: 32× spatial and 8× temporal VAE, patch 1: 704x480x161 → (1 + 160/8) · (480/32)·(704/32)
    t, _ = _fwd(cat, "ltx-video", 704, 480, 161)
    assert (t.latent_frames, t.visual, t.text_cross) == (21, 21 * 15 * 22, 128)


def test_wan22_ti2v_5b_tokens_use_its_16x_vae(cat):
    # Wan2.2-TI2V-5B: vae_stride (4, 16, 16), patch (1, 2, 2): 1280x704x121 → 31 · (704/32)·(1280/32) = 27,280
    t, f = _fwd(cat, "wan2.2-ti2v-5b", 1280, 704, 121)
    assert (t.latent_frames, t.visual) == (31, 27_280)
    d, ffn, n, txt = 3072, 14336, 27_280, 512
    lin = 30 * (2 * (6 * d * d + 2 * d * ffn) * n + 2 * 2 * d * d * txt)
    att = 30 * (4 * n * n * d + 4 * n * txt * d)
    assert f.linear == pytest.approx(lin, rel=1e-12) and f.attention == pytest.approx(att, rel=1e-12)


def test_sana_linear_attention_grows_with_n_not_n2(cat):
    # SANA-1.6B: DC-AE 32×, patch 1 → 1024 tokens at 1024²; ReLU linear attention 4·N·d·head_dim per block
    t, f = _fwd(cat, "sana-1.6b", 1024, 1024)
    assert t.visual == 1024
    d, hd, txt = 2240, 32, 300
    assert f.attention == pytest.approx(20 * (4 * 1024 * d * hd + 4 * 1024 * txt * d), rel=1e-12)
    _, f4 = _fwd(cat, "sana-1.6b", 2048, 2048)
    assert f4.attention / f.attention == pytest.approx(4.0, rel=1e-12)  # 4× tokens, 4× attention (not 16×)


def test_shape_checks_use_the_model_multiple(cat):
    from diffbench.errors import ShapeError
    from diffbench.ledger.tokens import check_shape

    with pytest.raises(ShapeError, match="multiple of 32"):
        check_shape(get_model(cat, "ltx-video"), 700, 480, 161)
    with pytest.raises(ShapeError, match="8k\\+1"):
        check_shape(get_model(cat, "ltx-video"), 704, 480, 81 + 4)


def test_image_to_video_conditioning_counts_its_frames_and_image_tokens(cat, tmp_path):
    # an I2V variant of Wan2.1-14B declared by a user: one conditioning latent frame in the sequence and the
    # 257 CLIP ViT-H/14 image tokens in the cross-attention
    path = tmp_path / "i2v.yaml"
    path.write_text("models:\n  wan2.1-14b:\n    conditioning: {latent_frames: 1, cross_tokens: 257, source: test}\n")
    m = get_model(load_catalog(path), "wan2.1-14b")
    t = count_tokens(m, 832, 480, 81)
    assert t.visual == (21 + 1) * 30 * 52 and t.text_cross == 512 + 257
    base = count_tokens(get_model(cat, "wan2.1-14b"), 832, 480, 81)
    assert (base.visual, base.text_cross) == (21 * 30 * 52, 512)
