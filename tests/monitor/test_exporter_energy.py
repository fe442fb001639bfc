"""diffusion_energy_joules_total: a sample only where a counter is read; each generation's joules added."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from diffbench.monitor.exporter import Exporter


def _energy(exp: Exporter) -> dict[str, float]:
    out = {}
    for fam in text_string_to_metric_families(exp.render()[0].decode()):
        for s in fam.samples:
            if s.name == "diffusion_energy_joules_total":
                out[s.labels["gpu"]] = s.value
    return out


def test_no_sample_until_a_counter_is_enabled_then_the_sum_of_the_generations():
    exp = Exporter("m", ["256x256"], gpus=["0"])
    assert _energy(exp) == {}  # no counter readable: no 0 that reads as "no energy used"
    exp.enable_energy("0")
    assert _energy(exp) == {"0": 0.0}
    for joules in (12.5, 30.25, -1.0):  # a negative delta (a counter reset) adds nothing
        exp.observe_energy("0", joules)
    assert _energy(exp) == {"0": 42.75}
