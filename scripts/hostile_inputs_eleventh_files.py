"""The eleventh hostile pass's cases (2026-11-28): the FILES kvscope reads, each well-formed but
contradicting itself, for scripts/hostile_inputs.py. Model presets whose name field names another
preset; model presets giving v_head_dim or q_lora_rank without multi-head latent attention, a
max_model_len_limit below the positions it stretches, or experts beside a dense layer count of every
layer (and config.json's first_k_dense_replace or mlp_only_layers covering every layer); a hardware
preset whose interconnect moves 1e-300 bytes a second; workloads whose constant length lies outside its
own min or max, whose lognormal median lies outside them, that give trace_speedup without a trace, a
shared prefix to no request (shared_prefix_fraction 0) or one no prompt can hold; a scenario sending all
at once at an arrival rate; a calibration profile measured on another machine; recordings whose later
chunk's clock or step numbers start again below the chunk before (forged with their checksums right).
Beside them, guards of what is consistent and must stay accepted (a single-row trace, duplicate rows, a
sliding window longer than the positions, 8 devices with no interconnect given) or is refused already
(more KV heads than heads).

Before the fixes: a copy of llama-3-8b.toml saved as my-llama.toml (2 layers) was titled llama-3-8b
everywhere; the 1e-300 interconnect ran 5 requests to a summary of "nan %" and a NumPy warning;
v_head_dim and q_lora_rank were dropped without a word (a 2 MiB block as if never given); a
max_model_len_limit of 100 cut an 8,192-position model to 100 tokens; a mixture of experts whose every
layer is dense sized 8 experts no layer ran; {value = 8, min = 100} ran 100-token prompts and {value =
800, max = 100} 800-token ones; a median of 5,000 under a max of 100 clipped every prompt to 100;
trace_speedup, shared_prefix_tokens and num_shared_prefixes were ignored; a 500-token prefix on 8-token
prompts ran 501-token prompts; the scenario's arrival rate was dropped; an H100's profile was used as
this CPU's speed; a second chunk whose clock restarted at 0 (or whose steps were numbered from 0 again)
was exported as it came, a timeline folded over itself. Every case's expect is the correct behaviour: a
case that fails here is a bug.
"""

from __future__ import annotations

import json
from pathlib import Path

from hostile_fixtures import PRESETS, PYTHON_WORDS


def eleventh_file_cases(d: Path, Case, write) -> list:
    f = d / "eleventh"
    f.mkdir(parents=True, exist_ok=True)
    makers = (_model_cases, _config_cases, _hardware_cases, _workload_cases, _trace_cases, _scenario_cases,
              _calibration_cases, _recording_cases)
    return [case for make in makers for case in make(f, Case, write)]


def _preset(config: Path, kind: str, name: str, text: str, write) -> str:
    write(config / "presets" / kind / f"{name}.toml", f'name = "{name}"\n{text}')
    return name


# -- model and hardware presets -------------------------------------------------------------------------------

_LLAMA = (PRESETS / "models" / "llama-3-8b.toml").read_text().split("\n", 1)[1]
_TWO_LAYERS = _LLAMA.replace("num_hidden_layers = 32", "num_hidden_layers = 2")
# (name, preset text, what the refusal must say); None: accepted
_MODELS = [
    ("v_head_dim without multi-head latent attention", _LLAMA + "v_head_dim = 64\n",
     ("v_head_dim describes multi-head latent attention", "kv_lora_rank is not set")),
    ("q_lora_rank and v_head_dim without multi-head latent attention", _LLAMA + "q_lora_rank = 64\nv_head_dim = 64\n",
     ("q_lora_rank and v_head_dim describe",)),
    ("a max_model_len_limit below max_position_embeddings", _LLAMA + "max_model_len_limit = 100\n",
     ("max_model_len_limit (100) is less than max_position_embeddings (8,192)",)),
    ("every layer dense beside 8 experts", _LLAMA + "num_experts = 8\nnum_experts_per_tok = 2\n"
     "moe_intermediate_size = 64\nnum_dense_layers = 32\n", ("num_dense_layers (32) makes every layer dense",)),
    ("more KV heads than heads", _LLAMA.replace("num_key_value_heads = 8", "num_key_value_heads = 64"),
     ("num_key_value_heads (64) must divide num_attention_heads (32)",)),
    ("a sliding window longer than its positions", _TWO_LAYERS + 'layer_types = ["sliding_attention", '
     '"full_attention"]\nsliding_window = 1000000000\n', None),
    ("sliding and linear layers with no full attention", _TWO_LAYERS + 'layer_types = ["sliding_attention", '
     '"linear_attention"]\nsliding_window = 64\nlinear_state_bytes = 1000\n', None),
]


def _model_cases(f: Path, Case, write) -> list:
    config = f / "config"
    env = {"KVSCOPE_CONFIG_DIR": str(config)}
    cases = []
    for i, (what, text, said) in enumerate(_MODELS):
        name = _preset(config, "models", f"eleventh-m{i}", text, write)
        cases.append(Case(f"math --model whose preset has {what}", "structure", ["math", "--model", name],
                          env=env, expect="refuse" if said else "ok", must_say=said or (), must_not_say=PYTHON_WORDS))
    # a copy of a preset whose name was left as it was: every table titled it llama-3-8b
    write(config / "presets" / "models" / "my-llama.toml", 'name = "llama-3-8b"\n' + _TWO_LAYERS)
    cases.append(Case("math --model whose preset's name field is another preset's", "structure",
                      ["math", "--model", "my-llama"], env=env,
                      must_say=("its name field is 'llama-3-8b', not 'my-llama'",)))
    return cases


_L4 = (PRESETS / "hardware" / "l4-24gb.toml").read_text().split("\n", 1)[1]
_EIGHT = _L4.replace("gpu_count = 1", "gpu_count = 8")
_LINK = "interconnect_bandwidth_bytes_per_s = 64e9"


_BASE = {"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 128, "intermediate_size": 256,
         "vocab_size": 1000, "max_position_embeddings": 512, "num_experts": 8, "num_experts_per_tok": 2,
         "moe_intermediate_size": 64}
_CONFIGS = [  # a mixture of experts none of whose layers is one: its experts were sized and never used
    ("first_k_dense_replace of every layer", {"first_k_dense_replace": 2}, ("first_k_dense_replace makes all 2",)),
    ("mlp_only_layers naming every layer", {"mlp_only_layers": [1, 0]}, ("mlp_only_layers makes all 2 layers dense",)),
    ("mlp_only_layers naming one layer twice", {"mlp_only_layers": [1, 1]}, None),
]


def _config_cases(f: Path, Case, write) -> list:
    cases = []
    for i, (what, fields, said) in enumerate(_CONFIGS):
        path = write(f / "configs" / f"c{i}" / "config.json", json.dumps({**_BASE, **fields}))
        cases.append(Case(f"math --config of experts with {what}", "structure", ["math", "--config", str(path)],
                          expect="refuse" if said else "ok", must_say=said or (),
                          must_not_say=PYTHON_WORDS + ("num_dense_layers",)))
    return cases


def _hardware_cases(f: Path, Case, write) -> list:
    config = f / "config"
    env = {"KVSCOPE_CONFIG_DIR": str(config)}
    tiny = _preset(config, "hardware", "eleventh-link-1e-300", _EIGHT.replace(_LINK, _LINK[:-4] + "1e-300"), write)
    none = _preset(config, "hardware", "eleventh-link-0", _EIGHT.replace(_LINK, _LINK[:-4] + "0"), write)
    return [
        # was: run to the end, a summary of "nan %" and NumPy's "invalid value encountered in subtract"
        Case("run --hardware whose interconnect moves 1e-300 bytes a second", "structure",
             ["run", "--quiet", "--hardware", tiny, "--requests", "5"], env=env,
             must_say=("interconnect_bandwidth_bytes_per_s must be 0", "got 1e-300"), must_not_say=PYTHON_WORDS),
        Case("run --hardware of 8 devices whose interconnect is 0 (none given)", "structure",
             ["run", "--quiet", "--hardware", none, "--requests", "5"], env=env, expect="ok",
             must_not_say=PYTHON_WORDS + ("RuntimeWarning",)),
    ]


# -- workloads, traces, scenarios -----------------------------------------------------------------------------

_W = "num_requests = 3\narrival_rate_per_s = 1.0\noutput_tokens = 4\n"
_WORKLOADS = [
    ("a constant length below its own min", _W + 'prompt_tokens = { dist = "constant", value = 8, min = 100 }\n',
     ("prompt_tokens: constant value 8 is below min 100",)),
    ("a constant length above its own max", _W + 'prompt_tokens = { dist = "constant", value = 800, max = 100 }\n',
     ("prompt_tokens: constant value 800 is above max 100",)),
    ("a lognormal median above its max", _W + 'prompt_tokens = { dist = "lognormal", median = 5000, sigma = 0.1, '
     "max = 100 }\n", ("lognormal median 5,000.0 is outside min 1 to max 100",)),
    ("trace_speedup and no trace", _W + "prompt_tokens = 8\ntrace_speedup = 100\n",
     ("trace_speedup replays a trace faster, but the workload has no trace",)),
    ("a shared prefix no request uses", _W + "prompt_tokens = 8\nshared_prefix_tokens = 500\nnum_shared_prefixes = 4\n",
     ("shared_prefix_tokens and num_shared_prefixes would be ignored", "shared_prefix_fraction")),
    ("a shared prefix longer than every prompt",
     _W + "prompt_tokens = 8\nshared_prefix_fraction = 1.0\nshared_prefix_tokens = 500\n",
     ("shared_prefix_tokens (500) is not shorter than the longest prompt prompt_tokens gives (8)",)),
    ("a constant length whose min and max are its value",
     _W + 'prompt_tokens = { dist = "constant", value = 100, min = 100, max = 100 }\n', None),
]


def _workload_cases(f: Path, Case, write) -> list:
    config = f / "config"
    cases = []
    for i, (what, text, said) in enumerate(_WORKLOADS):
        name = _preset(config, "workloads", f"eleventh-w{i}", text, write)
        cases.append(Case(f"run --workload with {what}", "structure", ["run", "--quiet", "--workload", name],
                          env={"KVSCOPE_CONFIG_DIR": str(config)}, expect="refuse" if said else "ok",
                          must_say=said or (), must_not_say=PYTHON_WORDS))
    return cases


def _trace_cases(f: Path, Case, write) -> list:
    head = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    traces = [("a single row", "single.csv", head + "5,100,10\n"),
              ("the same row three times", "dups.csv", head + "0,100,10\n" * 3),
              ("times near 1e11 s, half a second apart", "late.csv",
               head + "99999999999,100,10\n99999999999.5,100,10\n")]
    return [Case(f"run --trace of {what}", "trace",
                 ["run", "--quiet", "--trace", str(write(f / "traces" / name, text))],
                 expect="ok", must_not_say=PYTHON_WORDS) for what, name, text in traces]


def _scenario_cases(f: Path, Case, write) -> list:
    text = (PRESETS / "scenarios" / "cache-ceiling.toml").read_text()
    path = write(f / "scenarios" / "at-once-and-a-rate.toml",
                 text.replace("all_at_once = true", "all_at_once = true\narrival_rate_per_s = 5.0", 1))
    # was: the rate dropped without a word, every request sent at 0 s
    return [Case("compare --scenario whose workload is all at once and at a rate", "structure",
                 ["compare", "--scenario", str(path)],
                 must_say=("base.workload.arrival_rate_per_s", "all_at_once"), must_not_say=PYTHON_WORDS)]


# -- calibration profiles, recordings -------------------------------------------------------------------------

def _calibration_cases(f: Path, Case, write) -> list:
    from hostile_fixtures import cpu_calibration_key

    key = cpu_calibration_key()
    if key is None:
        return []
    cache = f / "calibration" / "another-machine"
    write(cache / "calibration" / f"{key}.json", json.dumps(
        {"format": "kvscope-calibration", "version": 1, "machine": "cuda-nvidia-h100-80gb-hbm3",
         "calibration": {"label": "fitted on an H100", "flops_efficiency": 0.6}}))
    return [Case("run --hardware this-machine: a calibration profile measured on another machine", "files",
                 ["run", "--quiet", "--hardware", "this-machine", "--requests", "3"],
                 env={"KVSCOPE_CACHE_DIR": str(cache)},
                 must_say=(f"{key}.json", "measured on 'cuda-nvidia-h100-80gb-hbm3', not on this machine"))]


def forged_chunk(data: bytes, nth: int, name: str, change) -> bytes:
    """The recording with its nth STEPS record's array `name` replaced by change(array), checksums right."""
    import numpy as np
    from hostile_recordings import payload_of, records_of, reframed

    from kvscope.app.lab.recording.format import STEPS, decode_payload, encode_payload

    number = [n for n, r in enumerate(records_of(data)) if r[1] == STEPS][nth]
    head, arrays = decode_payload(payload_of(data, number), "forging")
    arrays = {k: np.array(v) for k, v in arrays.items()}
    arrays[name] = change(arrays[name])
    head.pop("arrays")
    return reframed(data, number, encode_payload(head, arrays))


def _recording_cases(f: Path, Case, write) -> list:
    from hostile_recordings import small_recording

    data = small_recording(f / "recordings" / "good.kvrec").read_bytes()
    out = f / "out"
    out.mkdir(parents=True, exist_ok=True)
    forged = [("whose second chunk's clock starts again at 0", "clock-again.kvrec", "step.start_time_s",
               lambda v: v - v[0]),
              ("whose second chunk numbers its steps from 0 again", "steps-again.kvrec", "step.step", lambda v: v - 16)]
    cases = []
    for what, name, array, change in forged:
        path = write(f / "recordings" / name, forged_chunk(data, 1, array, change))
        said = (name, f"{array} goes backwards from the chunk before it")
        cases += [Case(f"export --csv a recording {what}", "recording",
                       ["export", str(path), "--csv", str(out / f"{name}.csv")], must_say=said),
                  Case(f"export --perfetto a recording {what}", "recording",
                       ["export", str(path), "--perfetto", str(out / f"{name}.json")], must_say=said)]
    return cases
