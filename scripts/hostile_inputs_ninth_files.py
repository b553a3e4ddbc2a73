"""The ninth hostile pass's cases (2026-11-28): the FILES kvscope reads, clean but wrong, for
scripts/hostile_inputs.py. Traces whose times mix forms (a zone on some rows, seconds then dates),
are milliseconds since 1970, or whose counts int() reads though no trace means them (1_000, Arabic
digits); traces separated by semicolons or tabs, or ending rows with a comma; workload TOML whose
fields are bare TOML dates; config.json whose MLA or linear-attention fields are missing or 0 (said
as fields kvscope derives), whose compressed-tensors weights are a list or whose mlp_only_layers are
names; a model folder whose model.safetensors is a pipe; recordings whose step series are NaN, run
backwards or leave their range, whose events name blocks past the pool's or negative request ids
(forged with their checksums right).

Before the fixes: the mixed traces replayed 5 hours or 53 years apart, or refused as "goes
backwards"; the millisecond trace replayed 1,000 times slower; 1_000 was 1,000 tokens; the dates
were quoted as datetime.date(1979, 5, 27); mlp_only_layers of names counted as dense layers; the
pipe blocked every command that loads a model, for ever; a NaN start time was a traceback in the
Perfetto export, a kv_usage of 5 a pool 500 % full, a step clock that ran backwards exported as it came.

The model and hardware preset cases with dates still fail (app/lab/presets.py's read_toml quotes
them by repr; the fix belongs there, reported). Every case's expect is the correct behaviour: a
case that fails here is a bug.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
BASE = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 128, "intermediate_size": 256,
        "vocab_size": 1000, "max_position_embeddings": 512}
PYTHON_WORDS = ("datetime.", "object has no attribute", "NoneType")

# (name, rows after the header, what the refusal must say)
_TRACES = [
    ("a zone on the second row only", "2023-11-16 18:15:46,100,10\n2023-11-16 18:15:47+05:00,100,10\n",
     ("line 3", "with a time zone")),
    ("seconds, then a date", "0,100,10\n2023-11-16 18:15:46,100,10\n", ("line 3", "a number of seconds")),
    ("milliseconds since 1970", "1700000000000,100,10\n1700000005000,100,10\n", ("line 2", "milliseconds")),
    ("microseconds since 1970", "1700000000000000,100,10\n", ("line 2", "milliseconds or finer")),
    ("a count of 1_000", "0,1_000,10\n", ("ContextTokens '1_000'", "digits 0-9")),
    ("a count in Arabic digits", "0,\u0661\u0660\u0660,10\n", ("ContextTokens", "digits 0-9")),
    ("an output count of 1_0", "0,100,1_0\n", ("GeneratedTokens '1_0'",)),
    ("a time of 1_0", "1_0,100,10\n", ("TIMESTAMP '1_0'",)),
    ("a day-first date", "16/11/2023 18:15,100,10\n", ("TIMESTAMP '16/11/2023 18:15'", "ISO date-time")),
    ("a count of 1e3", "0,1e3,10\n", ("ContextTokens '1e3'",)),
    ("a count of 100.0", "0,100.0,10\n", ("ContextTokens '100.0'",)),
    ("a row of two cells", "0,100\n", ("line 2", "2 cells")),
]
_CONFIGS = [
    ("compressed-tensors weights a list", {"quantization_config": {
        "quant_method": "compressed-tensors", "config_groups": {"g": {"weights": [8]}}}}, "weights must be a table"),
    ("kv_lora_rank without its head dims", {"kv_lora_rank": 512}, "qk_nope_head_dim and qk_rope_head_dim"),
    ("linear attention kernel of 0", {"layer_types": ["linear_attention", "full_attention"],
                                      "linear_num_key_heads": 1, "linear_num_value_heads": 1,
                                      "linear_key_head_dim": 1, "linear_value_head_dim": 1,
                                      "linear_conv_kernel_dim": 0}, "linear_conv_kernel_dim"),
    ("linear attention of 0 value heads", {"layer_types": ["linear_attention", "full_attention"],
                                           "linear_num_key_heads": 1, "linear_num_value_heads": 0,
                                           "linear_key_head_dim": 1, "linear_value_head_dim": 1,
                                           "linear_conv_kernel_dim": 4}, "linear_num_value_heads"),
    ("mlp_only_layers of names", {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                                  "mlp_only_layers": ["a", "b"]}, "mlp_only_layers"),
]
# (preset kind, name, TOML text, the field said): a bare TOML date where a number or text belongs
_DATED_PRESETS = [
    ("workloads", "dated-count", 'name = "dated-count"\nnum_requests = 1979-05-27\n', "num_requests"),
    ("workloads", "dated-time", 'name = "dated-time"\nnum_requests = 07:32:00\n', "num_requests"),
    ("workloads", "dated-inline", 'name = "dated-inline"\nnum_requests = 2\n'
                                  'prompt_tokens = { dist = "constant", value = 1979-05-27T07:32:00Z }\n',
     "prompt_tokens.value"),
    ("workloads", "dated-chat", 'name = "dated-chat"\nnum_requests = 2\nchat = 1979-05-27\n', "chat"),
    ("workloads", "dated-trace", 'name = "dated-trace"\ntrace = 1979-05-27\n', "trace"),
]


def ninth_file_cases(d: Path, Case, write) -> list:
    f = d / "ninth"
    f.mkdir(parents=True, exist_ok=True)
    return _trace_cases(f, Case, write) + _preset_cases(f, Case, write) + _config_cases(f, Case, write) \
        + _model_folder_cases(f, Case, write) + _recording_cases(f, Case, write)


def _trace_cases(f: Path, Case, write) -> list:
    cases = []
    for i, (what, rows, fragments) in enumerate(_TRACES):
        path = write(f / "traces" / f"t{i}.csv", HEADER + rows)
        cases.append(Case(f"run --trace: {what}", "trace", ["run", "--quiet", "--trace", str(path)],
                          must_say=(str(path), *fragments), must_not_say=PYTHON_WORDS))
    for sep, said in ((";", "semicolons"), ("\t", "tabs"), ("|", "bars")):
        path = write(f / "traces" / f"sep-{said}.csv", (HEADER + "0,100,10\n").replace(",", sep))
        cases.append(Case(f"run --trace separated by {said}", "trace", ["run", "--quiet", "--trace", str(path)],
                          must_say=(f"separated by {said}", "comma-separated")))
    # accepted: a spreadsheet's trailing comma; a zone-less trace read as UTC in any TZ (across a DST change)
    trailing = write(f / "traces" / "trailing-comma.csv", HEADER + "0,100,10,\n1,50,5,,\n")
    cases.append(Case("run --trace rows ending in a comma", "trace", ["run", "--quiet", "--trace", str(trailing)],
                      expect="ok"))
    dst = write(f / "traces" / "dst.csv", HEADER + "2023-03-12 01:59:59,100,10\n2023-03-12 03:00:01,100,10\n")
    cases.append(Case("run --trace across New York's DST change, TZ=America/New_York", "trace",
                      ["run", "--quiet", "--trace", str(dst)], expect="ok", env={"TZ": "America/New_York"}))
    return cases


def _preset_cases(f: Path, Case, write) -> list:
    config = f / "config"
    env = {"KVSCOPE_CONFIG_DIR": str(config)}
    cases = []
    for kind, name, text, field in _DATED_PRESETS:
        write(config / "presets" / kind / f"{name}.toml", text)
        cases.append(Case(f"run --workload whose {field} is a TOML date ({name})", "structure",
                          ["run", "--quiet", "--workload", name], env=env,
                          must_say=(f"{field} is a TOML date or time",), must_not_say=PYTHON_WORDS))
    # the same mistake in the other preset kinds: a built-in preset with one field dated, under a new name
    presets = Path(__file__).resolve().parent.parent / "presets"
    for kind, builtin, field, value, flag in (("models", "llama-3-8b", "num_hidden_layers", "1979-05-27", "--model"),
                                              ("hardware", "h100-80gb", "memory_bytes", "07:32:00", "--hardware")):
        name = f"dated-{kind}"
        text = "\n".join(f"{field} = {value}" if line.startswith(field) else f'name = "{name}"'
                         if line.startswith("name =") else line
                         for line in (presets / kind / f"{builtin}.toml").read_text().splitlines()) + "\n"
        write(config / "presets" / kind / f"{name}.toml", text)
        cases.append(Case(f"math {flag} whose {field} is a TOML date or time", "structure",
                          ["math", flag, name], env=env, must_say=(field,), must_not_say=PYTHON_WORDS))
    return cases


def _config_cases(f: Path, Case, write) -> list:
    cases = []
    for i, (what, changes, fragment) in enumerate(_CONFIGS):
        path = write(f / "configs" / f"c{i}" / "config.json", json.dumps({**BASE, **changes}))
        cases.append(Case(f"math --config: {what}", "structure", ["math", "--config", str(path)],
                          must_say=(fragment,), must_not_say=(*PYTHON_WORDS, "linear_state_bytes", "head_dim must")))
    return cases


def _model_folder_cases(f: Path, Case, write) -> list:
    if not hasattr(os, "mkfifo"):
        return []
    folder = f / "models" / "weights-a-pipe"
    write(folder / "config.json", json.dumps(BASE))
    pipe = folder / "model.safetensors"
    if not pipe.exists():
        os.mkfifo(pipe)
    said = ("model.safetensors is not a regular file",)
    return [
        Case("run --backend real --model-path whose model.safetensors is a pipe", "model",
             ["run", "--quiet", "--backend", "real", "--model-path", str(folder)], must_say=said),
        Case("verify --model-path whose model.safetensors is a pipe", "model",
             ["verify", "--model-path", str(folder)], must_say=said),
        Case("gui --model-path whose model.safetensors is a pipe", "model",
             ["gui", "--model-path", str(folder), "--quit-after", "1"], must_say=said),
    ]


# (name, record type, which of them, array, change): the step series a recording's reader checks
_FORGED = [
    ("a NaN start time", "steps", 0, "step.start_time_s", "nan-at-3"),
    ("an infinite start time", "steps", 0, "step.start_time_s", "inf"),
    ("start times that run backwards", "steps", 0, "step.start_time_s", "reverse"),
    ("step numbers that run backwards", "steps", 0, "step.step", "reverse"),
    ("negative step durations", "steps", 0, "step.duration_s", "negate"),
    ("a NaN duration", "steps", 0, "step.duration_s", "nan"),
    ("a kv_usage of 5 (500 %)", "steps", 0, "step.kv_usage", "plus5"),
    ("a NaN kv_usage", "steps", 0, "step.kv_usage", "nan"),
    ("a negative count of running requests", "steps", 0, "step.num_running", "minus1000"),
    ("NaN event times", "steps", 0, "event.time_s", "nan"),
    ("a NaN time to first token", "steps", 1, "finished.ttft_s", "nan"),
    ("an infinite snapshot time", "deltas", 0, "snapshot.time_s", "inf"),
    ("a NaN snapshot kv_usage", "deltas", 0, "snapshot.kv_usage", "nan"),
    ("event blocks past the pool's", "steps", 0, "event.blocks", "plus1e9"),
    ("negative event blocks", "steps", 0, "event.blocks", "minus1e6"),
    ("negative event request ids", "steps", 0, "event.request_id", "minus1e6"),
    ("negative new tokens in a batch", "steps", 0, "batch.num_new_tokens", "minus1e6"),
]


def _changed(values, how: str):
    import numpy as np

    values = values.astype(np.float64) if values.dtype.kind == "f" else values
    return {"nan-at-3": lambda v: np.where(np.arange(len(v)) == 3, np.nan, v), "inf": lambda v: v + np.inf,
            "reverse": lambda v: v[::-1].copy(), "negate": lambda v: -v - 1, "nan": lambda v: v * np.nan,
            "plus5": lambda v: v + 5, "minus1000": lambda v: v - 1000, "plus1e9": lambda v: v + 10**9,
            "minus1e6": lambda v: v - 10**6}[how](values)


def _recording_cases(f: Path, Case, write) -> list:
    import numpy as np
    from hostile_recordings import payload_of, records_of, reframed, small_recording

    from kvscope.app.lab.recording.format import DELTAS, STEPS, decode_payload, encode_payload

    data = small_recording(f / "recordings" / "good.kvrec").read_bytes()
    records = records_of(data)
    out = f / "out"
    out.mkdir(parents=True, exist_ok=True)
    cases = []
    for i, (what, kind, nth, name, how) in enumerate(_FORGED):
        number = [n for n, r in enumerate(records) if r[1] == {"steps": STEPS, "deltas": DELTAS}[kind]][nth]
        head, arrays = decode_payload(payload_of(data, number), "forging")
        arrays = {k: np.array(v) for k, v in arrays.items()}
        arrays[name] = _changed(arrays[name], how)
        head.pop("arrays")
        path = write(f / "recordings" / f"forged-{i}.kvrec", reframed(data, number, encode_payload(head, arrays)))
        said = (path.name, f"{name} ")
        cases += [
            Case(f"export --perfetto a recording with {what}", "recording",
                 ["export", str(path), "--perfetto", str(out / f"forged-{i}.json")], must_say=said),
            Case(f"export --csv a recording with {what}", "recording",
                 ["export", str(path), "--csv", str(out / f"forged-{i}.csv")], must_say=said),
        ]
    cases.append(Case("gui --replay a recording with a NaN start time", "recording",
                      ["gui", "--replay", str(f / "recordings" / "forged-0.kvrec"), "--quit-after", "1"],
                      must_say=("forged-0.kvrec", "step.start_time_s"), slow=True))
    return cases
