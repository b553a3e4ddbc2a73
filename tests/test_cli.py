"""The `kvscope` command line: `math`, `run`, `presets`, and what every kind of bad input looks like.

Most cases call `kvscope.app.cli.main.main` in-process (cheap); a few run `python -m kvscope.app` as a
subprocess to check exit codes and stderr exactly as a user sees them.

The last section holds regressions for input-handling bugs found while these tests were written.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

from kvscope.engine.config import ConfigError, EngineArgs
from kvscope.app.lab.presets import load_workload_file, read_toml
from cli_helper import cli

GiB = 1024**3
H100_MEMORY = 85029027840  # h100-80gb preset, per device: the CUDA-visible 79.19 GiB vLLM logs
MATH_KEYS = (
    "kv_bytes_per_token",
    "kv_bytes_per_sequence",
    "weights_bytes",
    "kv_pool_bytes",
    "num_blocks",
    "max_concurrent_sequences",
)
RUN_KEYS = (
    "completed",
    "rejected",
    "preemptions",
    "throughput_tokens_per_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "peak_kv_usage",
    "peak_running",
)
TRACE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


# -- helpers ---------------------------------------------------------------------------------------


def on_the_seeds_h100(argv: tuple) -> tuple:
    """These tests' figures are the seeds' H100 (the default GPU is now a 24 GB L4): named unless
    the test names a GPU or runs the real backend, which runs on this machine."""
    if "--hardware" in argv or "real" in argv:
        return argv
    return (*argv, "--hardware", "h100-80gb")


def math_json(capsys, *argv) -> dict:
    rc, out, err = cli(capsys, "math", "--json", *on_the_seeds_h100(argv))
    assert rc == 0, err
    assert err == ""
    return json.loads(out)


def run_json(capsys, *argv, requests=40) -> dict:
    rc, out, err = cli(capsys, "run", "--quiet", "--requests", requests, "--json", "-", *on_the_seeds_h100(argv))
    assert rc == 0, err
    assert err == ""
    return json.loads(out)


def subprocess_cli(*argv, cwd=None, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "kvscope.app", *[str(a) for a in argv]],
        capture_output=True, text=True, cwd=cwd, timeout=timeout,
    )


def assert_clean_error(rc, err, *fragments):
    """Exit 2, no traceback, one 'kvscope...' line (argparse may put its usage block first)."""
    assert rc == 2, f"exit code {rc}, stderr:\n{err}"
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert lines, "stderr is empty"
    last = lines[-1]
    if len(lines) > 1:  # argparse: "usage: ..." (possibly wrapped) then "kvscope CMD: error: ..."
        assert lines[0].startswith("usage:"), err
        assert ": error: " in last, err
    assert last.startswith("kvscope"), err
    assert "error" in last, err
    for fragment in fragments:
        assert fragment in last, f"{fragment!r} not in {last!r}"
    return last


def preset_toml(kind: str, name: str) -> dict:
    with (resources.files("kvscope.presets") / kind / f"{name}.toml").open("rb") as handle:
        return tomllib.load(handle)


def preset_names(kind: str) -> list[str]:
    return sorted(p.name[:-5] for p in (resources.files("kvscope.presets") / kind).iterdir() if p.name.endswith(".toml"))


HF_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def hf_config_for(preset: str) -> dict:
    """The Hugging Face config.json a model preset was transcribed from."""
    p = preset_toml("models", preset)
    cfg = {k: p[k] for k in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                             "hidden_size", "intermediate_size", "vocab_size", "max_position_embeddings",
                             "tie_word_embeddings", "model_type")}
    cfg["torch_dtype"] = HF_DTYPE[p["weight_dtype"]]
    cfg["architectures"] = ["LlamaForCausalLM"]  # extra fields a real config.json has are ignored
    cfg["rope_theta"] = 500000.0
    return cfg


def write_trace(path: Path, *rows: str) -> Path:
    path.write_text(TRACE_HEADER + "".join(r + "\n" for r in rows), encoding="utf-8")
    return path


# -- kvscope math ----------------------------------------------------------------------------------


def test_math_prints_a_readable_table_with_units(capsys):
    rc, out, err = cli(capsys, "math", "--model", "llama-3-8b", "--hardware", "h100-80gb", "--accounting", "lesson")
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "KV cache memory math"
    assert set(lines[1]) == {"-"}
    rows = {line.split("  ")[0].strip(): line for line in lines[2:]}
    for label in ("model", "hardware", "KV cache dtype", "KV per token", "KV per sequence", "device memory",
                  "weights", "reserve", "KV pool", "block", "blocks", "max concurrent sequences"):
        assert label in rows, f"no {label!r} row in:\n{out}"
    # llama-3-8b in bf16: 2 x 32 layers x 8 KV heads x 128 x 2 B = 128 KiB per token
    assert "128.00 KiB" in rows["KV per token"]
    assert "(2 x 32 layers x 8 KV heads x 128 x 2 B)" in rows["KV per token"]
    assert "1.00 GiB" in rows["KV per sequence"] and "8,192 tokens" in rows["KV per sequence"]
    assert "GiB" in rows["KV pool"] and "GiB" in rows["weights"]
    assert "16 tokens = 2.00 MiB" in rows["block"]
    assert "29,643" in rows["blocks"]  # (0.92, vLLM 0.33's default, x 79.19 GiB - 14.96 GiB) / 2 MiB
    assert "57.90" in rows["max concurrent sequences"]
    assert "does not fit" not in out


def test_math_json_is_one_object_with_consistent_numbers(capsys):
    rc, out, err = cli(capsys, "math", "--json", "--accounting", "lesson", "--hardware", "h100-80gb")
    assert rc == 0 and err == ""
    plan = json.loads(out)  # the whole of stdout is one JSON object
    assert isinstance(plan, dict)
    for key in MATH_KEYS:
        assert key in plan, key
    for key in MATH_KEYS[:-1]:
        assert isinstance(plan[key], int), (key, plan[key])
    assert isinstance(plan["max_concurrent_sequences"], float)
    # defaults but the GPU (the seeds' H100): llama-3-8b, bf16 KV, vLLM 0.33's 0.92 utilisation, block 16, max_model_len 8192
    assert plan["model"] == "llama-3-8b" and plan["hardware"] == "h100-80gb"
    assert plan["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2
    assert plan["kv_bytes_per_sequence"] == plan["kv_bytes_per_token"] * 8192
    assert plan["kv_pool_bytes"] == int(H100_MEMORY * 0.92 - plan["weights_bytes"])
    block_bytes = 16 * plan["kv_bytes_per_token"]
    assert plan["num_blocks"] == plan["kv_pool_bytes"] // block_bytes
    assert plan["max_concurrent_sequences"] == pytest.approx(plan["num_blocks"] / (8192 / 16))
    assert 8e9 * 2 * 0.95 < plan["weights_bytes"] < 8.1e9 * 2  # ~8.03 B parameters in bf16


def test_math_kv_heads_flag_overrides_the_preset(capsys):
    mha = math_json(capsys, "--model", "llama-2-7b")
    gqa = math_json(capsys, "--model", "llama-2-7b", "--kv-heads", "8")
    assert mha["kv_bytes_per_token"] == 2 * 32 * 32 * 128 * 2  # 512 KiB, the seeds' worked example
    assert gqa["kv_bytes_per_token"] * 4 == mha["kv_bytes_per_token"]
    assert gqa["kv_bytes_per_sequence"] * 4 == mha["kv_bytes_per_sequence"]
    assert gqa["num_blocks"] > 3.9 * mha["num_blocks"]


@pytest.mark.parametrize("flag, value, factor", [("--layers", 16, 0.5), ("--head-dim", 64, 0.5), ("--layers", 64, 2)])
def test_math_geometry_flags_override_the_preset(capsys, flag, value, factor):
    base = math_json(capsys, "--model", "llama-3-8b")
    changed = math_json(capsys, "--model", "llama-3-8b", flag, value)
    assert changed["kv_bytes_per_token"] == base["kv_bytes_per_token"] * factor


@pytest.mark.parametrize("dtype, ratio_to_fp16", [
    ("fp32", 2), ("fp16", 1), ("bf16", 1), ("fp8", 0.5), ("fp8_e4m3", 0.5), ("fp8_e5m2", 0.5),
])
def test_math_kv_cache_dtype(capsys, dtype, ratio_to_fp16):
    fp16 = math_json(capsys, "--model", "llama-2-7b", "--kv-cache-dtype", "fp16")
    plan = math_json(capsys, "--model", "llama-2-7b", "--kv-cache-dtype", dtype)
    assert plan["kv_cache_dtype"] == dtype
    assert plan["kv_bytes_per_token"] == fp16["kv_bytes_per_token"] * ratio_to_fp16
    assert plan["kv_bytes_per_sequence"] == fp16["kv_bytes_per_sequence"] * ratio_to_fp16
    assert plan["kv_pool_bytes"] == fp16["kv_pool_bytes"]  # same weights, same pool
    assert plan["num_blocks"] in (int(fp16["num_blocks"] / ratio_to_fp16), int(fp16["num_blocks"] / ratio_to_fp16) + 1)


def test_math_kv_cache_dtype_auto_follows_the_model(capsys):
    assert math_json(capsys, "--model", "llama-2-7b")["kv_cache_dtype"] == "fp16"
    assert math_json(capsys, "--model", "llama-3-8b")["kv_cache_dtype"] == "bf16"
    # fp8 weights keep a 16-bit KV cache unless asked (vLLM's "auto")
    assert math_json(capsys, "--model", "qwen3.6-27b-fp8")["kv_cache_dtype"] == "bf16"


@pytest.mark.parametrize("hardware, tp", [("h100-80gb", 1), ("8x-h100-80gb", 8)])
def test_math_reserve_bytes_lowers_the_pool_by_exactly_that_per_device(capsys, hardware, tp):
    model = "llama-3-70b" if tp > 1 else "llama-3-8b"
    base = math_json(capsys, "--model", model, "--hardware", hardware, "--accounting", "lesson")
    reserved = math_json(capsys, "--model", model, "--hardware", hardware, "--reserve-bytes", GiB, "--accounting", "lesson")
    assert base["tensor_parallel_size"] == tp
    assert base["kv_pool_bytes"] - reserved["kv_pool_bytes"] == GiB * tp
    assert reserved["extra_reserve_bytes"] == reserved["held_back_bytes"] == GiB * tp  # the lesson holds back no more
    assert reserved["num_blocks"] < base["num_blocks"]
    assert reserved["weights_bytes"] == base["weights_bytes"]


def test_math_reserve_is_shown_in_the_table(capsys):
    rc, out, _ = cli(capsys, "math", "--reserve-bytes", 2 * GiB)
    assert rc == 0
    assert any(line.startswith("reserve") and "2.00 GiB" in line for line in out.splitlines()), out


def test_math_shows_what_vllm_holds_back_and_the_lessons_formula_beside_it(capsys):
    rc, out, err = cli(capsys, "math", "--model", "gemma-3-27b", "--hardware", "h100-80gb", "--gpu-memory-utilization", 0.95,
                       "--vllm-version", "0.19", "--max-num-seqs", 1024, "--max-model-len", 8192)
    assert rc == 0 and err == ""
    rows = {line.split("  ")[0].strip(): line for line in out.splitlines()[2:]}
    for label in ("accounting", "weights", "activation peak", "non-torch memory", "CUDA graphs", "KV pool",
                  "layer groups", "GPU KV cache size", "the lesson's formula"):
        assert label in rows, f"no {label!r} row in:\n{out}"
    assert "vLLM 0.19" in rows["accounting"]
    assert "7 groups of 10 layers" in rows["layer groups"] and "8 padding layers" in rows["layer groups"]
    assert "not subtracted" in rows["CUDA graphs"]  # vLLM 0.19 captured graphs after sizing the KV cache
    plan = math_json(capsys, "--model", "gemma-3-27b", "--gpu-memory-utilization", 0.95, "--vllm-version", "0.19",
                     "--max-num-seqs", 1024, "--max-model-len", 8192)
    assert plan["kv_cache_size_tokens"] == pytest.approx(36560, rel=0.03)  # vLLM 0.19 logged 36,560 tokens
    # at 8K the windows save nothing, so the reserve makes vLLM's figure the smaller one
    assert plan["lesson_max_concurrent_sequences"] > plan["max_concurrent_sequences"]
    assert plan["held_back_bytes"] == plan["activation_bytes"] + plan["non_torch_bytes"] + plan["cudagraph_bytes"]


@pytest.mark.parametrize("dtype, expected", [("fp16", 14e9), ("bf16", 14e9), ("fp32", 28e9), ("fp8", 7e9),
                                             ("int8", 7e9), ("int4", 3.5e9), ("nf4", 3.5e9)])
def test_math_params_with_weight_dtype(capsys, dtype, expected):
    plan = math_json(capsys, "--params", "7e9", "--weight-dtype", dtype)
    assert plan["weights_bytes"] == int(expected)


def test_math_weights_bytes_overrides_the_derived_size(capsys):
    base = math_json(capsys)
    plan = math_json(capsys, "--weights-bytes", "20e9")
    assert plan["weights_bytes"] == 20_000_000_000
    assert base["kv_pool_bytes"] - plan["kv_pool_bytes"] == 20_000_000_000 - base["weights_bytes"]


def test_math_explicit_geometry_without_a_preset(capsys):
    plan = math_json(capsys, "--layers", 32, "--kv-heads", 8, "--head-dim", 128, "--weights-bytes", "16e9")
    assert plan["model"] == "custom"
    assert plan["kv_bytes_per_token"] == math_json(capsys, "--model", "llama-3-8b")["kv_bytes_per_token"]
    assert plan["weights_bytes"] == 16_000_000_000
    plan = math_json(capsys, "--layers", 32, "--kv-heads", 8, "--head-dim", 128, "--params", "7e9",
                     "--weight-dtype", "fp16")
    assert plan["weights_bytes"] == 14_000_000_000
    assert plan["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2


@pytest.mark.parametrize("argv, missing", [
    (["--layers", 32], "--kv-heads, --head-dim"),
    (["--layers", 32, "--kv-heads", 8], "--head-dim"),
    (["--kv-heads", 8, "--head-dim", 128], "--layers"),
    (["--layers", 32, "--kv-heads", 8, "--head-dim", 128], "--weights-bytes"),
])
def test_math_explicit_geometry_names_what_is_missing(capsys, argv, missing):
    rc, out, err = cli(capsys, "math", *argv)
    assert_clean_error(rc, err, missing)
    assert out == ""


def test_math_memory_flags(capsys):
    gib = math_json(capsys, "--memory-gib", 80)
    raw = math_json(capsys, "--memory-bytes", 80 * GiB)
    a100 = math_json(capsys, "--hardware", "a100-80gb", "--memory-gib", 80)
    assert gib["memory_bytes"] == raw["memory_bytes"] == a100["memory_bytes"] == 80 * GiB
    assert gib["kv_pool_bytes"] == raw["kv_pool_bytes"]
    # the same memory on another card: the lesson's pool is the same (vLLM's token budget differs)
    assert math_json(capsys, "--memory-gib", 80, "--accounting", "lesson")["kv_pool_bytes"] == \
        math_json(capsys, "--hardware", "a100-80gb", "--memory-gib", 80, "--accounting", "lesson")["kv_pool_bytes"]
    # presets hold the CUDA-visible total: A100 80GB 79.15 GiB, A100 40GB 39.50 GiB
    assert math_json(capsys, "--hardware", "a100-80gb")["memory_bytes"] == 81050 * 1024**2
    assert math_json(capsys, "--hardware", "a100-40gb")["memory_bytes"] == int(39.5 * GiB)
    assert math_json(capsys, "--hardware", "l4-24gb", "--memory-gib", 48)["memory_bytes"] == 48 * GiB


def test_math_gpu_memory_utilization(capsys):
    low = math_json(capsys, "--gpu-memory-utilization", 0.5)
    high = math_json(capsys, "--gpu-memory-utilization", 0.9)
    full = math_json(capsys, "--gpu-memory-utilization", 1, "--accounting", "lesson")
    assert low["gpu_memory_utilization"] == 0.5
    assert abs((high["kv_pool_bytes"] - low["kv_pool_bytes"]) - 0.4 * H100_MEMORY) <= 2
    assert full["kv_pool_bytes"] == H100_MEMORY - full["weights_bytes"]


def test_math_max_model_len_and_block_size(capsys):
    base = math_json(capsys)
    short = math_json(capsys, "--max-model-len", 4096)
    assert short["max_model_len"] == 4096
    assert short["kv_bytes_per_sequence"] == base["kv_bytes_per_sequence"] // 2
    assert short["num_blocks"] == base["num_blocks"]
    assert short["max_concurrent_sequences"] == pytest.approx(2 * base["max_concurrent_sequences"])
    big = math_json(capsys, "--block-size", 32)
    assert big["block_size"] == 32 and big["block_bytes"] == 2 * base["block_bytes"]
    assert big["num_blocks"] == base["kv_pool_bytes"] // big["block_bytes"]
    assert big["blocks_per_sequence"] == 256
    # a partial last block still takes a whole block
    odd = math_json(capsys, "--max-model-len", 1000)
    assert odd["blocks_per_sequence"] == 63
    assert odd["max_concurrent_sequences"] == pytest.approx(odd["num_blocks"] / 63)


def test_math_tensor_parallel(capsys):
    node = math_json(capsys, "--model", "llama-3-70b", "--hardware", "8x-h100-80gb")
    assert node["tensor_parallel_size"] == 8  # default: all the devices the hardware has
    assert node["memory_bytes"] == 8 * H100_MEMORY
    assert node["kv_bytes_per_token_per_device"] * 8 == node["kv_bytes_per_token"]
    half = math_json(capsys, "--model", "llama-3-70b", "--hardware", "8x-h100-80gb", "--tensor-parallel-size", 4)
    assert half["tensor_parallel_size"] == 4
    assert half["memory_bytes"] == 4 * H100_MEMORY
    assert half["kv_bytes_per_token"] == node["kv_bytes_per_token"]
    assert half["kv_pool_bytes"] < node["kv_pool_bytes"]


@pytest.mark.parametrize("preset", ["llama-3-8b", "mistral-7b", "qwen2.5-7b", "llama-2-7b"])
@pytest.mark.parametrize("as_directory", [False, True])
def test_math_config_json_matches_the_preset(capsys, tmp_path, preset, as_directory):
    folder = tmp_path / preset
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(hf_config_for(preset)), encoding="utf-8")
    from_preset = math_json(capsys, "--model", preset)
    from_config = math_json(capsys, "--config", folder if as_directory else folder / "config.json")
    for key in from_preset:
        if key != "model":
            assert from_config[key] == from_preset[key], key


def test_math_config_json_with_overrides_and_text_config(capsys, tmp_path):
    path = tmp_path / "config.json"
    # multimodal checkpoints nest the language model under text_config
    path.write_text(json.dumps({"model_type": "llava", "text_config": hf_config_for("llama-3-8b")}))
    plan = math_json(capsys, "--config", path)
    assert plan["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2
    assert math_json(capsys, "--config", path, "--kv-heads", 4)["kv_bytes_per_token"] == plan["kv_bytes_per_token"] // 2


def test_math_config_json_without_num_key_value_heads_is_multi_head(capsys, tmp_path):
    cfg = hf_config_for("llama-2-7b")
    del cfg["num_key_value_heads"], cfg["head_dim"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert math_json(capsys, "--config", path)["kv_bytes_per_token"] == 2 * 32 * 32 * 128 * 2


def test_math_when_the_weights_do_not_fit_still_prints_and_says_so(capsys):
    rc, out, err = cli(capsys, "math", "--model", "llama-3-70b", "--hardware", "l4-24gb")
    assert rc == 0 and err == ""
    assert "KV cache memory math" in out
    fit_rows = [line for line in out.splitlines() if line.startswith("does not fit")]
    assert len(fit_rows) == 1 and "weights" in fit_rows[0]
    plan = math_json(capsys, "--model", "llama-3-70b", "--hardware", "l4-24gb")
    assert plan["num_blocks"] == 0
    assert plan["kv_pool_bytes"] < 0
    assert plan["max_concurrent_sequences"] == 0.0 and isinstance(plan["max_concurrent_sequences"], float)


# -- kvscope presets -------------------------------------------------------------------------------


def test_presets_lists_every_kind(capsys):
    rc, out, err = cli(capsys, "presets")
    assert rc == 0 and err == ""
    lines = out.splitlines()
    headers = [line for line in lines if not line.startswith(" ")]
    assert headers == ["models:", "hardware:", "workloads:"]
    listed = {line.split()[0] for line in lines if line.startswith("  ")}
    for kind in ("models", "hardware", "workloads"):
        for name in preset_names(kind):
            assert name in listed, (kind, name)
    assert "this-machine" in listed
    assert "(invalid" not in out  # every shipped preset loads
    for line in lines:
        if line.startswith("  "):
            assert len(line.split(None, 1)) == 2, f"no description: {line!r}"


def test_presets_of_one_kind(capsys):
    rc, out, _ = cli(capsys, "presets", "workloads")
    assert rc == 0
    assert out.splitlines()[0] == "workloads:"
    assert "models:" not in out and "llama-3-8b" not in out
    assert {line.split()[0] for line in out.splitlines()[1:]} == set(preset_names("workloads"))



def test_readable_lesson_names_each_lesson_by_its_title():
    from kvscope.app.cli.lessons import readable_lesson

    assert readable_lesson("seed 004 (Lesson 10, KV Cache & Memory Math), section 4") == \
        'the lesson "Lesson 10, KV Cache & Memory Math", section 4'
    # a number alone takes the title from the table, or from a titled mention earlier in the text
    assert readable_lesson("seed 002") == 'the lesson "KV cache & continuous batching"'
    assert readable_lesson("seed 007 (Speculative Decoding); seed 007") == \
        'the lesson "Speculative Decoding"; the lesson "Speculative Decoding"'
    assert readable_lesson("seed 123") == "another lesson of the course"
    assert readable_lesson("the seeds' worked example") == "the lessons' worked example"


def texts_shown_to_users() -> dict[str, str]:
    """What `kvscope presets`, `kvscope math`, `kvscope compare` and the window print of each preset and scenario
    (the "source" fields are provenance, kept in the files, and not shown)."""
    from kvscope.app.cli.lessons import readable_lesson
    from kvscope.app.lab.presets import load_hardware, load_model, load_workload
    from kvscope.app.lab.scenarios import load_scenario, scenario_names

    texts = {}
    for kind, load in (("models", load_model), ("hardware", load_hardware), ("workloads", load_workload)):
        for name in preset_names(kind):
            preset = load(name)
            for field in ("description", "weights_source"):
                texts[f"{kind}/{name}.{field}"] = getattr(preset, field, "") or ""
    for name in scenario_names():
        scenario = load_scenario(name)
        for field in ("title", "caption", "question", "claim"):
            texts[f"scenarios/{name}.{field}"] = getattr(scenario, field)
        texts[f"scenarios/{name}.seed_lesson"] = readable_lesson(scenario.seed_lesson)
        texts[f"scenarios/{name}.answer"] = " ".join(scenario.answer.choices) + " " + scenario.reveal_from.describe()
    return texts


def test_no_preset_or_scenario_text_shown_to_users_says_seed():
    """The course numbers its lessons "seed 000".."seed 004"; a reader knows them by their titles. A random
    seed is the one seed a user meets (tiny-llama's weights come from one)."""
    texts = texts_shown_to_users()
    assert len(texts) > 50 and any("Lesson 10" in text for text in texts.values())
    said = {where: text for where, text in texts.items()
            if re.search(r"\bseeds?\b|\bseed's\b", text, re.IGNORECASE) and "random weights from a fixed seed" not in text}
    assert said == {}


def test_math_names_the_lesson_whose_formula_it_shows(capsys):
    for accounting, row in (("lesson", "accounting"), ("vllm", "the lesson's formula")):
        rc, out, _ = cli(capsys, "math", "--model", "qwen3.6-27b-fp8", "--hardware", "h100-nvl-94gb",
                         "--accounting", accounting)
        assert rc == 0
        rows = {line.split("  ")[0].strip(): line for line in out.splitlines()[2:]}
        assert 'the formula of the lesson "Inference Engineering Lesson 10: KV Cache & Memory Math"' in rows[row], out
        assert "seed" not in out.lower()

def test_no_command_prints_help_and_exits_2(capsys):
    rc, out, _ = cli(capsys)
    assert rc == 2
    assert "math" in out and "run" in out and "presets" in out


# -- the command line's shape: one module per command, engine flags generated from EngineArgs ------


def test_each_command_is_one_module_named_after_it():
    import importlib

    from kvscope.app.cli.main import COMMANDS, build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert list(commands.choices) == list(COMMANDS) and COMMANDS[-1] == "bench"  # bench too: a module of its own
    for name in COMMANDS:
        module = importlib.import_module(f"kvscope.app.cli.{name}")
        assert callable(module.add_parser) and callable(module.run), name
        assert commands.choices[name].get_default("func") is module.run, name


def test_every_engine_argument_with_a_flag_is_generated_from_engine_args(capsys):
    from kvscope.app.cli import options

    rc, usage, _ = cli(capsys, "run", "--help")
    assert rc == 0
    fields = options.engine_flag_fields()
    assert {f.name for f in fields} >= {"block_size", "gpu_memory_utilization", "max_model_len", "max_num_seqs",
                                         "max_num_batched_tokens", "kv_cache_dtype", "enable_prefix_caching",
                                         "enable_chunked_prefill", "tensor_parallel_size"}
    text = " ".join(usage.split())  # argparse wraps the help
    for field in fields:
        flag = "--" + field.name.replace("_", "-")  # vLLM's spelling
        assert flag in usage, flag
        if field.metadata["default_text"] is None and type(field.default) in (int, float):
            assert f"{field.metadata['help']} (default {field.default:g})" in text, flag
    assert "(vLLM's: 1,024 on GPUs of 70 GiB or more other than the A100, else 256)" in text
    assert "(default: vLLM's, 0.92 from vLLM 0.21, 0.9 before)" in text and "(default 16)" in text
    # no flags given: every engine argument is at EngineArgs' default
    from kvscope.app.cli.main import build_parser

    assert options.engine_args_from_args(build_parser().parse_args(["run"])) == EngineArgs()
    assert options.engine_args_from_args(build_parser().parse_args(["math"])) == EngineArgs()


def test_a_new_engine_argument_gets_its_flag_with_no_edit_to_the_command_line(monkeypatch):
    """What `add a field to EngineArgs` means for the CLI: nothing, the flag follows."""
    from dataclasses import dataclass, field as dataclass_field

    from kvscope.app.cli import options

    @dataclass(frozen=True)
    class WithLoras(EngineArgs):
        max_loras: int = dataclass_field(default=4, metadata={
            "help": "adapters in one batch", "flags": "scheduler", "default_text": None, "choices": (), "unit": ""})

    monkeypatch.setattr(options, "EngineArgs", WithLoras)
    parser = argparse.ArgumentParser(prog="kvscope")
    options.add_scheduler_options(parser)
    assert "adapters in one batch (default 4)" in " ".join(parser.format_help().split())
    assert options.engine_args_from_args(parser.parse_args(["--max-loras", "2"])).max_loras == 2
    assert options.engine_args_from_args(parser.parse_args([])).max_loras == 4
    with pytest.raises(SystemExit):
        parser.parse_args(["--max-loras", "1.5"])  # an int field takes whole numbers only


def test_kvscope_math_imports_neither_torch_nor_qt():
    code = ("import sys, contextlib, io\n"
            "from kvscope.app.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert main(['math']) == 0\n"
            "heavy = sorted(m for m in ('torch', 'transformers', 'PySide6', 'pyqtgraph') if m in sys.modules)\n"
            "assert not heavy, heavy\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


# -- kvscope run -----------------------------------------------------------------------------------


def test_run_end_to_end_prints_the_summary_table(tmp_path):
    proc = subprocess_cli("run", "--model", "llama-3-8b", "--hardware", "h100-80gb", "--workload", "chat",
                          "--requests", 30, "--seed", 3, "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # --quiet: no progress line
    out = proc.stdout
    assert "KV cache memory math" not in out and out.startswith("Memory\n")
    assert "Run: chat on llama-3-8b / h100-80gb" in out
    rows = {line.split("  ")[0]: line for line in out.splitlines()}
    assert rows["requests completed"].split()[-1] == "30"
    assert rows["requests rejected"].split()[-1] == "0"
    for label, unit in (("output throughput", "tokens/s"), ("TTFT p50 / p99", "s"),
                        ("KV cache usage peak / mean", "%"), ("duration (engine clock)", " s"),
                        ("wall time", " s")):
        assert label in rows, label
        assert rows[label].rstrip().endswith(unit) or unit in rows[label], rows[label]
    assert out.rstrip().splitlines()[-1].startswith("wall time")


def test_run_json_to_stdout_is_pure_json_and_progress_goes_to_stderr(tmp_path):
    proc = subprocess_cli("run", "--requests", 20, "--json", "-", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # nothing but the JSON on stdout
    assert report["completed"] == 20
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("step ")  # the progress line, not on stdout


def test_run_json_fields(capsys):
    report = run_json(capsys, "--model", "llama-3-8b", "--hardware", "h100-80gb", "--workload", "chat")
    for key in RUN_KEYS:
        assert key in report, key
    assert report["completed"] + report["rejected"] == 40
    assert report["completed"] == 40 and report["rejected"] == 0
    assert isinstance(report["preemptions"], int) and isinstance(report["peak_running"], int)
    assert report["throughput_tokens_per_s"] > 0
    assert 0 < report["ttft_p50_s"] <= report["ttft_p99_s"]
    assert 0 < report["peak_kv_usage"] <= 1
    assert 1 <= report["peak_running"] <= 40
    assert report["model"] == "llama-3-8b" and report["hardware"] == "h100-80gb" and report["workload"] == "chat"
    assert report["seed"] == 0
    assert report["engine_args"] == {
        "block_size": 16, "gpu_memory_utilization": 0.92, "kv_cache_memory_bytes": None, "max_model_len": 8192,
        "max_num_seqs": 1024,  # vLLM's default on an H100
        "max_num_batched_tokens": 8192, "kv_cache_dtype": "bf16", "enable_prefix_caching": True,
        "enable_chunked_prefill": True, "tensor_parallel_size": 1, "scheduling": "continuous", "allocation": "paged",
    }
    assert report["num_blocks"] == math_json(capsys)["num_blocks"]


def test_run_json_to_a_file_also_prints_the_table(capsys, tmp_path):
    out_path = tmp_path / "summary.json"
    rc, out, err = cli(capsys, "run", "--quiet", "--requests", 20, "--json", out_path)
    assert rc == 0 and err == ""
    assert "Run: chat on llama-3-8b / l4-24gb" in out  # the default GPU
    report = json.loads(out_path.read_text(encoding="utf-8"))
    assert report["completed"] == 20
    for key in RUN_KEYS:
        assert key in report


def test_run_same_seed_same_metrics(capsys):
    argv = ("--workload", "shared-system-prompt", "--seed", 7)
    first, second = run_json(capsys, *argv), run_json(capsys, *argv)
    first.pop("wall_time_s"), second.pop("wall_time_s")
    assert first == second
    other = run_json(capsys, "--workload", "shared-system-prompt", "--seed", 8)
    other.pop("wall_time_s")
    assert other["seed"] == 8
    assert (other["prompt_tokens"], other["output_tokens"]) != (first["prompt_tokens"], first["output_tokens"])


@pytest.mark.parametrize("argv, field, expected", [
    (["--block-size", 32], "block_size", 32),
    (["--gpu-memory-utilization", 0.8], "gpu_memory_utilization", 0.8),
    (["--max-model-len", 4096], "max_model_len", 4096),
    (["--max-num-seqs", 4], "max_num_seqs", 4),
    (["--max-num-batched-tokens", 1024], "max_num_batched_tokens", 1024),
    (["--kv-cache-dtype", "fp8"], "kv_cache_dtype", "fp8"),
    (["--no-enable-prefix-caching"], "enable_prefix_caching", False),
    (["--enable-prefix-caching"], "enable_prefix_caching", True),
    (["--no-enable-chunked-prefill"], "enable_chunked_prefill", False),
    (["--scheduling", "static"], "scheduling", "static"),
    (["--allocation", "contiguous"], "allocation", "contiguous"),
    (["--model", "llama-3-70b", "--hardware", "8x-h100-80gb", "--tensor-parallel-size", 4],
     "tensor_parallel_size", 4),
])
def test_run_engine_flags_reach_the_engine(capsys, argv, field, expected):
    report = run_json(capsys, *argv, requests=10)
    assert report["engine_args"][field] == expected
    assert report["completed"] + report["rejected"] == 10


def test_run_without_chunked_prefill_budget_covers_a_whole_prompt(capsys):
    report = run_json(capsys, "--no-enable-chunked-prefill", "--model", "mistral-7b", requests=10)
    assert report["engine_args"]["max_num_batched_tokens"] == 32768  # max(8192, max_model_len)


def test_run_flags_change_behaviour(capsys):
    base = run_json(capsys)
    assert base["peak_running"] > 2
    assert run_json(capsys, "--max-num-seqs", 2)["peak_running"] == 2
    # chat prompts reach 7,000 tokens: a short max_model_len rejects some
    short = run_json(capsys, "--max-model-len", 1024)
    assert short["rejected"] > 0 and short["completed"] + short["rejected"] == 40
    # static batching waits for a batch to drain before admitting more
    assert run_json(capsys, "--scheduling", "static")["ttft_p50_s"] > 5 * base["ttft_p50_s"]
    # a contiguous max_model_len reservation fills the pool far sooner than paged blocks
    assert run_json(capsys, "--allocation", "contiguous")["peak_kv_usage"] > 2 * base["peak_kv_usage"]
    # fp8 KV roughly doubles the blocks
    assert run_json(capsys, "--kv-cache-dtype", "fp8")["num_blocks"] in (2 * base["num_blocks"], 2 * base["num_blocks"] + 1)
    assert run_json(capsys, "--gpu-memory-utilization", 0.5)["kv_pool_bytes"] < base["kv_pool_bytes"]


def test_run_prefix_caching_switch(capsys):
    on = run_json(capsys, "--workload", "shared-system-prompt")
    off = run_json(capsys, "--workload", "shared-system-prompt", "--no-enable-prefix-caching")
    assert on["prefix_cache_hit_rate"] > 0.2
    assert off["prefix_cache_hit_rate"] == 0.0
    assert on["ttft_p50_s"] < off["ttft_p50_s"]


def test_run_small_memory_preempts_and_fills_the_pool(capsys):
    # ~67 blocks left after llama-3-8b's weights, by the lesson's accounting (vLLM's reserve would leave none)
    report = run_json(capsys, "--memory-gib", 16.4, "--accounting", "lesson")
    assert report["num_blocks"] < 100
    assert report["peak_kv_usage"] == pytest.approx(1.0)
    assert report["preemptions"] > 0
    assert report["rejected"] > 0  # requests longer than the whole pool are turned away up front


def test_run_trace_replay(capsys, tmp_path):
    trace = write_trace(tmp_path / "mytrace.csv", "0,100,10", "0.5,200,20", "1.5,50,5")
    rc, out, err = cli(capsys, "run", "--quiet", "--trace", trace, "--json", "-")
    assert rc == 0, err
    report = json.loads(out)
    assert report["workload"] == "mytrace"
    assert report["completed"] == 3
    assert report["prompt_tokens"] == 350 and report["output_tokens"] == 35
    limited = run_json(capsys, "--trace", trace, requests=2)
    assert limited["completed"] == 2 and limited["prompt_tokens"] == 300


def test_run_azure_trace_preset_small(capsys):
    report = run_json(capsys, "--workload", "azure-conv", requests=30)
    assert report["workload"] == "azure-conv"
    assert report["completed"] + report["rejected"] == 30


def test_run_config_json_model(capsys, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(hf_config_for("llama-3-8b")))
    report = run_json(capsys, "--config", tmp_path, requests=10)
    assert report["completed"] == 10
    assert report["num_blocks"] == math_json(capsys)["num_blocks"]


# -- bad input: one line on stderr, exit 2, no traceback --------------------------------------------


@pytest.mark.parametrize("kind, argv", [
    ("model", ["math", "--model", "nope"]),
    ("hardware", ["math", "--hardware", "nope"]),
    ("workload", ["run", "--workload", "nope", "--requests", 5]),
])
def test_unknown_preset_lists_the_known_ones(capsys, kind, argv):
    rc, out, err = cli(capsys, *argv)
    line = assert_clean_error(rc, err, f"unknown {kind} preset 'nope'", "known:")
    folder = {"model": "models", "hardware": "hardware", "workload": "workloads"}[kind]
    for name in preset_names(folder):
        assert name in line
    assert out == ""


@pytest.mark.parametrize("argv, fragments", [
    (["math", "--block-size", 0], ["block_size", "greater than 0", "got 0"]),
    (["math", "--block-size", -16], ["block_size", "greater than 0"]),
    (["math", "--memory-gib", -1], ["memory", "greater than 0"]),
    (["math", "--memory-gib", 0], ["memory", "greater than 0"]),
    (["math", "--memory-bytes", 0], ["memory", "greater than 0"]),
    (["math", "--max-model-len", 0], ["max_model_len", "greater than 0"]),
    (["math", "--gpu-memory-utilization", 0], ["gpu_memory_utilization", "greater than 0"]),
    (["math", "--gpu-memory-utilization", 1.5], ["gpu_memory_utilization", "(0, 1]", "1.5"]),
    (["math", "--gpu-memory-utilization", -0.1], ["gpu_memory_utilization"]),
    (["math", "--weights-bytes", -5], ["--weights-bytes", "greater than 0", "-5"]),
    (["math", "--weights-bytes", 0], ["--weights-bytes", "greater than 0"]),
    (["math", "--params", 0], ["--params", "greater than 0"]),
    (["math", "--reserve-bytes", -1], ["--reserve-bytes", "0 or more"]),
    (["math", "--tensor-parallel-size", 0], ["tensor_parallel_size", "greater than 0"]),
    (["math", "--layers", 0, "--kv-heads", 2, "--head-dim", 64, "--weights-bytes", "1e9"],
     ["num_hidden_layers", "greater than 0"]),
    (["run", "--max-num-seqs", 0, "--requests", 5], ["max_num_seqs", "greater than 0"]),
    (["run", "--max-num-batched-tokens", 0, "--requests", 5], ["max_num_batched_tokens", "greater than 0"]),
    (["run", "--requests", 0], ["num_requests", "at least 1", "got 0"]),
    (["run", "--requests", -3], ["num_requests", "at least 1"]),
    (["run", "--arrival-rate", -1, "--requests", 5], ["arrival_rate_per_s"]),
    (["run", "--block-size", 0, "--requests", 5], ["block_size", "greater than 0"]),
    (["run", "--memory-gib", -1, "--requests", 5], ["memory", "greater than 0"]),
])
def test_zero_or_negative_sizes(capsys, argv, fragments):
    rc, out, err = cli(capsys, *argv)
    assert_clean_error(rc, err, *fragments)
    assert out == ""


def test_kv_heads_that_do_not_divide_the_attention_heads(capsys):
    rc, out, err = cli(capsys, "math", "--model", "llama-3-8b", "--kv-heads", 5)
    assert_clean_error(rc, err, "num_key_value_heads (5)", "num_attention_heads (32)", "divide")
    assert out == ""


@pytest.mark.parametrize("flag, what", [("--kv-cache-dtype", "kv_cache_dtype"), ("--weight-dtype", "weight dtype")])
def test_unknown_dtype_lists_the_choices(capsys, flag, what):
    rc, out, err = cli(capsys, "math", flag, "int3")
    line = assert_clean_error(rc, err, f"unknown {what} 'int3'", "fp16", "bf16", "fp8")
    if flag == "--kv-cache-dtype":
        assert "fp8_e4m3" in line and "fp8_e5m2" in line
    assert out == ""


def test_tensor_parallel_the_hardware_cannot_provide(capsys):
    rc, out, err = cli(capsys, "math", "--hardware", "h100-80gb", "--tensor-parallel-size", 2)
    assert_clean_error(rc, err, "tensor_parallel_size 2", "h100-80gb", "has 1")
    rc, out, err = cli(capsys, "run", "--model", "llama-3-70b", "--hardware", "8x-h100-80gb",
                       "--tensor-parallel-size", 16, "--requests", 5)
    assert_clean_error(rc, err, "tensor_parallel_size 16", "has 8")
    # 8 KV heads cannot be split evenly over 3 devices
    rc, out, err = cli(capsys, "math", "--model", "llama-3-70b", "--hardware", "8x-h100-80gb",
                       "--tensor-parallel-size", 3)
    assert_clean_error(rc, err, "tensor_parallel_size 3", "num_key_value_heads 8")


def test_run_when_the_weights_do_not_fit(capsys):
    rc, out, err = cli(capsys, "run", "--model", "llama-3-70b", "--hardware", "l4-24gb", "--requests", 5)
    assert_clean_error(rc, err, "no room for a KV cache", "llama-3-70b", "l4-24gb", "GiB")
    assert out == ""


def test_run_budget_too_small_without_chunked_prefill(capsys):
    rc, _, err = cli(capsys, "run", "--no-enable-chunked-prefill", "--max-num-batched-tokens", 100, "--requests", 5)
    assert_clean_error(rc, err, "max_num_batched_tokens (100)", "max_model_len (8192)")


def test_json_path_in_a_missing_folder_fails_before_the_run(capsys, tmp_path):
    target = tmp_path / "no" / "such" / "out.json"
    rc, out, err = cli(capsys, "run", "--requests", 5, "--json", target)
    assert_clean_error(rc, err, str(target), "folder does not exist")
    assert out == ""  # said before the run, not after
    assert not target.parent.exists()


# -- config.json errors


@pytest.mark.parametrize("text, fragments", [
    ('{"num_hidden_layers": 32,', ["malformed JSON", "line 1"]),
    ('{\n  "num_hidden_layers": 32\n  "hidden_size": 4096\n}', ["malformed JSON", "line 3"]),
    ("", ["empty (0 bytes)", "no JSON in it"]),
    ("[1, 2]", ["expected a JSON object"]),
    ('{"num_hidden_layers": 32}', ["missing field(s)", "num_attention_heads", "hidden_size", "vocab_size"]),
    ('{"num_hidden_layers": "32", "num_attention_heads": 32, "hidden_size": 4096, "vocab_size": 32000}',
     ["num_hidden_layers", "whole number"]),
    ('{"num_hidden_layers": 32, "num_attention_heads": 0, "hidden_size": 4096, "vocab_size": 32000}',
     ["num_attention_heads", "greater than 0"]),
    ('{"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 5, "hidden_size": 4096, '
     '"vocab_size": 32000}', ["num_key_value_heads (5)", "divide"]),
    ('{"num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096, "vocab_size": 32000, '
     '"torch_dtype": "int3"}', ["torch_dtype", "int3"]),
])
def test_bad_config_json(capsys, tmp_path, text, fragments):
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    rc, out, err = cli(capsys, "math", "--config", path)
    assert_clean_error(rc, err, *fragments)
    assert out == ""


def test_config_that_does_not_exist(capsys, tmp_path):
    rc, _, err = cli(capsys, "math", "--config", tmp_path / "nope.json")
    assert_clean_error(rc, err, "nope.json", "cannot read")
    rc, _, err = cli(capsys, "math", "--config", tmp_path)  # a folder without config.json
    assert_clean_error(rc, err, "config.json", "cannot read")


# -- trace errors


@pytest.mark.parametrize("rows, fragments", [
    # the column and the cell, or the cells counted against the header (was "cannot read row" and the row)
    (["0,100,10", "1,abc,5"], ["line 3", "ContextTokens 'abc'", "whole number of tokens"]),
    (["0,100,10", "1,20,5", "2,20"], ["line 4", "2 cells where the header names 3", "'2,20'"]),
    (["0,100,10", "later,20,5"], ["line 3"]),
    (["0,100,10", "1,0,5"], ["line 3", "at least 1"]),
    (["0,100,10", "1,10,-2"], ["line 3", "at least 1"]),
    (["5,100,10", "1,10,5"], ["line 3", "backwards"]),
    ([], ["no requests"]),
])
def test_trace_with_a_bad_row_names_the_line(capsys, tmp_path, rows, fragments):
    trace = write_trace(tmp_path / "t.csv", *rows)
    rc, out, err = cli(capsys, "run", "--trace", trace)
    assert_clean_error(rc, err, str(trace), *fragments)
    assert out == ""


def test_trace_with_a_wrong_header_or_empty_file(capsys, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("a,b,c\n1,2,3\n")
    rc, _, err = cli(capsys, "run", "--trace", trace)
    assert_clean_error(rc, err, "line 1", "TIMESTAMP")
    trace.write_text("")
    rc, _, err = cli(capsys, "run", "--trace", trace)
    assert_clean_error(rc, err, "empty")


def test_trace_that_does_not_exist(capsys, tmp_path):
    missing = tmp_path / "missing.csv"
    rc, out, err = cli(capsys, "run", "--trace", missing)
    assert_clean_error(rc, err, str(missing), "no such file")
    assert out == ""


# -- argparse errors (usage + one error line is allowed)


@pytest.mark.parametrize("argv, fragment", [
    (["math", "--block-size", "abc"], "--block-size"),
    (["math", "--block-size", "1.5"], "whole"),
    (["math", "--memory-gib", "lots"], "not a number"),
    (["run", "--scheduling", "fifo"], "--scheduling"),
    (["run", "--allocation", "buddy"], "--allocation"),
    (["math", "--model", "llama-3-8b", "--config", "x.json"], "not allowed with"),
    (["math", "--memory-gib", 1, "--memory-bytes", 1], "not allowed with"),
    (["math", "--requests", 4], "unrecognized arguments"),  # math takes the scheduler flags (its reserve), not run's
    (["presets", "gpus"], "invalid choice"),
])
def test_argparse_errors(capsys, argv, fragment):
    rc, out, err = cli(capsys, *argv)
    assert_clean_error(rc, err, fragment)
    assert out == ""


# -- the same, end to end as a user sees them


@pytest.mark.parametrize("argv, fragment", [
    (["math", "--model", "nope"], "unknown model preset"),
    (["math", "--kv-cache-dtype", "int3"], "unknown kv_cache_dtype"),
    (["math", "--config", "bad.json"], "malformed JSON"),
    (["math", "--config", "missing.json"], "missing field(s)"),
    (["run", "--trace", "bad.csv"], "line 3"),
    (["run", "--requests", 5, "--json", "nodir/out.json"], "folder does not exist"),
    (["run", "--model", "llama-3-70b", "--hardware", "l4-24gb", "--requests", 5], "no room for a KV cache"),
    (["math", "--block-size", "abc"], "--block-size"),
])
def test_errors_end_to_end(tmp_path, argv, fragment):
    (tmp_path / "bad.json").write_text('{"num_hidden_layers": 32,')
    (tmp_path / "missing.json").write_text('{"num_hidden_layers": 32}')
    write_trace(tmp_path / "bad.csv", "0,100,10", "1,abc,5")
    proc = subprocess_cli(*argv, cwd=tmp_path)
    assert_clean_error(proc.returncode, proc.stderr, fragment)
    assert proc.stdout == ""


# -- workload TOML: the CLI takes presets only, so malformed TOML is checked through the loaders


def test_malformed_workload_toml_is_a_config_error(tmp_path):
    path = tmp_path / "w.toml"
    path.write_text('name = "w"\nnum_requests = = 3\n')
    with pytest.raises(ConfigError, match=r"malformed TOML.*line 2"):
        load_workload_file(path)
    with pytest.raises(ConfigError, match="malformed TOML"):
        read_toml(path, "x")
    with pytest.raises(ConfigError, match="cannot read"):
        load_workload_file(tmp_path / "none.toml")
    path.write_text('name = "w"\nnum_requests = 0\n')
    with pytest.raises(ConfigError, match="num_requests"):
        load_workload_file(path)
    path.write_text('name = "w"\nnum_requests = 5\nprompt_tokens = 10\noutput_tokens = 5\n')
    spec = load_workload_file(path)
    assert spec.num_requests == 5 and spec.prompt_tokens.value == 10


def test_a_workload_toml_file_can_be_given_by_path(capsys, tmp_path):
    path = tmp_path / "w.toml"
    path.write_text('name = "w"\nnum_requests = 5\noutput_tokens = 7\n')
    rc, out, _ = cli(capsys, "run", "--workload", path, "--json", "-", "--quiet")
    assert rc == 0
    report = json.loads(out)
    assert report["workload"] == "w" and report["completed"] == 5 and report["output_tokens"] == 35
    path.write_text('name = "w"\nnum_requests = -5\n')
    rc, _, err = cli(capsys, "run", "--workload", path)
    assert_clean_error(rc, err, "num_requests must be at least 1")


# -- regressions: input that once crashed, hung or misled ------------------------------------------


@pytest.mark.parametrize("argv", [
    ["math", "--memory-gib", "nan"],
    ["math", "--memory-gib", "inf"],
    ["math", "--memory-bytes", "inf"],
    ["math", "--weights-bytes", "nan"],
    ["math", "--weights-bytes", "inf"],
    ["math", "--reserve-bytes", "nan"],
    ["math", "--reserve-bytes", "inf"],
    ["math", "--params", "inf"],
    ["math", "--params", "nan"],
])
def test_non_finite_float_flags_crash(capsys, argv):
    rc, _, err = cli(capsys, *argv)
    assert_clean_error(rc, err)


@pytest.mark.parametrize("argv", [["math", "--block-size", "inf"], ["run", "--seed", "inf"],
                                  ["run", "--requests", "inf"], ["math", "--max-model-len", "inf"]])
def test_whole_number_flags_given_infinity_crash(capsys, argv):
    rc, _, err = cli(capsys, *argv)
    assert_clean_error(rc, err)


def test_negative_seed_crashes(capsys):
    rc, _, err = cli(capsys, "run", "--seed", -1, "--requests", 5)
    assert_clean_error(rc, err, "seed")


def test_absurd_request_count_crashes(capsys):
    rc, _, err = cli(capsys, "run", "--requests", "1e30", "--quiet")
    assert_clean_error(rc, err, "requests")


def test_config_with_non_object_quantization_config(capsys, tmp_path):
    cfg = hf_config_for("llama-3-8b")
    cfg["quantization_config"] = "fp8"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    rc, _, err = cli(capsys, "math", "--config", tmp_path)
    assert_clean_error(rc, err, "quantization_config")


@pytest.mark.parametrize("value", ["NaN", "1e400", "Infinity"])
def test_config_with_non_finite_numbers(capsys, tmp_path, value):
    path = tmp_path / "config.json"
    path.write_text('{"num_hidden_layers": %s, "num_attention_heads": 32, "hidden_size": 4096, '
                    '"vocab_size": 32000}' % value)
    rc, _, err = cli(capsys, "math", "--config", path)
    assert_clean_error(rc, err, "num_hidden_layers")


def test_config_that_is_not_utf8(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b"\xff\xfe{\x00}\x00")
    rc, _, err = cli(capsys, "math", "--config", path)
    assert_clean_error(rc, err, "config")


def test_trace_that_is_not_utf8(capsys, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_bytes(TRACE_HEADER.encode() + b"0,100,10\n\xff\xfe,1,1\n")
    rc, _, err = cli(capsys, "run", "--trace", trace)
    assert_clean_error(rc, err, "line")


@pytest.mark.parametrize("rows", [["0,100,10", "nan,20,5"], ["inf,100,10", "inf,20,5"]])
def test_trace_with_non_finite_timestamp_hangs(tmp_path, rows):
    trace = write_trace(tmp_path / "t.csv", *rows)
    proc = subprocess_cli("run", "--quiet", "--trace", trace, cwd=tmp_path, timeout=5)  # TimeoutExpired = the hang
    assert_clean_error(proc.returncode, proc.stderr, "line")


def test_workload_toml_that_is_not_utf8(tmp_path):
    path = tmp_path / "w.toml"
    path.write_bytes(b'name = "\xff"\n')
    with pytest.raises(ConfigError):
        load_workload_file(path)


def test_negative_memory_gib_message(capsys):
    rc, _, err = cli(capsys, "math", "--memory-gib", -1)
    line = assert_clean_error(rc, err)
    assert "--memory-gib" in line
    assert "e+" not in line


def test_trace_that_is_a_folder_says_no_such_file(capsys, tmp_path):
    rc, _, err = cli(capsys, "run", "--trace", tmp_path)
    line = assert_clean_error(rc, err, str(tmp_path))
    assert "no such file" not in line


def test_json_path_that_is_a_folder_is_found_only_after_the_run(capsys, tmp_path):
    rc, out, err = cli(capsys, "run", "--quiet", "--requests", 5, "--json", tmp_path)
    assert_clean_error(rc, err, str(tmp_path))
    assert out == ""


def test_same_weight_dtype_discards_the_checkpoint_size(capsys):
    preset = math_json(capsys, "--model", "qwen3.6-27b-fp8")
    same = math_json(capsys, "--model", "qwen3.6-27b-fp8", "--weight-dtype", "fp8")
    assert preset["weights_bytes"] == 28991029248
    assert same["weights_bytes"] == preset["weights_bytes"]


def test_config_field_errors_do_not_name_the_file(capsys, tmp_path):
    folder = tmp_path / "llama"
    folder.mkdir()
    path = folder / "config.json"
    path.write_text('{"num_hidden_layers": 32}')
    rc, _, err = cli(capsys, "math", "--config", path)
    assert_clean_error(rc, err, str(path), "missing field(s)")


def test_math_names_where_a_given_weight_size_comes_from(capsys):
    for flags, source in ((("--weights-bytes", "10e9"), "(--weights-bytes)"),
                          (("--params", "8e9", "--weight-dtype", "bf16"), "(--params 8.00 B x 2 B (bf16))")):
        rc, out, _ = cli(capsys, "math", "--model", "llama-2-7b", *flags)
        weights = next(line for line in out.splitlines() if line.startswith("weights"))
        assert rc == 0 and source in weights and "preset" not in weights, weights


def test_math_says_how_short_the_memory_is_instead_of_a_negative_pool(capsys):
    rc, out, _ = cli(capsys, "math", "--model", "llama-2-7b", "--memory-gib", 10)
    rows = {line.split("  ")[0].strip(): line for line in out.splitlines()[2:]}
    assert rc == 0
    assert "none: 4.70 GiB" in rows["KV pool"] and "short" in rows["KV pool"] and "-" not in rows["KV pool"].split("(")[0]
    # what vLLM holds back is named, not called the reserve (which is --reserve-bytes, 0 here)
    assert "held back: activation peak, non-torch memory, CUDA graphs" in rows["does not fit"]
    assert "reserve)" not in rows["does not fit"]
    plan = math_json(capsys, "--model", "llama-2-7b", "--memory-gib", 10)
    assert plan["fits"] is False and plan["kv_pool_bytes"] < 0 and plan["num_blocks"] == 0
    assert math_json(capsys, "--model", "llama-2-7b")["fits"] is True


def test_math_on_a_set_budget_subtracts_nothing_and_says_so(capsys, monkeypatch):
    import kvscope.app.lab.cuda_device as cuda_device

    monkeypatch.setattr(cuda_device, "cuda_device_visible", lambda: False)  # this-machine is the CPU
    rc, out, _ = cli(capsys, "math", "--model", "tiny-llama", "--hardware", "this-machine")
    rows = {line.split("  ")[0].strip(): line for line in out.splitlines()[2:]}
    assert rc == 0
    assert "set budget" in rows["held back"]
    for label in ("activation peak", "non-torch memory", "CUDA graphs", "reserve", "GPU KV cache size"):
        assert label not in rows, f"{label!r} on a CPU budget:\n{out}"
    assert "the figure vLLM" in rows["CPU KV cache size"]


def test_math_json_names_the_flags_reserve_apart_from_the_total_held_back(capsys):
    """JSON's reserve_bytes was the total held back (1.65 GiB beside --reserve-bytes 0 B in the table)."""
    plan = math_json(capsys, "--model", "llama-3-8b", "--reserve-bytes", GiB)
    assert "reserve_bytes" not in plan and plan["extra_reserve_bytes"] == GiB
    assert plan["held_back_bytes"] == GiB + plan["activation_bytes"] + plan["non_torch_bytes"] + plan["cudagraph_bytes"]


def test_math_says_a_hybrid_models_token_slots_are_per_layer_group(capsys):
    """189,152 "token slots" for gemma-3-27b read as tokens, beside vLLM's 105,224-token KV cache size."""
    hybrid = [line for line in cli(capsys, "math", "--model", "gemma-3-27b", "--hardware", "h100-80gb")[1].splitlines()
              if line.startswith("blocks")]
    dense = [line for line in cli(capsys, "math", "--model", "llama-3-8b")[1].splitlines() if line.startswith("blocks")]
    assert "token slots, each one token of one of the 7 layer groups)" in hybrid[0]
    assert dense[0].endswith("token slots)")
