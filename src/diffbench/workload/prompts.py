"""The built-in prompt set and prompt files.

Twenty varied prompts covering what breaks first under lossy optimizations: people (faces, hands), text
rendering, fine texture, and scenes with depth and lighting. ``prompt_id`` is stable (``p00``…``p19``) so
that outputs pair across runs.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

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


def load_prompt_file(path: str | Path) -> list[Prompt]:
    """One prompt per line; blank lines and lines starting with ``#`` are skipped.

    Raises:
        InputError: missing or unreadable file, or no prompt in it.
    """
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(
            f"--prompts {p}: cannot read ({exc}); give a UTF-8 text file, one prompt per line"
        ) from exc
    prompts = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    if not prompts:
        raise InputError(f"--prompts {p}: no prompts in the file (one per line, '#' for comments)")
    return [Prompt(prompt_id=f"f{i:03d}", text=t) for i, t in enumerate(prompts)]


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
