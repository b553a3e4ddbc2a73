"""The fourteenth hostile pass over the files kvscope reads: config.json layouts kvscope does not size (Mamba
hybrids, lightning and delta attention, KV caches shared across layers, DeepSeek's indexer cache, encoders),
Qwen's use_sliding_window with max_window_layers, a rope factor below 1, bitsandbytes tables that say no bit
width or an unknown 4-bit type, MLX's quantization; a hardware preset's memory given in GiB as if bytes; weights
files, Meta's params.json and kvscope's own TOML files given where a config.json, a workload or a scenario is
read, a trace CSV given as a workload; a model folder whose bits are in quantize_config.json alone; a hardware
preset with no 16- or 32-bit rate; the Hugging Face cache's listing (refs/main, shards never downloaded); a
tokenizer_config.json giving a key twice. Each refusal test failed before its fix; the consistent neighbours
beside them pass.
scripts/hostile_inputs_fourteenth_files.py runs them through the command line."""

from __future__ import annotations

import json
import pickle
import struct

import pytest

from kvscope.app.lab.models.config_json import load_hf_config, model_from_hf_config
from kvscope.engine.config import ConfigError

from test_files_hostile_fourth import PLAIN, _tokenizer_config, _tokenizer_json, _variant, good_model  # noqa: F401
from test_files_hostile_thirteenth import BASE, refused

# -- layouts kvscope does not size --------------------------------------------------------------------------------


@pytest.mark.parametrize("fields, said", [
    # each was sized as full attention with a KV cache of its own on every layer, without a word
    ({"model_type": "jamba", "attn_layer_period": 4, "attn_layer_offset": 2, "mamba_d_state": 16},
     "attn_layer_period (4) lays out Mamba layers (Jamba)"),
    ({"model_type": "nemotron_h", "hybrid_override_pattern": "M-M*"}, "hybrid_override_pattern ('M-M*') lays out "
                                                                      "Mamba layers (Nemotron-H)"),
    ({"model_type": "zamba2", "layers_block_type": ["mamba", "hybrid"] * 2}, "layers_block_type"),
    ({"model_type": "falcon_h1", "mamba_d_ssm": 64}, "mamba_d_ssm (64) sizes Mamba state-space layers"),
    ({"model_type": "bamba", "attn_layer_indices": [1], "mamba_d_state": 16}, "attn_layer_indices ([1]) lays out "
                                                                              "Mamba layers (Bamba)"),
    ({"model_type": "minimax", "attn_type_list": [0, 1, 0, 1]}, "attn_type_list"),
    ({"model_type": "kimi_linear", "linear_attn_config": {"kda_layers": [1, 2]}}, "linear_attn_config"),
    ({"model_type": "gemma3n_text", "num_kv_shared_layers": 2}, "num_kv_shared_layers (2) has layers reuse an "
                                                                "earlier layer's KV cache"),
    ({"model_type": "hunyuan_v1_dense", "use_cla": True, "cla_share_factor": 2}, "use_cla (True)"),
    ({"model_type": "deepseek_v32", "index_topk": 2048}, "index_topk (2,048) keeps an indexer's key cache"),
])
def test_a_config_json_laying_out_layers_kvscope_does_not_size_is_refused(fields, said):
    message = refused(fields)
    assert said in message and "which kvscope does not size" in message, message


def test_the_same_fields_off_stay_accepted():
    """0, false and null say the layout is not there (Hunyuan's use_cla false, a Gemma 3n-like config sharing
    no layer), and a layout of attention alone is sized as it is (MiniMax-M2's attn_type_list of 1s)."""
    for fields in ({"use_cla": False}, {"num_kv_shared_layers": 0}, {"hybrid_override_pattern": None},
                   {"attn_type_list": [1] * 4}, {"hybrid_override_pattern": "****"},
                   {"layers_block_type": ["attention"] * 4}, {"attn_layer_period": 1}, {"mamba_d_state": 256}):
        assert model_from_hf_config({**BASE, **fields}, "m").num_hidden_layers == 4


@pytest.mark.parametrize("fields, said", [
    # BERT's config.json has every field a decoder's has: a KV cache was sized for a model that keeps none
    ({"model_type": "bert", "architectures": ["BertModel"], "type_vocab_size": 2},
     "an encoder-only model (model_type 'bert')"),
    # said as "missing field(s) num_hidden_layers, num_attention_heads, hidden_size"
    ({"model_type": "bart", "is_encoder_decoder": True, "encoder_layers": 12}, "an encoder-decoder model"),
])
def test_a_model_that_is_no_decoder_is_refused_as_such(fields, said):
    assert said in refused(fields)
    assert model_from_hf_config({**BASE, "is_encoder_decoder": False}, "m").num_hidden_layers == 4  # GPT-2's false


QWEN_WINDOW = {"model_type": "qwen2", "sliding_window": 64, "use_sliding_window": True}


def test_qwens_use_sliding_window_slides_the_layers_from_max_window_layers():
    """use_sliding_window true and max_window_layers 2: every layer was sized as full attention (the
    flag dropped); transformers slides layers 2 and 3."""
    model = model_from_hf_config({**BASE, **QWEN_WINDOW, "max_window_layers": 2}, "m")
    assert model.layer_types == ("full_attention", "full_attention", "sliding_attention", "sliding_attention")
    assert model.sliding_window == 64
    assert "max_window_layers (how many of the first layers keep full attention" in refused(QWEN_WINDOW)
    contradicted = {**QWEN_WINDOW, "max_window_layers": 1, "layer_types": ["full_attention"] * 2 +
                    ["sliding_attention"] * 2}
    assert "layer_types and max_window_layers (1) say different layers" in refused(contradicted)
    # the neighbours: Qwen's own configs (use_sliding_window false), and layer_types agreeing
    qwen3 = {**QWEN_WINDOW, "use_sliding_window": False, "max_window_layers": 28}
    assert model_from_hf_config({**BASE, **qwen3}, "m").sliding_window is None
    agreed = {**contradicted, "max_window_layers": 2}
    assert model_from_hf_config({**BASE, **agreed}, "m").layer_types == tuple(agreed["layer_types"])


def test_a_rope_factor_below_1_is_refused():
    """A linear factor of 0.5 was read as no stretch (512 positions); vLLM multiplies by it (256)."""
    assert "rope_scaling.factor is 0.5, below 1" in refused({"rope_scaling": {"rope_type": "linear", "factor": 0.5}})
    per_type = {"full_attention": {"rope_type": "yarn", "factor": 0.25}, "sliding_attention": {"rope_type": "default"}}
    assert "rope_parameters.full_attention.factor is 0.25" in refused({"rope_parameters": per_type})
    # the neighbours: a factor of 1 (no stretch) and llama3's (its positions are stretched already)
    assert model_from_hf_config({**BASE, "rope_scaling": {"rope_type": "linear", "factor": 1.0}},
                                "m").longest_context == 512
    llama3 = {"rope_type": "llama3", "factor": 0.5, "original_max_position_embeddings": 256}
    assert model_from_hf_config({**BASE, "rope_scaling": llama3}, "m").longest_context == 512


@pytest.mark.parametrize("quant, said", [
    # sized as 8-bit weights; transformers cannot load it ("Unknown quantization type, got bitsandbytes")
    ({"quant_method": "bitsandbytes"}, "bitsandbytes with neither load_in_4bit nor load_in_8bit true"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": False, "load_in_8bit": False}, "neither load_in_4bit"),
    # sized as int4 without a word
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "fp5"},
     "quantization_config.bnb_4bit_quant_type is 'fp5'; bitsandbytes' 4-bit types are nf4 and fp4"),
])
def test_a_bitsandbytes_table_that_cannot_say_its_bits_is_refused(quant, said):
    assert said in refused({"quantization_config": quant})


def test_bitsandbytes_tables_as_saved_stay_accepted():
    for quant, dtype in (({"load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, "nf4"),
                         ({"load_in_4bit": True, "bnb_4bit_quant_type": "fp4"}, "int4"),
                         ({"load_in_8bit": True, "bnb_4bit_quant_type": "fp4"}, "int8")):
        cfg = {**BASE, "quantization_config": {"quant_method": "bitsandbytes", **quant}}
        assert model_from_hf_config(cfg, "m").weight_dtype == dtype


def test_an_mlx_checkpoints_quantization_is_refused_not_sized_as_16_bit():
    """mlx-lm writes its bits as "quantization": {"bits": 4, "group_size": 64}: the weights were sized as bf16."""
    assert "quantization gives 4-bit weights in MLX's own form" in refused({"quantization": {"bits": 4,
                                                                                            "group_size": 64}})
    assert model_from_hf_config({**BASE, "quantization": None}, "m").weight_dtype == "bf16"  # the neighbour


# -- files of another kind where a config.json is read ------------------------------------------------------------

def _safetensors(path, size: int = 0):
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 8)
    if size:
        with open(path, "r+b") as handle:
            handle.truncate(size)  # sparse: no disk
    return path


@pytest.mark.parametrize("name, make, said", [
    # each was "malformed JSON at line 1, column 1", the big one "more than the 16,777,216 a config.json may have"
    ("model.safetensors", lambda p: _safetensors(p), "a safetensors weights file, not a config.json"),
    ("big.safetensors", lambda p: _safetensors(p, 20 * 1024**3), "a safetensors weights file, not a config.json"),
    ("m.gguf", lambda p: p.write_bytes(b"GGUF\x03\0\0\0" + b"\0" * 16), "a GGUF file (llama.cpp weights)"),
    ("pytorch_model.bin", lambda p: p.write_bytes(pickle.dumps({"w": 1}, protocol=2)), "pickled PyTorch weights"),
    # was "missing field(s) num_hidden_layers, num_attention_heads, hidden_size"
    ("params.json", lambda p: p.write_text(json.dumps({"dim": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 8,
                                                       "vocab_size": 32768})),
     "a params.json of Meta's or Mistral's own format"),
    ("l4.toml", lambda p: p.write_text('name = "l4"\nmemory_bytes = 24e9\nmemory_bandwidth_bytes_per_s = 3e11\n'
                                        "[peak_flops]\nbf16 = 1.2e14\n"), "a kvscope hardware preset file (TOML)"),
])
def test_a_file_of_another_kind_given_as_a_config_json_is_named(tmp_path, name, make, said):
    path = tmp_path / name
    make(path)
    with pytest.raises(ConfigError) as caught:
        load_hf_config(path)
    assert str(caught.value).startswith(f"config {path}: ") and said in str(caught.value), caught.value


def test_a_config_json_indented_before_its_brace_is_still_json(tmp_path):
    """The neighbour of the safetensors sniff: eight spaces and then "{" are JSON, not a header length."""
    path = tmp_path / "config.json"
    path.write_text(" " * 8 + json.dumps(BASE))
    assert load_hf_config(path).num_hidden_layers == 4


def test_a_quantize_config_json_beside_a_config_json_without_quantization_config_is_refused(tmp_path):
    """AutoGPTQ's older folders keep the bits in quantize_config.json: math sized the 4-bit weights as 16-bit."""
    (tmp_path / "config.json").write_text(json.dumps(BASE))
    (tmp_path / "quantize_config.json").write_text(json.dumps({"bits": 4, "group_size": 128}))
    with pytest.raises(ConfigError, match="quantize_config.json says its weights are quantised, but config.json has "
                                          "no quantization_config"):
        load_hf_config(tmp_path)
    # the neighbour: the same table copied into config.json, as the message asks
    (tmp_path / "config.json").write_text(json.dumps({**BASE, "quantization_config": {"quant_method": "gptq",
                                                                                      "bits": 4}}))
    assert load_hf_config(tmp_path).weight_dtype == "int4"


# -- kvscope's own TOML files given as one another -----------------------------------------------------------------

def test_a_kvscope_file_given_as_another_kind_is_named(tmp_path):
    """A scenario given as a workload file was "unknown field(s) answer, base, caption, ..." (eleven of
    them), a workload given as a scenario "unknown field(s) arrival_rate_per_s, ..."."""
    from kvscope.app.lab.presets import load_workload_file, presets_root
    from kvscope.app.lab.scenarios import load_scenario

    root = presets_root()
    with pytest.raises(ConfigError, match="a kvscope scenario file .*, not a workload file; give it as `kvscope "
                                          "compare --scenario FILE`"):
        load_workload_file(root / "scenarios" / "prefix-caching.toml")
    with pytest.raises(ConfigError, match="a kvscope workload file .*, not a scenario file"):
        load_scenario(str(root / "workloads" / "chat.toml"))
    with pytest.raises(ConfigError, match="a kvscope model preset file .*, not a workload file"):
        load_workload_file(root / "models" / "llama-3-8b.toml")
    # the neighbours: each read where it belongs
    assert load_workload_file(root / "workloads" / "chat.toml").name == "chat"
    assert load_scenario(str(root / "scenarios" / "prefix-caching.toml")).name == "prefix-caching"


def test_a_trace_csv_given_as_a_workload_points_to_trace():
    """Was "a path, and a workload file's name ends in .toml": what replays a trace not said."""
    from kvscope.app.lab.presets import check_preset_name

    with pytest.raises(ConfigError, match=r"a trace CSV, not a workload; replay it with `kvscope run --trace FILE`"):
        check_preset_name("traces/conv.csv", "workloads")
    assert check_preset_name("chat", "workloads") == "chat"


# -- hardware presets ---------------------------------------------------------------------------------------------

def test_a_hardware_memory_given_in_gib_as_bytes_is_refused_naming_the_unit():
    """memory_bytes = 24 (24 GiB meant) ran as 24 bytes: "does not fit", the unit never said."""
    from kvscope.app.lab.presets import hardware_from_dict

    base = {"memory_bandwidth_bytes_per_s": 3e11, "peak_flops": {"bf16": 1.2e14}}
    with pytest.raises(ConfigError, match=r"^hw: memory_bytes is 24 bytes, less than any device's \(1 MiB\); it "
                                          r"counts bytes"):
        hardware_from_dict({**base, "memory_bytes": 24}, "hw", default_name="h")
    assert hardware_from_dict({**base, "memory_bytes": 24e9}, "hw", default_name="h").memory_bytes == 24 * 10**9


def test_a_hardware_preset_with_no_16_or_32_bit_rate_is_refused():
    """peak_flops = { fp8 = ... } alone: a bf16 model's math ran at the fp8 rate (flops_for's fallback), twice
    the true one, without a word."""
    from kvscope.app.lab.presets import hardware_from_dict

    base = {"memory_bytes": 24e9, "memory_bandwidth_bytes_per_s": 3e11}
    with pytest.raises(ConfigError, match=r"^hw: peak_flops gives no 16- or 32-bit rate \(only fp8, int8\)"):
        hardware_from_dict({**base, "peak_flops": {"fp8": 2.4e14, "int8": 2.4e14}}, "hw", default_name="h")
    # the neighbours: a CPU's fp32 alone, and the types named the long way
    assert hardware_from_dict({**base, "peak_flops": {"fp32": 3e12}}, "hw", "h").flops_for("bf16") == 3e12
    assert hardware_from_dict({**base, "peak_flops": {"bfloat16": 1e14, "fp8": 2e14}}, "hw", "h").flops_for("bf16") \
        == 1e14


# -- the Hugging Face cache -----------------------------------------------------------------------------------------

def _snapshot(repo, revision: str, layers: int, shards=("model.safetensors",), index: bool = False):
    folder = repo / "snapshots" / revision
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({**BASE, "num_hidden_layers": layers,
                                                    "architectures": ["LlamaForCausalLM"]}))
    for shard in shards:
        _safetensors(folder / shard)
    if index:
        names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": names[0], "b": names[1]}}))
    return folder


def test_the_cache_lists_the_snapshot_refs_main_names(tmp_path):
    """The newest config.json's snapshot was listed: an older revision downloaded later took main's place."""
    import os

    from kvscope.app.lab.models.loader import discover_cached_models

    repo = tmp_path / "models--acme--m"
    main = _snapshot(repo, "b" * 40, 4)
    pinned = _snapshot(repo, "a" * 40, 2)
    os.utime(main / "config.json", (1_000_000, 1_000_000))  # main's download is the older one
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("b" * 40)
    assert [m.path for m in discover_cached_models(tmp_path)] == [main]
    (repo / "refs" / "main").write_text("c" * 40)  # the neighbour: refs/main naming no snapshot here
    assert [m.path for m in discover_cached_models(tmp_path)] == [pinned]


def test_a_cached_model_missing_a_shard_its_index_names_is_not_listed_as_loadable(tmp_path):
    from kvscope.app.lab.models.loader import discover_cached_models

    _snapshot(tmp_path / "models--acme--half", "a" * 40, 4, shards=("model-00001-of-00002.safetensors",), index=True)
    _snapshot(tmp_path / "models--acme--whole", "a" * 40, 4,
              shards=("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"), index=True)
    assert [(m.name, m.supported) for m in discover_cached_models(tmp_path)] == [("acme/half", False),
                                                                                 ("acme/whole", True)]


# -- tokenizer files ---------------------------------------------------------------------------------------------

def test_a_tokenizer_config_giving_a_key_twice_is_refused(tmp_path, good_model):
    """"eos_token": "<eos>" then "[UNK]": the last was taken without a word (answers ended on another token)."""
    from kvscope.app.lab.models.loader import load_model_directory

    twice = _tokenizer_config(PLAIN)[:-1] + ', "eos_token": "[UNK]"}'
    folder = _variant(good_model, tmp_path / "m", {"tokenizer.json": _tokenizer_json(100),
                                                   "tokenizer_config.json": twice})
    with pytest.raises(ConfigError, match=r"tokenizer_config.json: the key 'eos_token' is given twice in one object"):
        load_model_directory(folder)
    # the neighbour: the same value twice, as some saved files have it
    same = _tokenizer_config(PLAIN)[:-1] + ', "eos_token": "<eos>"}'
    folder = _variant(good_model, tmp_path / "n", {"tokenizer.json": _tokenizer_json(100),
                                                   "tokenizer_config.json": same})
    assert load_model_directory(folder).tokenizer is not None
