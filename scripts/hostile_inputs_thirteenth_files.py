"""The thirteenth hostile pass's cases (2026-11-29): the FILES kvscope reads, for scripts/hostile_inputs.py. A
config.json's rope tables that cannot say how far they stretch the positions (a factor of "4", 0 or true, a
list for the table, an original_max_position_embeddings of "512", the same in transformers 5's table per
layer type), rope_scaling and rope_parameters (its newer name) stretching differently, Gemma 3's linear
factor of 8, transformers 5's rope_parameters given per layer type; fields that say one fact twice
(experts_per_token beside another num_experts_per_tok, shared_expert_intermediate_size beside another
n_shared_experts x moe_intermediate_size, layer_types beside a full_attention_interval or
sliding_window_pattern that gives other layers, or beside use_sliding_window false); Qwen-MoE's
decoder_sparse_step of 0, 2 or past the layers; this machine's calibration profile a folder or a link to
nothing; a scenario whose two configurations are one; a workload file's shared prefix longer than every row
of its trace; a hardware preset's [calibration] of a label alone; named chat templates none named default.

Before the fixes: each odd rope value was read as no stretch at all, without a word (so --max-model-len 2048
on 512 positions stretched 4x was refused as past the 512); rope_scaling's stretch was taken over
rope_parameters'; Gemma 3's 131,072 positions were stretched to 1,048,576 (vLLM skips the factor for
gemma3 model types and refuses that length), and 200,000 tokens were sized; a rope_parameters of
{"full_attention": {yarn x4}, ...} stretched nothing; num_experts_per_tok won over experts_per_token;
shared_expert_intermediate_size 999 was replaced by 2 x 64 without a word; layer_types won over the
interval, the pattern and use_sliding_window; decoder_sparse_step was not read (a step of 2 sized every
layer with its experts, 0 ran as 1); the folder or dangling link where the profile belongs left the
datasheet peaks in use, as if `kvscope calibrate` had never run; two configurations alike but for their
label ran and revealed differences of 0; 100-token trace rows under a 1,000-token prefix were replayed as
1,001 tokens each; a label-only calibration ran the datasheet peaks titled as fitted; templates named
tool_use and rag were said as "must be the template's text, got NoneType". Every case's expect is the
correct behaviour.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from hostile_fixtures import PRESETS, PYTHON_WORDS, SMALL_LLAMA, config_json_cases, pass_cases


def thirteenth_file_cases(d: Path, Case, write) -> list:
    makers = (_config_cases, _calibration_cases, _scenario_cases, _workload_cases, _hardware_cases, _template_cases)
    return pass_cases(d / "thirteenth", makers, Case, write)


# -- config.json ----------------------------------------------------------------------------------------------

_BASE = SMALL_LLAMA
_YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}
_LINEAR = {"linear_num_key_heads": 2, "linear_num_value_heads": 2, "linear_key_head_dim": 8,
           "linear_value_head_dim": 8, "linear_conv_kernel_dim": 4}
_EVERY_OTHER = ["linear_attention", "full_attention"] * 2
_SLIDING = ["sliding_attention", "full_attention"] * 2
_MOE = {"num_experts": 8, "moe_intermediate_size": 64}
_DEEPSEEK = {"model_type": "deepseek_v2", "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 2,
             "moe_intermediate_size": 64}
_FACTOR = "factor must be a number greater than 0"
# (what, fields over _BASE, what the refusal must say); None: accepted. Those with a rope table are asked
# --max-model-len 2048, which only a stretch of the 512 positions allows.
_CONFIGS = [
    ("a yarn factor of \"4\" (text)", {"rope_scaling": {**_YARN, "factor": "4"}}, ("rope_scaling." + _FACTOR,)),
    ("a yarn factor of 0", {"rope_scaling": {**_YARN, "factor": 0}}, ("rope_scaling." + _FACTOR, "got 0")),
    ("a rope_parameters factor of true", {"rope_parameters": {**_YARN, "factor": True}},
     ("rope_parameters." + _FACTOR, "got True")),
    ("rope_scaling as a list", {"rope_scaling": [4.0, 512]}, ("rope_scaling must be a table", "[4.0, 512]")),
    ("an original_max_position_embeddings of \"512\"",
     {"rope_scaling": {**_YARN, "original_max_position_embeddings": "512"}},
     ("rope_scaling.original_max_position_embeddings must be a whole number",)),
    ("a per-layer-type rope_parameters factor of \"4\"",
     {"rope_parameters": {"full_attention": {**_YARN, "factor": "4"}, "sliding_attention": {"rope_type": "default"}}},
     ("rope_parameters.full_attention." + _FACTOR,)),
    ("rope_scaling x2 and rope_parameters x8", {"rope_scaling": {"rope_type": "linear", "factor": 2.0},
                                                "rope_parameters": {"rope_type": "linear", "factor": 8.0}},
     ("rope_scaling stretches max_position_embeddings (512) to 1,024 positions", "rope_parameters (its newer name) "
      "to 4,096")),
    ("rope_scaling and rope_parameters both yarn x4", {"rope_scaling": _YARN, "rope_parameters": _YARN}, None),
    ("a yarn factor of 4 (a whole number)", {"rope_scaling": {**_YARN, "factor": 4}}, None),
    ("transformers 5's rope_parameters per layer type (yarn x4 on full attention)",
     {"rope_parameters": {"full_attention": {**_YARN, "rope_theta": 1e6},
                          "sliding_attention": {"rope_type": "default"}}},
     None),
    ("num_experts_per_tok 2 and experts_per_token 4", {**_MOE, "num_experts_per_tok": 2, "experts_per_token": 4},
     ("num_experts_per_tok (2) and experts_per_token (4) give different numbers of experts",)),
    ("num_experts_per_tok and experts_per_token both 4 (gpt-oss)", {**_MOE, "num_experts_per_tok": 4,
                                                                    "experts_per_token": 4}, None),
    ("shared_expert_intermediate_size 999 beside 2 shared experts of 64", {**_DEEPSEEK,
                                                                          "shared_expert_intermediate_size": 999},
     ("shared_expert_intermediate_size (999) is not n_shared_experts x moe_intermediate_size (2 x 64 = 128)",)),
    ("shared_expert_intermediate_size 128 beside 2 shared experts of 64",
     {**_DEEPSEEK, "shared_expert_intermediate_size": 128}, None),
    ("full_attention_interval 4 beside layer_types of every other layer", {
        **_LINEAR, "full_attention_interval": 4, "layer_types": _EVERY_OTHER},
     ("layer_types and full_attention_interval (4) say different layers", "3 linear_attention, 1 full_attention")),
    ("full_attention_interval 2 beside layer_types of every other layer", {
        **_LINEAR, "full_attention_interval": 2, "layer_types": _EVERY_OTHER}, None),
    ("sliding_window_pattern 4 beside layer_types of every other layer", {
        "sliding_window": 64, "sliding_window_pattern": 4, "layer_types": _SLIDING},
     ("layer_types and sliding_window_pattern (4) say different layers",)),
    ("use_sliding_window false beside sliding layer_types", {
        "sliding_window": 64, "use_sliding_window": False, "layer_types": _SLIDING},
     ("use_sliding_window is false, but layer_types lists 2 sliding_attention layers",)),
    ("decoder_sparse_step 0 (transformers divides by it)", {**_MOE, "num_experts_per_tok": 2, "decoder_sparse_step": 0},
     ("decoder_sparse_step must be at least 1",)),
    ("decoder_sparse_step 5 on 4 layers", {**_MOE, "num_experts_per_tok": 2, "decoder_sparse_step": 5},
     ("decoder_sparse_step makes all 4 layers dense",)),
    ("decoder_sparse_step 2 (every second layer sparse)", {**_MOE, "num_experts_per_tok": 2, "decoder_sparse_step": 2},
     None),
    ("use_sliding_window false beside full-attention layer_types (Qwen3's)", {
        "sliding_window": 4096, "use_sliding_window": False, "layer_types": ["full_attention"] * 4}, None),
]
_GEMMA = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": {
    **{k: v for k, v in _BASE.items() if k != "architectures"}, "model_type": "gemma3_text", "head_dim": 32,
    "max_position_embeddings": 131072, "sliding_window": 64, "sliding_window_pattern": 2,
    "rope_scaling": {"rope_type": "linear", "factor": 8.0}}}


def _config_cases(f: Path, Case, write) -> list:
    cases = config_json_cases(f, Case, write, _BASE, _CONFIGS, extra=lambda fields: ["--max-model-len", "2048"]
                              if {"rope_scaling", "rope_parameters"} & set(fields) else [])
    gemma = write(f / "configs" / "gemma3" / "config.json", json.dumps(_GEMMA))
    cases += [
        # was: accepted, 200,000 tokens sized on the 1,048,576 positions the factor of 8 made of 131,072
        Case("math --config Gemma 3 (rope linear x8 on 131,072 positions), --max-model-len 200000", "structure",
             ["math", "--config", str(gemma), "--max-model-len", "200000"],
             must_say=("max_model_len 200,000 tokens is longer than the 131,072 positions",),
             must_not_say=PYTHON_WORDS),
        Case("math --config Gemma 3 (rope linear x8 on 131,072 positions), --max-model-len 131072", "structure",
             ["math", "--config", str(gemma), "--max-model-len", "131072"], expect="ok", must_not_say=PYTHON_WORDS),
    ]
    return cases


# -- calibration profiles -------------------------------------------------------------------------------------

def _calibration_cases(f: Path, Case, write) -> list:
    """This machine's profile a folder, or a link to a file that is gone: the run used the datasheet peaks,
    as if `kvscope calibrate` had never run here."""
    from hostile_fixtures import cpu_calibration_key

    key, cases = cpu_calibration_key(), []
    for what in ("a folder", "a link that leads nowhere") if key else ():
        cache = f / "calibration" / what.split()[-1]
        profile = cache / "calibration" / f"{key}.json"
        profile.parent.mkdir(parents=True, exist_ok=True)
        if what == "a folder":
            profile.mkdir(exist_ok=True)
        elif not profile.is_symlink():
            os.symlink(cache / "gone.json", profile)
        cases.append(Case(f"run --hardware this-machine: the calibration profile is {what}", "files",
                          ["run", "--quiet", "--hardware", "this-machine", "--requests", "3"],
                          env={"KVSCOPE_CACHE_DIR": str(cache)},
                          must_say=(f"{key}.json: is {what}, not a file", "run `kvscope calibrate` again"),
                          must_not_say=PYTHON_WORDS))
    return cases


# -- scenarios ------------------------------------------------------------------------------------------------

_PREFIX = (PRESETS / "scenarios" / "prefix-caching.toml").read_text()
_OFF, _ON = "engine = { enable_prefix_caching = false }", "engine = { enable_prefix_caching = true }"


def _scenario_cases(f: Path, Case, write) -> list:
    assert _OFF in _PREFIX, "the built-in scenario changed"
    twins = write(f / "scenarios" / "twins.toml", _PREFIX.replace(_OFF, _ON))
    apart = write(f / "scenarios" / "apart.toml", _PREFIX.replace(_OFF, _ON + "\noutput_tokens = 64"))
    return [
        # was: run, a hit rate revealed, every difference between the two 0
        Case("compare --scenario file whose two configurations are one", "structure",
             ["compare", "--scenario", str(twins), "--requests", "50"],
             must_say=(str(twins), "'prefix caching off' and 'prefix caching on' are the same configuration"),
             must_not_say=PYTHON_WORDS),
        Case("compare --scenario file whose two configurations differ in output_tokens only", "structure",
             ["compare", "--scenario", str(apart), "--requests", "50"], expect="ok", must_not_say=PYTHON_WORDS),
    ]


# -- workloads ------------------------------------------------------------------------------------------------

def _workload_cases(f: Path, Case, write) -> list:
    write(f / "workloads" / "rows.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,100,10\n1,60,10\n2,80,10\n")
    cases = []
    for tokens, said in ((1000, ("shared_prefix_tokens (1,000) is not shorter than the longest prompt its trace",
                                 "rows.csv gives (100)")), (64, None)):
        path = write(f / "workloads" / f"prefix-{tokens}.toml", f'name = "prefix-{tokens}"\ntrace = "rows.csv"\n'
                     f"shared_prefix_fraction = 0.9\nshared_prefix_tokens = {tokens}\n")
        # was: run, every row's prompt grown to 1,001 tokens (the prefix and one)
        cases.append(Case(f"run --workload file: a {tokens:,}-token shared prefix on a trace of 60- to 100-token "
                          "prompts", "structure", ["run", "--quiet", "--workload", str(path)],
                          expect="refuse" if said else "ok", must_say=(str(path), *said) if said else (),
                          must_not_say=PYTHON_WORDS))
    return cases


# -- hardware presets -----------------------------------------------------------------------------------------

_L4 = (PRESETS / "hardware" / "l4-24gb.toml").read_text().split("\n", 1)[1].split("[calibration]")[0]


def _hardware_cases(f: Path, Case, write) -> list:
    config = f / "config"
    cases = []
    label_only = ("calibration gives a label but no figure",)
    for name, table, said in (("label-only", 'label = "fitted on our L4"\n', label_only),
                              ("fitted", 'label = "fitted on our L4"\nflops_efficiency = 0.5\n', None)):
        write(config / "presets" / "hardware" / f"thirteenth-{name}.toml", f"{_L4}\n[calibration]\n{table}")
        # was: the datasheet peaks run, the summary saying "simulated times: fitted on our L4"
        cases.append(Case(f"run --hardware whose [calibration] is {name}", "structure",
                          ["run", "--quiet", "--hardware", f"thirteenth-{name}", "--requests", "3"],
                          env={"KVSCOPE_CONFIG_DIR": str(config)}, expect="refuse" if said else "ok",
                          must_say=said or (), must_not_say=PYTHON_WORDS))
    return cases


# -- tokenizer files ------------------------------------------------------------------------------------------

def _template_cases(f: Path, Case, write) -> list:
    """tokenizer_config.json's chat_template as named templates (transformers reads the list as {name: text}):
    none named default was said as "must be the template's text, got NoneType"."""
    from hostile_fixtures import hostile_model, model_variant

    good = hostile_model(f / "models" / "good")
    plain = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    cases = []
    for names, said in ((("tool_use", "rag"), ("names its templates ('tool_use', 'rag') but none 'default'",)),
                        (("default", "tool_use"), None)):
        folder = model_variant(good, f / "models" / "-".join(names), write, {"tokenizer_config.json": json.dumps({
            "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<eos>", "unk_token": "[UNK]",
            "chat_template": [{"name": name, "template": plain} for name in names]})})
        cases.append(Case(f"run --model-path chat-text: chat templates named {' and '.join(names)}", "model",
                          ["run", "--quiet", "--backend", "real", "--model-path", str(folder), "--requests", "2",
                           "--kv-cache-memory-bytes", "1e6", "--workload", "chat-text"],
                          expect="refuse" if said else "ok", must_say=said or (), must_not_say=PYTHON_WORDS,
                          slow=True))
    return cases
