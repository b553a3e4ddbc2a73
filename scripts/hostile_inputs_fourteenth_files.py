"""The fourteenth hostile pass's cases (2026-11-29): the FILES kvscope reads, for scripts/hostile_inputs.py. A
config.json laying out layers kvscope does not size (Jamba's attn_layer_period, Nemotron-H's
hybrid_override_pattern, Zamba's layers_block_type, Bamba's attn_layer_indices, Falcon-H1's Mamba state,
MiniMax's attn_type_list, Kimi's linear_attn_config, Gemma 3n's num_kv_shared_layers, Hunyuan's use_cla, DeepSeek
V3.2's index_topk) or an encoder's (BERT, BART); Qwen's use_sliding_window true with or without
max_window_layers; a rope factor below 1; bitsandbytes with neither load_in flag, or a 4-bit type of "fp5"; MLX's
quantization; weights (safetensors, a sparse 20 GiB one, GGUF, pickle), Meta's params.json and a hardware preset
given as --config; a scenario, a model preset or a hardware preset given as --workload, a workload as --scenario,
a trace CSV as --workload; a model folder whose bits are in quantize_config.json alone; a hardware preset's
memory_bytes = 24, or its peak_flops of fp8 and int8 alone; a Hugging Face cache whose newest snapshot is not
refs/main's, or whose index names a shard never downloaded; a tokenizer_config.json giving eos_token twice.

Before the fixes: every layer of each hybrid was sized as full attention with a KV cache of its own (a Jamba's 8x
too big, its Mamba state left out; Gemma 3n's shared layers and DeepSeek's indexer cache likewise) without a
word, BERT's a KV cache it never keeps (BART's said as missing fields); use_sliding_window true was dropped
(every layer full) and without max_window_layers too; a factor of 0.5 was read as no stretch (vLLM halves the
length); bitsandbytes with no flag was sized as 8-bit (transformers cannot load it), "fp5" as int4, MLX's 4-bit
weights as bf16; weights files were "malformed JSON at line 1, column 1" (the 20 GiB one "more than the
16,777,216 bytes a config.json may have"), params.json "missing field(s) num_hidden_layers, ...", the hardware
preset "malformed JSON"; a scenario as a workload was eleven "unknown field(s)", a workload as a scenario six;
the CSV was "a path, and a workload file's name ends in .toml", --trace not named; the GPTQ folder's 4-bit
weights were sized as 16-bit; memory_bytes = 24 ran to "does not fit" on "24 B", the fp8-only preset ran bf16
math at the fp8 rate; `kvscope models` listed the pinned older revision downloaded last in place of main's, and
the half-downloaded sharded model as loadable; the second eos_token was taken without a word. Every case's expect
is the correct behaviour.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

from hostile_fixtures import PRESETS, PYTHON_WORDS, SMALL_LLAMA, config_json_cases, pass_cases

NAME = "files14: "  # every case's name starts so: `--only files14` runs this pass's


def fourteenth_file_cases(d: Path, Case, write) -> list:
    makers = (_config_cases, _weights_cases, _kind_cases, _hardware_cases, _cache_cases, _tokenizer_cases)
    return pass_cases(d / "fourteenth", makers, Case, write)


# -- config.json ----------------------------------------------------------------------------------------------

_UNSIZED = "which kvscope does not size"
_QWEN = {"model_type": "qwen2", "sliding_window": 64, "use_sliding_window": True}
# (what, fields over SMALL_LLAMA, what the refusal must say); None: accepted
_CONFIGS = [
    ("Jamba's attn_layer_period", {"model_type": "jamba", "attn_layer_period": 4, "attn_layer_offset": 2},
     ("attn_layer_period (4) lays out Mamba layers (Jamba)", _UNSIZED)),
    ("Nemotron-H's hybrid_override_pattern", {"model_type": "nemotron_h", "hybrid_override_pattern": "M-M*"},
     ("hybrid_override_pattern ('M-M*') lays out Mamba layers", _UNSIZED)),
    ("Zamba's layers_block_type", {"model_type": "zamba2", "layers_block_type": ["mamba", "hybrid"] * 2},
     ("layers_block_type", _UNSIZED)),
    ("Falcon-H1's mamba_d_ssm", {"model_type": "falcon_h1", "mamba_d_ssm": 64, "mamba_d_state": 16},
     ("sizes Mamba state-space layers", _UNSIZED)),
    ("MiniMax's attn_type_list", {"model_type": "minimax", "attn_type_list": [0, 1, 0, 1]},
     ("attn_type_list", "lightning-attention layers", _UNSIZED)),
    ("MiniMax-M2's attn_type_list of 1s (all softmax attention)", {"attn_type_list": [1] * 4}, None),
    ("Bamba's attn_layer_indices", {"model_type": "bamba", "attn_layer_indices": [1], "mamba_d_state": 16},
     ("attn_layer_indices ([1]) lays out Mamba layers (Bamba)",)),
    ("Kimi's linear_attn_config", {"linear_attn_config": {"kda_layers": [1, 2, 3]}}, ("linear_attn_config", _UNSIZED)),
    ("Gemma 3n's num_kv_shared_layers", {"model_type": "gemma3n_text", "num_kv_shared_layers": 2},
     ("num_kv_shared_layers (2) has layers reuse an earlier layer's KV cache", _UNSIZED)),
    ("Hunyuan's use_cla", {"use_cla": True, "cla_share_factor": 2}, ("use_cla (True)", _UNSIZED)),
    ("DeepSeek V3.2's index_topk", {"index_topk": 2048}, ("index_topk (2,048) keeps an indexer's key cache",)),
    ("use_cla false (Hunyuan's own)", {"use_cla": False, "cla_share_factor": 2}, None),
    ("BERT's fields (an encoder)", {"model_type": "bert", "architectures": ["BertModel"]},
     ("an encoder-only model (model_type 'bert')",)),
    ("BART's fields (an encoder-decoder)", {"model_type": "bart", "is_encoder_decoder": True, "encoder_layers": 12},
     ("an encoder-decoder model (model_type 'bart')",)),
    ("use_sliding_window true without max_window_layers", _QWEN,
     ("use_sliding_window is true, but max_window_layers",)),
    ("use_sliding_window true, layer_types against max_window_layers 1",
     {**_QWEN, "max_window_layers": 1, "layer_types": ["full_attention"] * 2 + ["sliding_attention"] * 2},
     ("layer_types and max_window_layers (1) say different layers",)),
    ("use_sliding_window true, max_window_layers 2", {**_QWEN, "max_window_layers": 2}, None),
    ("a linear rope factor of 0.5", {"rope_scaling": {"rope_type": "linear", "factor": 0.5}},
     ("rope_scaling.factor is 0.5, below 1",)),
    ("a linear rope factor of 1.0", {"rope_scaling": {"rope_type": "linear", "factor": 1.0}}, None),
    ("bitsandbytes with neither load_in flag", {"quantization_config": {"quant_method": "bitsandbytes"}},
     ("bitsandbytes with neither load_in_4bit nor load_in_8bit true",)),
    ("bitsandbytes 4-bit of type fp5", {"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True,
                                                                "bnb_4bit_quant_type": "fp5"}},
     ("bnb_4bit_quant_type is 'fp5'; bitsandbytes' 4-bit types are nf4 and fp4",)),
    ("MLX's quantization (4 bits)", {"quantization": {"group_size": 64, "bits": 4}},
     ("quantization gives 4-bit weights in MLX's own form",)),
    ("bitsandbytes 4-bit of type fp4", {"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True,
                                                                "bnb_4bit_quant_type": "fp4"}}, None),
]


def _config_cases(f: Path, Case, write) -> list:
    # was: accepted, sized as full attention on every layer / the flag dropped / the factor read as 1
    return config_json_cases(f, Case, write, SMALL_LLAMA, _CONFIGS, prefix=NAME)


# -- weights and other files given as a config.json --------------------------------------------------------------

def _safetensors(path: Path, size: int = 0) -> Path:
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 8)
    if size:
        os.truncate(path, size)  # sparse: no disk
    return path


def _weights_cases(f: Path, Case, write) -> list:
    w = f / "weights"
    files = {
        "a safetensors file": (_safetensors(w / "model.safetensors"), "a safetensors weights file, not a config.json"),
        "a 20 GiB safetensors file": (_safetensors(w / "big.safetensors", 20 * 1024**3),
                                      "a safetensors weights file, not a config.json"),
        "a GGUF file": (write(w / "m.gguf", b"GGUF\x03\0\0\0" + b"\0" * 24), "a GGUF file (llama.cpp weights)"),
        "pickled weights": (write(w / "pytorch_model.bin", b"\x80\x02}q\x00."), "pickled PyTorch weights"),
        "Mistral's params.json": (write(w / "params.json", json.dumps({"dim": 4096, "n_layers": 32, "n_heads": 32,
                                                                      "n_kv_heads": 8, "vocab_size": 32768})),
                                  "a params.json of Meta's or Mistral's own format"),
        "a hardware preset": (PRESETS / "hardware" / "l4-24gb.toml", "a kvscope hardware preset file (TOML)"),
    }
    gptq = write(w / "gptq" / "config.json", json.dumps(SMALL_LLAMA)).parent
    write(gptq / "quantize_config.json", json.dumps({"bits": 4, "group_size": 128}))
    files["a folder whose bits are in quantize_config.json alone"] = (gptq, "quantize_config.json says its weights "
                                                                            "are quantised")
    # was: "malformed JSON at line 1, column 1" (the 20 GiB one: "more than the 16,777,216 bytes"), params.json
    # "missing field(s) num_hidden_layers, ...", the GPTQ folder sized at 16 bits a weight
    return [Case(f"{NAME}math --config given {what}", "files", ["math", "--config", str(path)],
                 must_say=(str(path), said), must_not_say=PYTHON_WORDS, protected=[str(path)] if path.is_file()
                 and path.stat().st_size < 1024**2 else []) for what, (path, said) in files.items()]


# -- kvscope's own files given as one another ----------------------------------------------------------------------

def _kind_cases(f: Path, Case, write) -> list:
    scenario, chat = PRESETS / "scenarios" / "prefix-caching.toml", PRESETS / "workloads" / "chat.toml"
    model, hardware = PRESETS / "models" / "llama-3-8b.toml", PRESETS / "hardware" / "l4-24gb.toml"
    trace = write(f / "traces" / "rows.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,100,10\n1,60,10\n")
    run = ["run", "--quiet", "--requests", "5", "--workload"]
    return [
        # was: "unknown field(s) answer, base, caption (did you mean description?), claim, configs, ..."
        Case(f"{NAME}run --workload given a scenario file", "structure", [*run, str(scenario)],
             must_say=("a kvscope scenario file", "not a workload file", "kvscope compare --scenario FILE"),
             must_not_say=PYTHON_WORDS),
        Case(f"{NAME}run --workload given a model preset file", "structure", [*run, str(model)],
             must_say=("a kvscope model preset file", "not a workload file"), must_not_say=PYTHON_WORDS),
        Case(f"{NAME}run --workload given a hardware preset file", "structure", [*run, str(hardware)],
             must_say=("a kvscope hardware preset file", "not a workload file"), must_not_say=PYTHON_WORDS),
        # was: "unknown field(s) arrival_rate_per_s, description (did you mean caption?), ..."
        Case(f"{NAME}compare --scenario given a workload file", "structure", ["compare", "--scenario", str(chat)],
             must_say=("a kvscope workload file", "not a scenario file", "kvscope run --workload FILE"),
             must_not_say=PYTHON_WORDS),
        Case(f"{NAME}run --workload given the workload file it is", "structure", [*run, str(chat)], expect="ok",
             must_not_say=PYTHON_WORDS),
        # was: "a path, and a workload file's name ends in .toml"
        Case(f"{NAME}run --workload given a trace CSV", "structure", [*run, str(trace)],
             must_say=("a trace CSV, not a workload", "kvscope run --trace FILE"), must_not_say=PYTHON_WORDS),
        Case(f"{NAME}run --trace given the trace CSV", "structure", ["run", "--quiet", "--trace", str(trace)],
             expect="ok", must_not_say=PYTHON_WORDS),
    ]


# -- hardware presets -------------------------------------------------------------------------------------------

_L4 = (PRESETS / "hardware" / "l4-24gb.toml").read_text().split("\n", 1)[1]


def _hardware_cases(f: Path, Case, write) -> list:
    config = f / "config"
    fp8_only = _L4.split("[peak_flops]")[0] + "[peak_flops]\nfp8 = 242.5e12\nint8 = 242.5e12\n"
    presets = (  # (file name, what it gives, its text, what the refusal must say)
        ("gib-as-bytes", "memory_bytes = 24", _L4.replace("memory_bytes = 23675797504", "memory_bytes = 24"),
         ("memory_bytes is 24 bytes", "it counts bytes")),
        ("gb", "memory_bytes = 24e9", _L4.replace("memory_bytes = 23675797504", "memory_bytes = 24e9"), None),
        ("fp8-only", "peak_flops of fp8 and int8 alone", fp8_only, ("peak_flops gives no 16- or 32-bit rate",)),
    )
    cases = []
    for name, what, text, said in presets:
        write(config / "presets" / "hardware" / f"fourteenth-{name}.toml", text)
        # was: run to "does not fit ... of the 0.00 GiB usable", the device "24 B"; the fp8 rate taken for the
        # bf16 model's math, twice the true one
        cases.append(Case(f"{NAME}math --hardware whose {what}", "structure",
                          ["math", "--hardware", f"fourteenth-{name}", "--model", "tiny-llama"],
                          env={"KVSCOPE_CONFIG_DIR": str(config)}, expect="refuse" if said else "ok",
                          must_say=said or (), must_not_say=PYTHON_WORDS))
    return cases


# -- the Hugging Face cache --------------------------------------------------------------------------------------

def _snapshot(repo: Path, revision: str, layers: int, shards: tuple, write) -> Path:
    folder = repo / "snapshots" / revision
    write(folder / "config.json", json.dumps({**SMALL_LLAMA, "num_hidden_layers": layers}))
    for shard in shards:
        _safetensors(folder / shard)
    return folder


def _cache_cases(f: Path, Case, write) -> list:
    hub = f / "hub"
    repo = hub / "models--acme--pinned"
    main = _snapshot(repo, "b" * 40, 4, ("model.safetensors",), write)
    pinned = _snapshot(repo, "a" * 40, 2, ("model.safetensors",), write)
    os.utime(main / "config.json", (1_000_000, 1_000_000))  # main's download is the older
    write(repo / "refs" / "main", "b" * 40)
    shards = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    half = _snapshot(hub / "models--acme--half", "c" * 40, 4, shards[:1], write)
    write(half / "model.safetensors.index.json", json.dumps({"weight_map": {"a": shards[0], "b": shards[1]}}))
    # was: the pinned snapshot listed in main's place, and acme/half without "(not supported" after it
    return [Case(f"{NAME}models: a cache whose newest snapshot is not main's, and a model missing a shard",
                 "files", ["models"], env={"HF_HUB_CACHE": str(hub)}, expect="ok",
                 must_say=(str(main), f"{half}  (not supported"), must_not_say=(*PYTHON_WORDS, str(pinned)))]


# -- tokenizer files ------------------------------------------------------------------------------------------

def _tokenizer_cases(f: Path, Case, write) -> list:
    """tokenizer_config.json giving eos_token twice: the last was taken without a word."""
    from hostile_fixtures import hostile_model, model_variant

    good = hostile_model(f / "models" / "good")
    head = '{"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "eos_token": "<eos>"'
    cases = []
    for name, second, said in (("twice", "[UNK]", ("the key 'eos_token' is given twice in one object",)),
                               ("alike", "<eos>", None)):
        folder = model_variant(good, f / "models" / name, write,
                               {"tokenizer_config.json": f'{head}, "eos_token": "{second}"}}'})
        cases.append(Case(f"{NAME}run --model-path whose tokenizer_config.json gives eos_token twice, {name}", "model",
                          ["run", "--quiet", "--backend", "real", "--model-path", str(folder), "--requests", "2",
                           "--kv-cache-memory-bytes", "1e6"], expect="refuse" if said else "ok",
                          must_say=(str(folder), *said) if said else (), must_not_say=PYTHON_WORDS, slow=True))
    return cases
