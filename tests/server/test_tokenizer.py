"""``diffbench serve --write-tokenizer DIR``: a tokenizer transformers loads offline (for AIPerf --tokenizer DIR)."""

from __future__ import annotations

import pytest

from diffbench.cli.main import main

pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

TEXTS = ["a lighthouse at dusk", "  two  spaces, été, 東京, emoji 🦊\n", ""]


def test_write_tokenizer_loads_offline_and_counts_utf8_bytes(tmp_path, capsys):
    out = tmp_path / "tok"
    assert main(["serve", "--write-tokenizer", str(out)]) == 0
    assert f"--tokenizer {out}" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    tok = transformers.AutoTokenizer.from_pretrained(str(out), local_files_only=True)  # no Hub access
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=False)
        assert len(ids) == len(text.encode("utf-8"))  # one token per UTF-8 byte
        assert tok.decode(ids) == text
    assert tok.eos_token == "<|endoftext|>" and tok.eos_token_id == 256


def test_write_tokenizer_into_a_file_is_a_usage_error(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("x")
    assert main(["serve", "--write-tokenizer", str(target)]) != 0
    err = capsys.readouterr().err
    assert "error:" in err and "--write-tokenizer" in err and "Traceback" not in err
