"""The built-in prompt set and prompt files.

Twenty varied prompts covering what breaks first under lossy optimizations: people (faces, hands), text
rendering, fine texture, and scenes with depth and lighting. ``prompt_id`` is stable (``p00``…``p19``) so
that outputs pair across runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from diffbench.core.textfile import read_text_input
from diffbench.errors import InputError

BUILTIN_PROMPTS: tuple[tuple[str, str], ...] = (
    ("people", "a portrait of an elderly fisherman with a weathered face, natural window light, 85mm photo"),
    ("people", "two children laughing on a swing in a park, golden hour, candid photograph"),
    ("people", "a chef's hands kneading dough on a floured wooden table, close-up"),
    ("people", "a ballet dancer mid-leap on a dim stage with a single spotlight"),
    ("people", "a crowded night market with vendors and shoppers, lanterns overhead"),
    ("text", "a neon sign that says 'OPEN 24 HOURS' above a diner door in the rain"),
    ("text", "a vintage book cover titled 'The Quiet Engine' in gold serif letters"),
    ("text", "a chalkboard menu listing 'Espresso 3.50, Latte 4.20, Tea 2.80'"),
    ("text", "a street sign reading 'Elm St' and 'Main Ave' at an intersection"),
    ("texture", "macro photograph of a honeybee covered in pollen on a sunflower"),
    ("texture", "close-up of a knitted wool sweater with a cable pattern"),
    ("texture", "a tiger's fur in sharp detail, stripes and whiskers, wildlife photo"),
    ("texture", "weathered red brick wall with moss growing in the cracks"),
    ("texture", "a bowl of ramen with glossy noodles, sliced egg and scallions, overhead shot"),
    ("scene", "a snowy mountain lake at dawn with a wooden cabin and mist"),
    ("scene", "a futuristic city skyline at dusk with flying vehicles and reflections"),
    ("scene", "a cozy library with tall shelves, a fireplace and a sleeping cat"),
    ("scene", "an aerial view of terraced rice fields after rain"),
    ("scene", "a lighthouse on a rocky coast during a storm, waves crashing"),
    ("scene", "an astronaut riding a horse on Mars, cinematic wide shot"),
)


class Prompt(BaseModel):
    """A prompt with a stable id and a category."""

    model_config = ConfigDict(frozen=True)

    prompt_id: str
    text: str
    category: str = "custom"


def builtin_prompts(limit: int | None = None) -> list[Prompt]:
    """The built-in set (first ``limit`` prompts when given)."""
    out = [Prompt(prompt_id=f"p{i:02d}", text=t, category=c) for i, (c, t) in enumerate(BUILTIN_PROMPTS)]
    return out[:limit] if limit else out


PROMPT_FILE_FORMAT = "one prompt per line ('#' for comments), or JSONL rows {\"text\": ...}"


def _json_row_prompt(text: str, where: str, option: str) -> str:
    """The ``text`` of one AIPerf ``single_turn`` JSONL row (``{"text": ...}``; other keys are not read)."""
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{option} {where}: not valid JSON ({exc}); AIPerf prompt rows look like "
                         '{"text": "a prompt"}') from None
    if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
        got = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
        raise InputError(f"{option} {where}: a JSON row needs a string \"text\" field (AIPerf prompt format "
                         f'{{"text": "a prompt"}}), got {got}')
    return str(obj["text"]).strip()


def read_prompts(path: str | Path, option: str = "--prompts") -> list[str]:
    """The prompts of a prompt file: the one reader behind every ``--prompts`` (bench, sweep, load).

    Format (UTF-8 text):

    - **Plain text** (the default): one prompt per line, surrounding blanks stripped; blank lines are
      skipped, and so are comment lines, whose first non-blank character is ``#`` (write a prompt that
      starts with ``#`` as a JSONL row).
    - **JSONL** (AIPerf's ``--custom-dataset-type single_turn`` prompt file), chosen when the file name ends
      in ``.jsonl`` or its first non-blank line starts with ``{``: one JSON object per non-blank line, whose
      string ``text`` field is the prompt (other keys are not read; a row whose text is blank is skipped).

    Args:
        path: the file.
        option: the option that named it, used in messages (e.g. ``"--workload prompt_file"``).

    Returns:
        The prompts, in file order (at least one).

    Raises:
        InputError: a missing, directory, binary or empty file; a JSON row that is not an object with a
            string ``text`` (file and line named); or no prompt in the file.
    """
    p = Path(path)
    lines = read_text_input(p, option, "one prompt per line, or JSONL rows {\"text\": ...}").splitlines()
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    if p.suffix.lower() == ".jsonl" or first.startswith("{"):
        prompts = [_json_row_prompt(ln.strip(), f"{p}:{i}", option) for i, ln in enumerate(lines, start=1)
                   if ln.strip()]
        prompts = [t for t in prompts if t]
    else:
        prompts = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    if not prompts:
        raise InputError(f"{option} {p} holds no prompt ({PROMPT_FILE_FORMAT})")
    return prompts


def load_prompt_file(path: str | Path, option: str = "--prompts") -> list[Prompt]:
    """The prompts of a prompt file (format: :func:`read_prompts`) with stable ids ``f000``, ``f001``, …

    Raises:
        InputError: as :func:`read_prompts`.
    """
    return [Prompt(prompt_id=f"f{i:03d}", text=t) for i, t in enumerate(read_prompts(path, option))]


def parse_seeds(text: str, option: str = "--seeds") -> list[int]:
    """Comma-separated integer seeds, e.g. ``"0,1,2"``.

    Raises:
        UsageError: a non-integer entry, or no seed at all.
    """
    from diffbench.errors import UsageError

    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError as exc:
        raise UsageError(f"{option} {text!r}: expected comma-separated integers, e.g. 0,1,2") from exc
    if not seeds:
        raise UsageError(f"{option} is empty; give at least one seed, e.g. {option} 0")
    return seeds
