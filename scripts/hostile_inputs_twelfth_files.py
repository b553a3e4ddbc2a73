"""The twelfth hostile pass's cases (2026-11-29): the FILES kvscope reads, for scripts/hostile_inputs.py. A
config.json whose fields are each valid but say two things (n_shared_experts without the size of an expert,
kv_lora_rank 0 beside the latent's rope part, a recurrent state kept as int4, bitsandbytes loading 4- and
8-bit at once, torch_dtype and its newer name dtype disagreeing, two expert counts, a hidden_size no whole
number of heads with no head_dim); trace times whose fraction follows no seconds (46.68.5, 18:15.5,
2023-11-16.5); workloads drawing uniform lengths with no max, a copy of a workload preset whose name field is
still the other's, a num_requests past the trace's rows; scenario files that change a preset's shared prefix
or its trace's speed (accepted now), give it prompts shorter than its prefix, a vllm_version as a TOML number,
a num_requests past the trace or beside base.num_requests, a ratio of a configuration to itself, one choice
twice, a reveal field of another kind, a unit on a choice, kv_quality_cost on the simulated backend; hardware
presets naming bf16 twice (as bfloat16) or a rate for int4 or nf4 that is never read; model presets with
weights_source and no weights_bytes, or weights of 1 byte; a calibration profile giving a key twice.

Before the fixes: n_shared_experts were sized as 0 bytes; kv_lora_rank 0 dropped the latent and its
qk_rope_head_dim without a word (a full KV cache); int4 sized the state at half a byte an element and "auto"
(vLLM's word) was refused; load_in_4bit won over load_in_8bit; torch_dtype won over dtype; num_experts won
over num_local_experts; 130 / 4 heads was 32 each; "18:15:46.68.5" read as 47.18 s, "18:15.5" as 18:15:00.5
and "2023-11-16.5" as midnight and a half second; { dist = "uniform" } drew 1 to 1,000,000 tokens (every
request rejected); num_requests = 50 on a 3-row trace ran 3 ("completed 3"); a scenario's shared_prefix_tokens
= 512 on shared-system-prompt was refused as unread (fraction 0), trace_speedup on azure-conv as "no trace";
prompt_tokens = 64 on a 1,024-token prefix ran; vllm_version = 0.10 modelled vLLM 0.1; base.num_requests =
30,000 on the 19,366-row trace ran past a minute; a ratio of "paged" to "paged" answered 1.00x; a choice of
one label twice answered it; highest beside a ratio, config beside best and unit beside a choice were dropped;
kv_quality_cost on the simulated backend ran the comparison and then refused it; bfloat16 = 1e13 beside bf16
replaced it; int4 = 1e6 was never read; weights_source was dropped; 1 byte of weights left the whole memory to
the KV pool; a profile's second flops_efficiency replaced its first. Every case's expect is the correct
behaviour.
"""

from __future__ import annotations

import json
from pathlib import Path

from hostile_fixtures import PRESETS, PYTHON_WORDS, config_json_cases


def twelfth_file_cases(d: Path, Case, write) -> list:
    f = d / "twelfth"
    f.mkdir(parents=True, exist_ok=True)
    makers = (_config_cases, _folder_cases, _trace_cases, _workload_cases, _scenario_cases, _hardware_cases,
              _model_cases, _calibration_cases)
    return [case for make in makers for case in make(f, Case, write)]


# -- config.json ----------------------------------------------------------------------------------------------

_BASE = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 128, "intermediate_size": 256,
         "vocab_size": 1000, "max_position_embeddings": 512}
_LINEAR = {"layer_types": ["linear_attention", "full_attention"], "linear_num_key_heads": 2,
           "linear_num_value_heads": 2, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
           "linear_conv_kernel_dim": 4}
# (what, fields over _BASE, what the refusal must say); None: accepted
_CONFIGS = [
    ("n_shared_experts without moe_intermediate_size", {"model_type": "deepseek_v2", "n_routed_experts": 8,
     "num_experts_per_tok": 2, "n_shared_experts": 2}, ("n_shared_experts (2)", "give moe_intermediate_size")),
    ("kv_lora_rank 0 beside qk_rope_head_dim", {"kv_lora_rank": 0, "qk_rope_head_dim": 64, "qk_nope_head_dim": 64},
     ("kv_lora_rank is 0 beside qk_rope_head_dim",)),
    ("a recurrent state kept as int4", {**_LINEAR, "mamba_ssm_dtype": "int4"},
     ("mamba_ssm_dtype 'int4' is not a type a recurrent state is kept in", "float32, float16, bfloat16 or auto")),
    ("a recurrent state of mamba_ssm_dtype auto", {**_LINEAR, "mamba_ssm_dtype": "auto"}, None),
    ("bitsandbytes loading 4- and 8-bit at once", {"quantization_config": {
     "quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": True}},
     ("sets both load_in_4bit and load_in_8bit",)),
    ("torch_dtype float32 and dtype bfloat16", {"torch_dtype": "float32", "dtype": "bfloat16"},
     ("torch_dtype 'float32' and dtype 'bfloat16'", "say different types")),
    ("torch_dtype and dtype both bfloat16", {"torch_dtype": "bfloat16", "dtype": "bfloat16"}, None),
    ("num_experts 8 and num_local_experts 16", {"num_experts": 8, "num_local_experts": 16, "num_experts_per_tok": 2},
     ("num_experts (8) and num_local_experts (16) give different expert counts",)),
    ("hidden_size 130 over 4 heads and no head_dim", {"hidden_size": 130},
     ("hidden_size (130) is not a whole number of num_attention_heads (4)", "give head_dim")),
    ("hidden_size 130 over 4 heads of head_dim 32", {"hidden_size": 130, "head_dim": 32}, None),
]
_YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}


def _config_cases(f: Path, Case, write) -> list:
    cases = config_json_cases(f, Case, write, _BASE, _CONFIGS)
    # transformers 5 writes rope_scaling as rope_parameters: its yarn factor of 4 was read as none, and
    # --max-model-len 2048 refused as past the 512 positions
    for field in ("rope_parameters", "rope_scaling"):
        path = write(f / "configs" / field / "config.json", json.dumps({**_BASE, field: {**_YARN, "rope_theta": 1e4}}))
        cases.append(Case(f"math --config whose {field} stretch 512 positions 4x, --max-model-len 2048", "structure",
                          ["math", "--config", str(path), "--max-model-len", "2048"], expect="ok",
                          must_not_say=PYTHON_WORDS))
    # a kvscope model preset given as a config.json: "malformed JSON at line 1, column 1", nothing to give instead
    cases.append(Case("math --config a kvscope model preset (TOML)", "files",
                      ["math", "--config", str(PRESETS / "models" / "llama-3-8b.toml")],
                      env={"KVSCOPE_CONFIG_DIR": str(f / "config")},
                      must_say=("a kvscope model preset (TOML), not a Hugging Face config.json",
                                str(f / "config" / "presets" / "models" / "NAME.toml"), "--model NAME"),
                      must_not_say=PYTHON_WORDS))
    # a multimodal config.json: the text model's fields in text_config, the whole model's dtype at the top
    text = {k: v for k, v in _BASE.items() if k != "architectures"}
    # (read as float32, it is served in bf16 on the default GPU, as vLLM's --dtype auto does)
    for what, top, said in (("float32 at the top", {"torch_dtype": "float32", "text_config": text},
                             "float32 checkpoint served in bf16"),
                            ("its own fp8 quantization_config", {"text_config": {
                                **text, "quantization_config": {"quant_method": "fp8"}}}, "fp8 (1 B)")):
        path = write(f / "configs" / what.split()[0] / "config.json",
                     json.dumps({"architectures": ["LlavaForConditionalGeneration"], **top}))
        # was: sized as bf16 (2 B a weight) either way
        cases.append(Case(f"math --config whose text_config has {what}", "structure", ["math", "--config", str(path)],
                          expect="ok", must_say=(said,), must_not_say=PYTHON_WORDS))
    return cases


def _folder_cases(f: Path, Case, write) -> list:
    """A model folder whose config.json says fp8 over F32 weights: `math --model-path` sized them at a byte
    each (200 KiB of 545), `run --backend real` loaded them as fp32 without a word."""
    from hostile_fixtures import hostile_model

    good = hostile_model(f / "models" / "good")
    fp8 = f / "models" / "fp8-over-f32"
    fp8.mkdir(parents=True, exist_ok=True)
    for item in good.iterdir():
        (fp8 / item.name).write_bytes(item.read_bytes())
    config = json.loads((good / "config.json").read_text())
    write(fp8 / "config.json", json.dumps({**config, "quantization_config": {"quant_method": "fp8"}}))
    said = (str(fp8), "quantization_config says its weights are stored as fp8", "hold only F32")
    return [
        Case("math --model-path: config.json says fp8, the weights are F32", "structure",
             ["math", "--model-path", str(fp8)], must_say=said, must_not_say=PYTHON_WORDS),
        Case("run --backend real --model-path: config.json says fp8, the weights are F32", "structure",
             ["run", "--quiet", "--backend", "real", "--model-path", str(fp8), "--requests", "2"], slow=True,
             must_say=said, must_not_say=PYTHON_WORDS),
        Case("math --config: the folder's config.json named, it says fp8, the weights beside it are F32", "structure",
             ["math", "--config", str(fp8 / "config.json")], must_say=said, must_not_say=PYTHON_WORDS),
        Case("math --model-path: the good random-weight model", "structure", ["math", "--model-path", str(good)],
             expect="ok", must_not_say=PYTHON_WORDS),
    ]


# -- traces ---------------------------------------------------------------------------------------------------

_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
_TIMES = [  # an arrival time whose fraction follows no seconds: it was added as seconds to what came before
    ("a time with two fractions", "2023-11-16 18:15:46.68.5"),
    ("a fraction after the minutes", "2023-11-16 18:15.5"),
    ("a fraction after a date", "2023-11-16.5"),
]


def _trace_cases(f: Path, Case, write) -> list:
    cases = []
    for i, (what, when) in enumerate(_TIMES):
        path = write(f / "traces" / f"t{i}.csv", f"{_HEAD}2023-11-16 18:15:40,100,10\n{when},100,10\n")
        cases.append(Case(f"run --trace of {what}", "trace", ["run", "--quiet", "--trace", str(path)],
                          must_say=(f"{path} line 3", repr(when), "neither seconds"), must_not_say=PYTHON_WORDS))
    good = write(f / "traces" / "fractions.csv", f"{_HEAD}2023-11-16 18:15:46.5,100,10\n20231116T181547.25,100,10\n"
                                                 "2023-11-16T18:15:48.125Z,100,10\n")
    cases.append(Case("run --trace of fractions after the seconds (spaced, compact, with Z)", "trace",
                      ["run", "--quiet", "--trace", str(good)], expect="ok", must_not_say=PYTHON_WORDS))
    return cases


# -- workloads ------------------------------------------------------------------------------------------------

_W = "num_requests = 3\narrival_rate_per_s = 1.0\noutput_tokens = 4\n"
_WORKLOADS = [
    ("uniform lengths without max", _W + 'prompt_tokens = { dist = "uniform" }\n',
     ("prompt_tokens: a uniform length needs max",)),
    ("uniform lengths from 1 to a max", _W + 'prompt_tokens = { dist = "uniform", max = 64 }\n', None),
]


def _workload_cases(f: Path, Case, write) -> list:
    config = f / "config"
    cases = []
    for i, (what, text, said) in enumerate(_WORKLOADS):
        write(config / "presets" / "workloads" / f"twelfth-w{i}.toml", f'name = "twelfth-w{i}"\n{text}')
        cases.append(Case(f"run --workload with {what}", "structure", ["run", "--quiet", "--workload", f"twelfth-w{i}"],
                          env={"KVSCOPE_CONFIG_DIR": str(config)}, expect="refuse" if said else "ok",
                          must_say=said or (), must_not_say=PYTHON_WORDS))
    # a copy of chat.toml saved as my-chat.toml, its name left: the run was titled "Run: chat on ..."
    write(config / "presets" / "workloads" / "my-chat.toml", (PRESETS / "workloads" / "chat.toml").read_text())
    cases.append(Case("run --workload whose preset's name field is another preset's", "structure",
                      ["run", "--quiet", "--workload", "my-chat", "--requests", "3"],
                      env={"KVSCOPE_CONFIG_DIR": str(config)},
                      must_say=("workload preset my-chat: its name field is 'chat', not 'my-chat'",),
                      must_not_say=PYTHON_WORDS))
    write(f / "workloads" / "three.csv", f"{_HEAD}0,100,10\n1,100,10\n2,100,10\n")
    past = write(f / "workloads" / "past.toml", 'name = "past"\ntrace = "three.csv"\nnum_requests = 50\n')
    every = write(f / "workloads" / "every.toml", 'name = "every"\ntrace = "three.csv"\nnum_requests = 3\n')
    cases += [
        # was: "requests completed 3", the 50 taken without a word
        Case("run --workload file: num_requests 50 on a trace of 3 rows", "structure",
             ["run", "--quiet", "--workload", str(past)],
             must_say=(str(past), "num_requests (50) is more than the 3 requests its trace"), must_not_say=PYTHON_WORDS),
        Case("run --workload file: num_requests 3 on a trace of 3 rows", "structure",
             ["run", "--quiet", "--workload", str(every)], expect="ok", must_not_say=PYTHON_WORDS),
    ]
    return cases


# -- scenarios ------------------------------------------------------------------------------------------------

_PREFIX = (PRESETS / "scenarios" / "prefix-caching.toml").read_text()
_PAGED = (PRESETS / "scenarios" / "paged-vs-contiguous.toml").read_text()
_GQA = (PRESETS / "scenarios" / "gqa-and-fp8.toml").read_text()
_STATIC = (PRESETS / "scenarios" / "static-vs-continuous.toml").read_text()
_ON_PRESET = 'preset = "shared-system-prompt"'
# (what, the scenario's text, --requests, what the refusal must say); None: accepted
_SCENARIOS = [
    ("a shorter shared prefix on a preset that shares one", _PREFIX.replace(
        _ON_PRESET, _ON_PRESET + "\nshared_prefix_tokens = 512"), "50", None),
    ("trace_speedup on a trace preset", _PREFIX.replace(_ON_PRESET, 'preset = "azure-conv"\ntrace_speedup = 10'),
     "50", None),
    ("prompts shorter than its preset's shared prefix", _PREFIX.replace(_ON_PRESET, _ON_PRESET + "\nprompt_tokens = 64"),
     "50", ("base.workload: shared_prefix_tokens (1,024) is not shorter than the longest prompt",)),
    ("an engine's vllm_version as a TOML number", _PREFIX.replace(
        "engine = { enable_prefix_caching = true }", "engine = { enable_prefix_caching = true, vllm_version = 0.10 }"),
     "50", ("configs[2] (prefix caching on).engine.vllm_version: must be text in quotes", "got 0.1")),
    ("num_requests past its trace's rows", _STATIC.replace("num_requests = 96", "num_requests = 30000"), None,
     ("base.num_requests: (30,000) is more than the 19,366 requests",)),
    ("a ratio of a configuration to itself", _PAGED.replace('denominator = "contiguous reservation"',
                                                            'denominator = "paged"'), None,
     ("reveal.denominator: is 'paged', the numerator too",)),
    ("a choice naming one label twice", _GQA.replace('choices = ["Llama 2 7B, fp8 KV", "Llama 3 8B (GQA), fp16 KV"]',
                                                     'choices = ["Llama 2 7B, fp8 KV", "Llama 2 7B, fp8 KV"]'), None,
     ("answer.choices: names a label twice",)),
    ("highest beside a ratio reveal", _PAGED.replace('denominator = "contiguous reservation"',
                                                     'denominator = "contiguous reservation"\nhighest = false'), None,
     ("reveal.highest: a ratio reveal does not read highest",)),
    ("config beside a best reveal", _GQA.replace("highest = true", 'highest = true\nconfig = "Llama 2 7B, fp8 KV"'),
     None, ("reveal.config: a best reveal does not read config",)),
    ("a unit on a choice answer", _GQA.replace('kind = "choice"', 'kind = "choice"\nunit = "GiB"'), None,
     ("answer.unit: a choice answer is a configuration's label, which has no unit",)),
    # was: 300 requests run (base.num_requests), the workload's 80 dropped without a word
    ("a workload num_requests beside base.num_requests", _PREFIX.replace(_ON_PRESET, _ON_PRESET + "\nnum_requests = 80"),
     None, ("base.workload.num_requests: base.num_requests sets how many requests",)),
    # was: the whole comparison run, then "the run measured no kv_quality_cost", the file not named
    ("kv_quality_cost revealed from a simulated run", _PREFIX.replace('metric = "prefix_cache_hit_rate"',
                                                                      'metric = "kv_quality_cost"'), None,
     ("reveal.metric: kv_quality_cost is measured by the real backend only",)),
]


def _scenario_cases(f: Path, Case, write) -> list:
    cases = []
    for i, (what, text, requests, said) in enumerate(_SCENARIOS):
        assert text not in (_PREFIX, _PAGED, _GQA, _STATIC), f"the built-in scenario changed: {what}"
        path = write(f / "scenarios" / f"s{i}.toml", text)
        argv = ["compare", "--scenario", str(path)] + (["--requests", requests] if requests else [])
        cases.append(Case(f"compare --scenario file: {what}", "structure", argv, expect="refuse" if said else "ok",
                          must_say=(str(path), *said) if said else (), must_not_say=PYTHON_WORDS))
    return cases


# -- hardware and model presets -------------------------------------------------------------------------------

_L4 = (PRESETS / "hardware" / "l4-24gb.toml").read_text().split("\n", 1)[1]
_LLAMA = (PRESETS / "models" / "llama-3-8b.toml").read_text().split("\n", 1)[1]
_HARDWARE = [
    ("bf16 and bfloat16", _L4 + "bfloat16 = 1e13\n", ("peak_flops gives 'bf16' and 'bfloat16', one type (bf16) twice",)),
    ("an int4 rate", _L4 + "int4 = 1e6\n", ("peak_flops.int4 is never read",)),
    ("an nf4 rate", _L4 + "nf4 = 1e6\n", ("peak_flops.nf4 is never read",)),
]
_MODELS = [
    ("weights_source and no weights_bytes", _LLAMA + 'weights_source = "measured on disk"\n',
     ("weights_source says where weights_bytes comes from, but weights_bytes is not given",)),
    ("weights of 1 byte", _LLAMA + "weights_bytes = 1\n",
     ("weights_bytes (1) is less than 2 bits for each of the 8,030,261,248 parameters",)),
    ("weights of 4 GB (4 bits a parameter)", _LLAMA + "weights_bytes = 4015130624\n", None),
    # was: --max-model-len 8192 refused as past "the 4,096 positions" the preset never gave
    ("max_position_embeddings_given and no positions",
     _LLAMA.replace("max_position_embeddings = 8192\n", "max_position_embeddings_given = true\n"),
     ("max_position_embeddings_given is true, but max_position_embeddings is not given",)),
]


def _hardware_cases(f: Path, Case, write) -> list:
    config = f / "config"
    cases = []
    for i, (what, text, said) in enumerate(_HARDWARE):
        write(config / "presets" / "hardware" / f"twelfth-h{i}.toml", f'name = "twelfth-h{i}"\n{text}')
        cases.append(Case(f"math --hardware whose peak_flops gives {what}", "structure",
                          ["math", "--hardware", f"twelfth-h{i}"], env={"KVSCOPE_CONFIG_DIR": str(config)},
                          must_say=(f"hardware preset twelfth-h{i}", *said), must_not_say=PYTHON_WORDS))
    return cases


def _model_cases(f: Path, Case, write) -> list:
    config = f / "config"
    cases = []
    for i, (what, text, said) in enumerate(_MODELS):
        write(config / "presets" / "models" / f"twelfth-m{i}.toml", f'name = "twelfth-m{i}"\n{text}')
        cases.append(Case(f"math --model whose preset gives {what}", "structure", ["math", "--model", f"twelfth-m{i}"],
                          env={"KVSCOPE_CONFIG_DIR": str(config)}, expect="refuse" if said else "ok",
                          must_say=(f"model preset twelfth-m{i}", *said) if said else (), must_not_say=PYTHON_WORDS))
    return cases


# -- calibration profiles -------------------------------------------------------------------------------------

def _calibration_cases(f: Path, Case, write) -> list:
    from hostile_fixtures import cpu_calibration_key

    key = cpu_calibration_key()
    if key is None:
        return []
    cache = f / "calibration" / "twice"
    # the second flops_efficiency replaced the first without a word
    write(cache / "calibration" / f"{key}.json",
          '{"format": "kvscope-calibration", "version": 1, "machine": "%s", "calibration": {"label": "fitted here", '
          '"flops_efficiency": 0.5, "flops_efficiency": 0.01}}' % key)
    return [Case("run --hardware this-machine: a calibration profile giving flops_efficiency twice", "files",
                 ["run", "--quiet", "--hardware", "this-machine", "--requests", "3"],
                 env={"KVSCOPE_CACHE_DIR": str(cache)},
                 must_say=(f"{key}.json", "the key 'flops_efficiency' is given twice in one object (0.5, then 0.01)"))]
