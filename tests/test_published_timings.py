"""The shipped GPU presets against published vLLM measurements: every figure in
tests/fixtures/published_vllm_timings.toml (TTFT, TPOT, throughput; each with its source and setup)
replayed on the simulated engine, within 20 %; and the datasheet peaks alone, far outside it."""

from __future__ import annotations

import pytest

from kvscope.app.lab.presets import load_hardware
from kvscope.app.lab.published_timings import PUBLISHED_FILE, evaluate_published, load_cases
from kvscope.engine.cost_model import UNCALIBRATED_EXPECTED_ERROR

CASES = load_cases(PUBLISHED_FILE)


def test_the_table_holds_at_least_five_published_figures_each_with_its_source():
    figures = evaluate_published(CASES)
    assert len(figures) >= 5
    assert {case["hardware"] for case in CASES} >= {"h100-80gb", "a100-80gb"}
    for case in CASES:
        assert case["source"].startswith("https://") and case["setup"]
        assert len(case["input_lens"]) == len(case["output_lens"]) > 0


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_simulated_figures_are_within_20_percent_of_published_vllm(case):
    for row in evaluate_published([case]):
        assert abs(row["error"]) <= 0.20, f"{row['metric']}: published {row['published']:.2f}, " \
                                          f"simulated {row['simulated']:.2f} ({row['error'] * 100:+.1f} %)"
        assert row["calibration"].startswith("fitted to published vLLM")


def test_the_datasheet_peaks_alone_miss_them_by_what_the_uncalibrated_label_says():
    rows = evaluate_published(CASES, hardware_for=lambda c: load_hardware(c["hardware"]).replace(calibration=None))
    errors = sorted(abs(r["error"]) for r in rows)
    median = errors[len(errors) // 2]
    assert median == pytest.approx(UNCALIBRATED_EXPECTED_ERROR, abs=0.05)
    assert all(r["simulated"] < r["published"] for r in rows if r["metric"] != "output throughput")
