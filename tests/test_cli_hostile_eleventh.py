"""The command line against bad input, eleventh round (scripts/hostile_inputs_eleventh_cli.py):
flags that are each fine and together change nothing. A share of the memory (--gpu-memory-utilization,
--reserve-bytes) or what vLLM subtracts from it (--enforce-eager, `math`'s --max-num-seqs ...) where the
KV pool is a set budget; --requests past a trace's rows; the real backend's weights edited by shape
flags, or given --allow-pickle, or --enforce-eager on a CPU; `verify --passages` on a model with no
tokenizer; `attach --replay` on a port the publisher holds. Each ran as if the flag were not typed."""

from __future__ import annotations

import pytest

from cli_helper import cli
from test_cli_hostile_fifth import refused

TRACE = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:47.6805900,100,10\n"
RUN = ("run", "--quiet", "--requests", "2")
REAL_CPU = (*RUN, "--backend", "real", "--model", "tiny-llama", "--device", "cpu")


# -- 1: a share of the memory where the pool is a set budget ----------------------------------------


@pytest.mark.parametrize("argv, said", [
    (("math", "--hardware", "this-machine", "--gpu-memory-utilization", "0.5"),
     ("--gpu-memory-utilization 0.5: on a CPU target (--hardware this-machine)", "set budget", "--memory-gib")),
    ((*RUN, "--hardware", "this-machine", "--reserve-bytes", "1e9"), ("--reserve-bytes 1e+09: on a CPU target",)),
    (("math", "--hardware", "this-machine", "--reserve-bytes", "1e9", "--gpu-memory-utilization", "0.8"),
     ("--gpu-memory-utilization 0.8, --reserve-bytes 1e+09:", "drop them")),
])
def test_a_share_of_the_memory_on_a_cpu_target_is_refused(capsys, argv, said):
    rc, out, err = cli(capsys, *argv)
    refused(rc, err, *said)
    assert out == ""


def test_a_share_of_a_given_memory_still_applies(capsys):
    rc, out, err = cli(capsys, "math", "--hardware", "this-machine", "--memory-gib", "30",
                       "--gpu-memory-utilization", "0.5")
    assert rc == 0 and "x gpu_memory_utilization 0.5" in out, err


def test_the_real_backend_on_a_cpu_refuses_a_share_before_loading(capsys):
    rc, out, err = cli(capsys, *REAL_CPU, "--gpu-memory-utilization", "0.5")
    refused(rc, err, "--gpu-memory-utilization 0.5: on this machine's CPU", "--kv-cache-memory-bytes")
    assert "memory-gib" not in err  # the real backend takes none


def test_the_real_backends_hardware_refusal_names_what_sizes_its_pool(capsys):
    rc, out, err = cli(capsys, *REAL_CPU, "--hardware", "l4-24gb")
    refused(rc, err, "--kv-cache-memory-bytes; on CUDA also --gpu-memory-utilization")


# -- 2: what vLLM subtracts, where nothing is subtracted ---------------------------------------------


@pytest.mark.parametrize("argv, said", [
    (("math", "--kv-cache-memory-bytes", "4e9", "--max-num-seqs", "8"), "--max-num-seqs 8 changes nothing"),
    (("math", "--kv-cache-memory-bytes", "4e9", "--max-num-batched-tokens", "512", "--max-num-seqs", "8"),
     "--max-num-seqs 8, --max-num-batched-tokens 512 change nothing"),
    (("math", "--hardware", "this-machine", "--no-enable-chunked-prefill"), "--no-enable-chunked-prefill changes"),
    (("math", "--hardware", "this-machine", "--enforce-eager"), "--enforce-eager changes nothing"),
    ((*RUN, "--kv-cache-memory-bytes", "2e9", "--no-enforce-eager"), "--no-enforce-eager changes nothing"),
])
def test_what_only_vllms_subtraction_reads_is_refused_beside_a_set_budget(capsys, argv, said):
    rc, out, err = cli(capsys, *argv)
    refused(rc, err, said, "nothing is subtracted from it")


@pytest.mark.parametrize("argv", [
    ("math", "--hardware", "h100-80gb", "--enforce-eager", "--max-num-seqs", "8"),
    ("math", "--vllm-version", "0.5", "--enforce-eager", "--max-num-seqs", "8"),  # as the sixth round has it
    (*RUN, "--kv-cache-memory-bytes", "2e9", "--max-num-seqs", "8"),  # the scheduler reads it
    (*RUN, "--enforce-eager"),
])
def test_where_the_memory_is_shared_out_they_are_read(capsys, argv):
    rc, out, err = cli(capsys, *argv)
    assert rc == 0, err


def test_the_real_backend_on_a_cpu_refuses_enforce_eager_before_loading(capsys):
    rc, out, err = cli(capsys, *REAL_CPU, "--enforce-eager")
    refused(rc, err, "--enforce-eager: the real backend on this machine's CPU captures no CUDA graphs")


# -- 3: more requests than the trace has rows --------------------------------------------------------


def test_requests_past_a_traces_rows_are_refused(capsys, tmp_path):
    trace = tmp_path / "two.csv"
    trace.write_text(TRACE)
    rc, out, err = cli(capsys, "run", "--quiet", "--trace", trace, "--requests", "5")
    refused(rc, err, "--requests 5: trace", "holds 2 requests", "give at most 2")
    rc, out, err = cli(capsys, "run", "--quiet", "--trace", trace, "--requests", "2", "--json", "-")
    assert rc == 0 and '"completed": 2' in out, err


def test_a_workload_presets_trace_and_a_scenarios_are_counted_too(capsys):
    rc, out, err = cli(capsys, "run", "--quiet", "--workload", "azure-conv", "--requests", "100000")
    refused(rc, err, "--requests 100,000: workload azure-conv's trace", "give at most 19,366")
    rc, out, err = cli(capsys, "compare", "--scenario", "static-vs-continuous", "--quiet", "--requests", "100000")
    refused(rc, err, "scenario static-vs-continuous's trace", "give at most 19,366")
    assert out == ""  # refused before the scenario's table


# -- 4: the real backend's weights as they are -------------------------------------------------------


def test_shape_flags_on_weights_that_are_loaded_are_refused(capsys, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}\n')
    rc, out, err = cli(capsys, *RUN, "--backend", "real", "--model-path", folder, "--layers", "2")
    refused(rc, err, "--layers 2: --model-path", "is loaded as it is")
    rc, out, err = cli(capsys, *RUN, "--backend", "real", "--model", "smollm2-135m-instruct", "--head-dim", "32",
                       "--kv-heads", "1")
    refused(rc, err, "--kv-heads 1, --head-dim 32: smollm2-135m-instruct's trained weights", "drop them")
    rc, out, err = cli(capsys, *RUN, "--backend", "real", "--attention-heads", "3")
    refused(rc, err, "--attention-heads 3: smollm2-135m-instruct's trained weights")


def test_allow_pickle_for_a_preset_is_refused(capsys):
    rc, out, err = cli(capsys, *REAL_CPU, "--allow-pickle")
    refused(rc, err, "--allow-pickle", "nothing pickled is read")


def test_verify_refuses_passages_on_a_model_without_a_tokenizer_before_loading(capsys):
    rc, out, err = cli(capsys, "verify", "--model", "tiny-llama", "--passages", "2", "--device", "cpu", "--json", "-")
    refused(rc, err, "--passages 2: tiny-llama has no tokenizer")
    assert out == ""


# -- 5: attach's replay socket on a publisher's port -------------------------------------------------


ATTACH = ("attach", "http://127.0.0.1:1", "--duration", "1")


@pytest.mark.parametrize("events, replay, ranks, said", [
    ("tcp://127.0.0.1:5557", "tcp://127.0.0.1:5557", "1", "name the same endpoint"),
    ("ipc:///tmp/kv", "ipc:///tmp/kv", "1", "name the same endpoint"),
    ("tcp://localhost:5557", "tcp://127.0.0.1:5558", "2", "port 5558, where DP rank 1 publishes its events"),
    ("tcp://127.0.0.1:5560", "tcp://127.0.0.1:5557", "4", "port 5560, where DP rank 3 answers replays"),
])
def test_a_replay_endpoint_on_a_publishers_port_is_refused(capsys, events, replay, ranks, said):
    rc, out, err = cli(capsys, *ATTACH, "--kv-events", events, "--replay", replay, "--data-parallel-size", ranks)
    refused(rc, err, said)


def test_a_replay_endpoint_on_the_port_kvscope_listens_on_is_refused(capsys):
    rc, out, err = cli(capsys, *ATTACH, "--kv-listen", "tcp://*:5557", "--replay", "tcp://localhost:5557")
    refused(rc, err, "--replay tcp://localhost:5557 and --kv-listen tcp://*:5557 name the same endpoint")
    rc, out, err = cli(capsys, *ATTACH, "--kv-listen", "tcp://*:5557", "--replay", "tcp://10.0.0.2:5557")
    refused(rc, err, "cannot reach http://127.0.0.1:1")  # the server's own port, on the server


@pytest.mark.parametrize("events, replay, ranks", [
    ("tcp://127.0.0.1:5557", "tcp://127.0.0.1:5558", "1"),
    ("tcp://127.0.0.1:5557", "tcp://127.0.0.1:5559", "2"),
    ("tcp://10.0.0.1:5557", "tcp://10.0.0.2:5557", "1"),  # another host's port
])
def test_a_replay_endpoint_apart_from_the_publishers_passes_on(capsys, events, replay, ranks):
    rc, out, err = cli(capsys, *ATTACH, "--kv-events", events, "--replay", replay, "--data-parallel-size", ranks)
    refused(rc, err, "cannot reach http://127.0.0.1:1")


# -- 6: what is known before loading, said before it -------------------------------------------------


@pytest.mark.parametrize("budget, said", [
    ("1000", ("--kv-cache-memory-bytes 1000: no room for a KV cache", "give at least 98,304 bytes")),
    ("200000", ("needs 256 blocks but the pool holds 2", "give --max-model-len")),
])
def test_a_cpu_kv_budget_without_room_is_refused_before_loading(capsys, budget, said):
    rc, out, err = cli(capsys, *REAL_CPU, "--kv-cache-memory-bytes", budget)
    refused(rc, err, *said)  # one line: no `loading ...` before it


def test_calibrate_refuses_more_threads_than_cores_before_loading(capsys, monkeypatch):
    from kvscope.app.cli import combinations

    monkeypatch.setattr(combinations, "usable_cores", lambda: 4)
    rc, out, err = cli(capsys, "calibrate", "--threads", "5", "--device", "cpu", "--no-save", "--model", "tiny-llama")
    refused(rc, err, "--threads 5: this machine runs 4 threads at once", "give at most 4")
    with pytest.raises(Exception, match="on cuda"):
        combinations.refuse_threads_past_the_cores(type("A", (), {"threads": 2})(), "cuda")


def test_presets_says_a_user_file_a_built_in_hides(capsys, monkeypatch, tmp_path):
    (tmp_path / "presets" / "hardware").mkdir(parents=True)
    (tmp_path / "presets" / "hardware" / "l4-24gb.toml").write_text('description = "mine"\n')
    (tmp_path / "presets" / "hardware" / "my-gpu.toml").write_text('description = "mine"\n')
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path))
    rc, out, err = cli(capsys, "presets", "hardware")
    assert rc == 0, err
    hidden = [line for line in out.splitlines() if "is not read" in line]
    assert len(hidden) == 1 and "l4-24gb.toml is not read: a built-in preset has its name" in hidden[0]


@pytest.mark.parametrize("model, best", [("qwen2.5-7b", 4), ("tiny-llama", 6), ("smollm2-135m-instruct", 3)])
def test_a_nodes_default_split_that_fails_names_the_hardware_and_a_split_that_works(capsys, model, best):
    rc, out, err = cli(capsys, "math", "--hardware", "8x-h100-80gb", "--model", model)
    refused(rc, err, "--hardware 8x-h100-80gb has 8 devices", f"give --tensor-parallel-size {best}")
    rc, out, err = cli(capsys, "math", "--hardware", "8x-h100-80gb", "--model", model, "--tensor-parallel-size", best)
    assert rc == 0, err
    rc, out, err = cli(capsys, "math", "--hardware", "8x-h100-80gb", "--model", model, "--tensor-parallel-size", "8")
    refused(rc, err, "--tensor-parallel-size 8: tensor_parallel_size 8 cannot split")  # typed: the engine's words
