"""`kvscope bench real --requests N` on the Azure-shaped workload: N rows of the trace or a refusal."""

import pytest

from kvscope.app.bench.bench import azure_shaped_requests
from kvscope.app.lab.presets import load_workload
from kvscope.app.lab.workload import read_trace
from kvscope.engine.config import ConfigError


def test_more_requests_than_the_trace_holds_are_refused_not_run_as_fewer():
    rows = len(read_trace(load_workload("azure-conv").trace_path))
    prompts, outputs = azure_shaped_requests(5, vocab_size=1000)
    assert len(prompts) == len(outputs) == 5
    with pytest.raises(ConfigError, match=f"holds {rows:,} requests; give at most {rows:,}"):
        azure_shaped_requests(rows + 1, vocab_size=1000)
