"""Tiny random-weight pipelines built from configs, fully offline and deterministic.

``tiny-flux`` (FluxPipeline), ``tiny-sdxl`` (StableDiffusionXLPipeline) and ``tiny-wan`` (WanPipeline) are
real diffusers pipelines with real schedulers, VAEs and text encoders, shrunk to a few hundred thousand
parameters so that a generation takes tens of milliseconds on a CPU. Tokenizers are built in memory from a
byte-level character vocabulary (CLIP) and a unigram piece list (T5 / umT5): the vocabulary does not change
the text encoder's cost because prompts are padded to a fixed length. Approach: that of the
dummy components in huggingface/diffusers' pipeline tests (``tests/pipelines/{flux,stable_diffusion_xl,wan}/``,
``get_dummy_components``); this wiring was checked with diffusers 0.42 / transformers 5.

Weights come from ``torch.manual_seed(seed)`` before construction, so the same seed gives the same
weights in any process.
"""

from __future__ import annotations

from typing import Any

TINY_MODELS = ("tiny-flux", "tiny-sdxl", "tiny-wan")
T5_MAX_LEN = 64


def _clip_tokenizer(max_len: int = 77) -> Any:
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    chars = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokens = ["<|startoftext|>", "<|endoftext|>"] + chars + [c + "</w>" for c in chars]
    vocab = {t: i for i, t in enumerate(tokens)}
    tk = Tokenizer(BPE(vocab=vocab, merges=[], end_of_word_suffix="</w>", unk_token="<|endoftext|>"))
    tk.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()])
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tk.decoder = decoders.ByteLevel()
    tk.post_processor = processors.TemplateProcessing(
        single="<|startoftext|> $A <|endoftext|>",
        special_tokens=[("<|startoftext|>", 0), ("<|endoftext|>", 1)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tk,
        bos_token="<|startoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        model_max_length=max_len,
    )


def _t5_tokenizer(max_len: int = 512) -> Any:
    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import Unigram
    from transformers import PreTrainedTokenizerFast

    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    for code in range(33, 127):
        c = chr(code)
        pieces.append((c, -3.0))
        pieces.append(("\u2581" + c, -2.5))
    tk = Tokenizer(Unigram(pieces, unk_id=2))
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tk.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    tk.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token="</s>", pad_token="<pad>", unk_token="<unk>", model_max_length=max_len
    )


def _clip_text(tokenizer: Any, with_projection: bool = False) -> Any:
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    cfg = CLIPTextConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=2,
        projection_dim=32,
        hidden_act="quick_gelu",
        max_position_embeddings=tokenizer.model_max_length,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return (CLIPTextModelWithProjection if with_projection else CLIPTextModel)(cfg)


def _t5_encoder(tokenizer: Any, umt5: bool = False) -> Any:
    from transformers import T5Config, T5EncoderModel, UMT5Config, UMT5EncoderModel

    kw = dict(
        vocab_size=len(tokenizer),
        d_model=32,
        d_kv=16,
        d_ff=64,
        num_layers=2,
        num_heads=2,
        relative_attention_num_buckets=8,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
    )
    if umt5:
        return UMT5EncoderModel(UMT5Config(**kw))
    return T5EncoderModel(T5Config(**kw))


def _image_vae(
    latent_channels: int, shift_factor: float | None, scaling_factor: float, quant_convs: bool
) -> Any:
    """A 4-level AutoencoderKL (scale factor 8) with 32-64 channels."""
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(32, 32, 64, 64),
        layers_per_block=1,
        latent_channels=latent_channels,
        norm_num_groups=16,
        use_quant_conv=quant_convs,
        use_post_quant_conv=quant_convs,
        shift_factor=shift_factor,
        scaling_factor=scaling_factor,
    )


def build_tiny_flux(seed: int = 0) -> Any:
    """FluxPipeline: 1 double + 2 single blocks, width 32; VAE scale factor 8, 16 latent channels."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel

    torch.manual_seed(seed)
    clip_tok, t5_tok = _clip_tokenizer(), _t5_tokenizer()
    transformer = FluxTransformer2DModel(
        patch_size=1,
        in_channels=64,
        num_layers=1,
        num_single_layers=2,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=32,
        pooled_projection_dim=32,
        guidance_embeds=False,
        axes_dims_rope=(4, 6, 6),
    )
    vae = _image_vae(latent_channels=16, shift_factor=0.0609, scaling_factor=1.5035, quant_convs=False)
    scheduler = FlowMatchEulerDiscreteScheduler(
        shift=3.0,
        use_dynamic_shifting=True,
        base_shift=0.5,
        max_shift=1.15,
        base_image_seq_len=256,
        max_image_seq_len=4096,
    )
    return FluxPipeline(
        scheduler=scheduler,
        vae=vae,
        text_encoder=_clip_text(clip_tok),
        tokenizer=clip_tok,
        text_encoder_2=_t5_encoder(t5_tok),
        tokenizer_2=t5_tok,
        transformer=transformer,
    )


def build_tiny_sdxl(seed: int = 0) -> Any:
    """StableDiffusionXLPipeline: a 2-level UNet with text_time conditioning, two CLIP encoders."""
    import torch
    from diffusers import (
        EulerDiscreteScheduler,
        StableDiffusionXLPipeline,
        UNet2DConditionModel,
    )

    torch.manual_seed(seed)
    tok1, tok2 = _clip_tokenizer(), _clip_tokenizer()
    unet = UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        block_out_channels=(32, 64),
        layers_per_block=1,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=(2, 4),
        use_linear_projection=True,
        addition_embed_type="text_time",
        addition_time_embed_dim=8,
        transformer_layers_per_block=(1, 1),
        projection_class_embeddings_input_dim=80,
        cross_attention_dim=64,
        norm_num_groups=16,
    )
    vae = _image_vae(latent_channels=4, shift_factor=None, scaling_factor=0.13025, quant_convs=True)
    scheduler = EulerDiscreteScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        timestep_spacing="leading",
        steps_offset=1,
    )
    return StableDiffusionXLPipeline(
        vae=vae,
        text_encoder=_clip_text(tok1),
        text_encoder_2=_clip_text(tok2, with_projection=True),
        tokenizer=tok1,
        tokenizer_2=tok2,
        unet=unet,
        scheduler=scheduler,
    )


def build_tiny_wan(seed: int = 0) -> Any:
    """WanPipeline: a 2-head WanTransformer3DModel, a tiny AutoencoderKLWan (4× temporal), umT5."""
    import torch
    from diffusers import (
        AutoencoderKLWan,
        FlowMatchEulerDiscreteScheduler,
        WanPipeline,
        WanTransformer3DModel,
    )

    torch.manual_seed(seed)
    tok = _t5_tokenizer()
    vae = AutoencoderKLWan(
        base_dim=3,
        z_dim=16,
        dim_mult=[1, 1, 1, 1],
        num_res_blocks=1,
        temperal_downsample=[False, True, True],
    )
    transformer = WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=16,
        in_channels=16,
        out_channels=16,
        text_dim=32,
        freq_dim=32,
        ffn_dim=64,
        num_layers=2,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        rope_max_seq_len=32,
    )
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    return WanPipeline(
        tokenizer=tok,
        text_encoder=_t5_encoder(tok, umt5=True),
        vae=vae,
        transformer=transformer,
        scheduler=scheduler,
    )


BUILDERS = {"tiny-flux": build_tiny_flux, "tiny-sdxl": build_tiny_sdxl, "tiny-wan": build_tiny_wan}


def build_tiny(name: str, seed: int = 0) -> Any:
    """Build the tiny pipeline ``name`` (one of :data:`TINY_MODELS`) with weights from ``seed``.

    Every component is put in eval mode: modules built from configs start in training mode, where the
    text encoders' dropout would make the same seed give different images (``from_pretrained`` does
    the same switch for saved pipelines).
    """
    pipe = BUILDERS[name](seed)
    for component in pipe.components.values():
        if hasattr(component, "eval") and hasattr(component, "training"):
            component.eval()
    return pipe
