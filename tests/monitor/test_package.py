"""``diffbench.monitor`` re-exports the pipeline instrumentation lazily (the README's ``from diffbench.monitor
import attach``) without importing it, or torch, on its own."""

from __future__ import annotations

import subprocess
import sys

import pytest

import diffbench.monitor as monitor
from diffbench.engines.instrument import pipeline


def test_attach_detach_are_the_instrumentation_functions() -> None:
    assert monitor.attach is pipeline.attach
    assert monitor.detach is pipeline.detach
    assert monitor.Instrumentation is pipeline.Instrumentation


def test_unknown_name_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'attch'"):
        _ = monitor.attch


@pytest.mark.e2e  # runs a subprocess
def test_importing_monitor_loads_neither_the_hooks_nor_torch() -> None:
    code = ("import sys, diffbench.monitor\n"
            "print(sorted(m for m in ('torch', 'diffbench.engines.instrument.pipeline') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
