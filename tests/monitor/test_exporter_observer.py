"""The exporter is what the pipeline instrumentation reports to: it fits the instrumentation's
``GenerationObserver`` protocol by shape (the instrumentation, a lower package, never imports it)."""

from __future__ import annotations

import inspect

from diffbench.engines.instrument.observer import GenerationObserver
from diffbench.monitor.exporter import Exporter


def test_exporter_observe_generation_has_the_protocol_signature() -> None:
    want = inspect.signature(GenerationObserver.observe_generation)
    got = inspect.signature(Exporter.observe_generation)
    assert str(got) == str(want)


def test_exporter_has_the_optional_shape_label_the_instrumentation_looks_up() -> None:
    exp = Exporter("m", ["64x64"], gpus=["0"])
    assert exp.shape_label(64, 64) == "64x64"
    assert exp.shape_label(128, 64) == "other"
