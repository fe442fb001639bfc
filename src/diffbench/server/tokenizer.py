"""A tiny local tokenizer for load generators that insist on one (AIPerf), so they run offline.

AIPerf counts input tokens with a Hugging Face tokenizer (``--tokenizer``: a Hub id, ``builtin`` = tiktoken,
whose BPE file is downloaded on first use, or a local directory). A diffusion service has no tokenizer
of its own, and an offline machine cannot download one. :func:`write_tokenizer` writes a directory that
``transformers.AutoTokenizer.from_pretrained(DIR)`` loads without network: a byte-level BPE with no
merges (each UTF-8 byte of the prompt is one token, so every text round-trips exactly and the "token"
counts are byte counts), plus ``<|endoftext|>`` as the BOS/EOS/UNK/PAD token.

Files: ``tokenizer.json`` (the ``tokenizers`` library's format) and ``tokenizer_config.json``
(``PreTrainedTokenizerFast``, the special tokens). ``diffbench serve --write-tokenizer DIR`` calls it.
"""

from __future__ import annotations

import json
from pathlib import Path

SPECIAL = "<|endoftext|>"
"""The one special token: id 256, after the 256 byte tokens."""


def write_tokenizer(directory: str | Path) -> Path:
    """Write the byte-level tokenizer into ``directory`` (created if missing) and return its path.

    Raises:
        MissingDependencyError: the ``tokenizers`` library is not installed (``diffusers`` extra, which
            brings transformers).
        UsageError: ``directory`` exists and is not a directory, or cannot be written.
    """
    from diffbench.errors import UsageError, require

    require("tokenizers", "diffusers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    out = Path(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError, PermissionError) as exc:
        raise UsageError(f"--write-tokenizer {directory}: cannot create the directory ({exc}); "
                         "give a new or writable directory") from None
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    vocab[SPECIAL] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([SPECIAL])
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIAL,
        "eos_token": SPECIAL,
        "unk_token": SPECIAL,
        "pad_token": SPECIAL,
        "model_max_length": 1_000_000,
        "clean_up_tokenization_spaces": False,
    }
    try:
        tok.save(str(out / "tokenizer.json"))
        (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--write-tokenizer {directory}: cannot write the files ({exc})") from None
    return out
