"""The tenth hostile pass's cases (2026-11-28): the FILES kvscope reads, for scripts/hostile_inputs.py.
JSON files whose keys repeat (config.json, the safetensors index, generation_config.json) or that
are UTF-16; a quantization_config with no quant_method; mlp_only_layers repeated or past the layers,
first_k_dense_replace past them; config.json fields in another case or with a space; a multimodal
text_config's bad field; safetensors headers that lie (a length of 2**64-1, a list, __metadata__
of tables, an unknown dtype, negative shapes, data_offsets reversed, overlapping, past the end or
not the shape's size, a body cut short); an index placing a tensor in a shard that lacks it, or
naming config.json as a shard; generation_config.json malformed, a list, or ending on ids past the
vocabulary; weights that are a link to themselves; traces compressed or JSON; preset, workload,
hardware and scenario fields misspelt; a length distribution given fields it does not use; TOML
in UTF-16; a recording of format 0.9, or whose header disagrees with its file's version; a
calibration profile from a newer kvscope.

Before the fixes: the repeated key's last value was taken without a word (a 2-layer config.json
read as 40 layers); UTF-16 was "not UTF-8 text (byte 0)"; no quant_method sized the weights as
16-bit; [0, 0, 0] counted three dense layers, and layers past the model were refused as
"num_dense_layers (6)", a field no file has; Num_Hidden_Layers was "missing field(s)
num_hidden_layers" and a text_config's field was named as if at the top; the safetensors
library's messages named neither the file nor the tensor ("invalid shape, data type, or offset
for tensor"); a tensor the index promised but no shard held, eos ids of -5 and 10**9 and a
malformed generation_config.json were accepted; the link loop was "no file named
model.safetensors found"; a .csv.gz was "binary data (a NUL byte)" and JSON "no arrival column";
typos were listed with no nearest name; a constant length's median was dropped; format 0.9 was
read as 1.x; version 2 of a profile was "not 1". Every case's expect is the correct behaviour: a
case that fails here is a bug.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

BASE = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 128, "intermediate_size": 256,
        "vocab_size": 1000, "max_position_embeddings": 512}
MOE = {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64}
PYTHON_WORDS = ("Traceback", "object has no attribute", "NoneType", "num_dense_layers")

# (name, config.json text, what the refusal must say); None: accepted
_CONFIGS = [
    ("a key given twice",
     '{"num_hidden_layers": 2, ' + json.dumps(BASE)[1:].replace('"num_hidden_layers": 2', '"num_hidden_layers": 40'),
     ("num_hidden_layers", "given twice", "2, then 40")),
    ("UTF-16 text", json.dumps(BASE).encode("utf-16"), ("UTF-16",)),
    ("a quantization_config with no quant_method", json.dumps({**BASE, "quantization_config": {"bits": 4}}),
     ("no quant_method",)),
    ("mlp_only_layers past the layers", json.dumps({**BASE, **MOE, "mlp_only_layers": [0, 5]}),
     ("mlp_only_layers names layer 5",)),
    ("first_k_dense_replace past the layers", json.dumps({**BASE, **MOE, "first_k_dense_replace": 50}),
     ("first_k_dense_replace (50)",)),
    ("a multimodal text_config of -1 heads", json.dumps({"architectures": ["LlavaForConditionalGeneration"],
                                                          "text_config": {**BASE, "num_attention_heads": -1}}),
     ("text_config: num_attention_heads",)),
    ("a multimodal text_config of KV heads not dividing the heads", json.dumps(
        {"text_config": {**BASE, "num_key_value_heads": 3}}), ("text_config: num_key_value_heads (3)",)),
    ("fields named in another case or with a space", json.dumps(
        {**{k: v for k, v in BASE.items() if k not in ("num_hidden_layers", "hidden_size")}, "Num_Hidden_Layers": 2,
         "hidden_size ": 128}), ("'Num_Hidden_Layers' for num_hidden_layers", "'hidden_size ' for hidden_size")),
    ("mlp_only_layers naming a layer three times", json.dumps({**BASE, **MOE, "mlp_only_layers": [0, 0, 0]}), None),
    ("bitsandbytes of before quant_method", json.dumps({**BASE, "quantization_config": {"load_in_4bit": True}}), None),
]


def tenth_file_cases(d: Path, Case, write) -> list:
    f = d / "tenth"
    f.mkdir(parents=True, exist_ok=True)
    return (_config_cases(f, Case, write) + _model_folder_cases(f, Case, write) + _trace_cases(f, Case, write)
            + _preset_cases(f, Case, write) + _recording_cases(f, Case, write) + _calibration_cases(f, Case, write))


def _config_cases(f: Path, Case, write) -> list:
    cases = []
    for i, (what, text, said) in enumerate(_CONFIGS):
        path = write(f / "configs" / f"c{i}" / "config.json", text)
        cases.append(Case(f"math --config: {what}", "structure", ["math", "--config", str(path)],
                          expect="refuse" if said else "ok", must_say=said or (), must_not_say=PYTHON_WORDS))
    return cases


# -- model folders: safetensors headers, the index, generation_config.json ------------------------------------

_SHAPES = {"model.embed_tokens.weight": [1000, 128], "lm_head.weight": [1000, 128]}


def safetensors_bytes(tensors: dict | None = None, change=None, raw_header: bytes | None = None, body=None) -> bytes:
    """A safetensors file of F32 tensors (name -> shape) laid end to end; change(header) edits the
    header first; raw_header replaces it whole; body replaces the tensors' bytes."""
    header, offset = {}, 0
    for name, shape in (tensors or _SHAPES).items():
        size = 4 * shape[0] * shape[1]
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    if change is not None:
        change(header)
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + (bytes(offset) if body is None else body)


def _entry(name: str, **fields):
    return lambda header: header[name].update(fields)


# (name, {file: bytes or text or None}, what the refusal must say)
_FOLDERS = [
    ("a header length of 2**64-1", {"model.safetensors": b"\xff" * 8 + b"{}"}, ("model.safetensors", "18,446,744")),
    ("a header that is a list", {"model.safetensors": safetensors_bytes(raw_header=b"[1, 2]")},
     ("model.safetensors", "JSON object of tensors")),
    ("a header that is not JSON", {"model.safetensors": safetensors_bytes(raw_header=b"{nope")},
     ("model.safetensors: header", "malformed JSON")),
    ("__metadata__ of tables", {"model.safetensors": safetensors_bytes(
        change=lambda h: h.update(__metadata__={"format": {"pt": 1}}))}, ("__metadata__",)),
    ("an unknown dtype", {"model.safetensors": safetensors_bytes(change=_entry("lm_head.weight", dtype="F128"))},
     ("tensor 'lm_head.weight'", "dtype 'F128'")),
    ("a negative shape", {"model.safetensors": safetensors_bytes(change=_entry("lm_head.weight", shape=[-1, 128]))},
     ("tensor 'lm_head.weight'", "shape")),
    ("data_offsets reversed", {"model.safetensors": safetensors_bytes(
        change=_entry("model.embed_tokens.weight", data_offsets=[512000, 0]))},
     ("tensor 'model.embed_tokens.weight'", "end before they begin")),
    ("data_offsets past the end", {"model.safetensors": safetensors_bytes(
        change=_entry("lm_head.weight", data_offsets=[512000, 10**12]))}, ("tensor 'lm_head.weight'", "data_offsets")),
    ("data_offsets not the shape's size", {"model.safetensors": safetensors_bytes(
        change=_entry("lm_head.weight", shape=[999, 128]))}, ("tensor 'lm_head.weight'", "511,488 bytes")),
    ("two tensors at the same bytes", {"model.safetensors": safetensors_bytes(
        change=_entry("lm_head.weight", data_offsets=[0, 512000]))}, ("overlaps the tensor before it",)),
    ("a body cut short", {"model.safetensors": safetensors_bytes(body=bytes(1000))},
     ("model.safetensors", "cut short")),
    ("an empty model.safetensors", {"model.safetensors": b""}, ("model.safetensors", "0 bytes")),
    ("an index naming a tensor twice", {"model.safetensors.index.json":
                                        '{"weight_map": {"lm_head.weight": "model.safetensors", '
                                        '"lm_head.weight": "model-2.safetensors"}}'},
     ("model.safetensors.index.json", "'lm_head.weight' is given twice")),
    ("an index placing a tensor in a shard that lacks it", {"model.safetensors.index.json": json.dumps(
        {"weight_map": {**{k: "model.safetensors" for k in _SHAPES}, "ghost.weight": "model.safetensors"}})},
     ("model.safetensors.index.json", "ghost.weight")),
    ("an index naming config.json as a shard", {"model.safetensors.index.json": json.dumps(
        {"weight_map": {"lm_head.weight": "config.json"}})}, ("weight_map names a shard 'config.json'",)),
    ("a config.json key given twice", {"config.json": '{"vocab_size": 7, ' + json.dumps(BASE)[1:]},
     ("config.json", "'vocab_size' is given twice")),
    ("generation_config.json ending on ids past the vocabulary",
     {"generation_config.json": '{"eos_token_id": [-5, 1000]}'},
     ("generation_config.json", "eos_token_id", "0 to 999")),
    ("generation_config.json ending on text", {"generation_config.json": '{"eos_token_id": "</s>"}'},
     ("generation_config.json", "eos_token_id")),
    ("generation_config.json malformed", {"generation_config.json": '{"eos_token_id": 2,'},
     ("generation_config.json", "malformed JSON")),
    ("generation_config.json a list", {"generation_config.json": "[2]"}, ("generation_config.json", "[2]")),
]


def _model_folder_cases(f: Path, Case, write) -> list:
    cases = []
    for i, (what, files, said) in enumerate(_FOLDERS):
        folder = f / "models" / f"m{i}"
        write(folder / "config.json", json.dumps(BASE))
        write(folder / "model.safetensors", safetensors_bytes())
        for name, content in files.items():
            write(folder / name, content)
        cases.append(Case(f"run --backend real --model-path: {what}", "model",
                          ["run", "--quiet", "--backend", "real", "--device", "cpu", "--model-path", str(folder)],
                          must_say=said, must_not_say=PYTHON_WORDS))
    loop = f / "models" / "link-loop"
    write(loop / "config.json", json.dumps(BASE))
    if not os.path.lexists(loop / "model.safetensors"):
        os.symlink("model.safetensors", loop / "model.safetensors")
    cases.append(Case("run --backend real --model-path whose model.safetensors is a link to itself", "model",
                      ["run", "--quiet", "--backend", "real", "--device", "cpu", "--model-path", str(loop)],
                      must_say=("model.safetensors is a link that leads nowhere",)))
    return cases


# -- traces, presets ------------------------------------------------------------------------------------------


def _trace_cases(f: Path, Case, write) -> list:
    import gzip

    rows = "TIMESTAMP,ContextTokens,GeneratedTokens\n0,100,10\n"
    traces = [
        ("a gzip-compressed trace named .csv", "t.csv", gzip.compress(rows.encode()), ("gzip-compressed",)),
        ("a zstd-compressed trace", "t.csv.zst", b"\x28\xb5\x2f\xfd" + bytes(20), ("zstd-compressed",)),
        ("a JSON trace of one object", "t.json", '{"timestamp": 0, "input_tokens": 10, "output_tokens": 5}',
         ("JSON, not CSV",)),
        ("a JSONL trace", "t.jsonl", '{"timestamp": 0, "input_tokens": 10, "output_tokens": 5}\n\ngarbage\n',
         ("JSON, not CSV",)),
        ("a JSON trace after a byte-order mark", "bom.json", "\ufeff [ ]", ("JSON, not CSV",)),
    ]
    return [Case(f"run --trace: {what}", "trace", ["run", "--quiet", "--trace", str(write(f / "traces" / name, data))],
                 must_say=said) for what, name, data, said in traces]


_WORKLOAD = ('name = "{name}"\nnum_requests = 2\narrival_rate_per_s = 1.0\n'
             'prompt_tokens = {{ dist = "constant", value = 8 }}\noutput_tokens = 4\n')


def _preset_cases(f: Path, Case, write) -> list:
    config = f / "config"
    env = {"KVSCOPE_CONFIG_DIR": str(config)}
    constant = 'dist = "constant", value = 8 }'
    workloads = [  # (what, the text changed from _WORKLOAD's, what the refusal must say)
        ("a misspelt field", ("\n", "\narival_rate_per_s = 3\n"),
         ("arival_rate_per_s (did you mean arrival_rate_per_s?)",)),
        ("a field in another case", ("num_requests", "Num_Requests"), ("Num_Requests (did you mean num_requests?)",)),
        ("a field with a space in its name", ("num_requests =", '"num_requests " ='),
         ("'num_requests ' (did you mean num_requests?)",)),
        ("a constant length given a median", ("value = 8 }", "value = 8, median = 5 }"),
         ("constant length does not use median",)),
        ("a lognormal length given a value", (constant, 'dist = "lognormal", median = 8, sigma = 0.5, value = 8 }'),
         ("lognormal length does not use value",)),
        ("a length's misspelt field", (constant, 'dist = "lognormal", median = 8, sigmma = 0.5 }'),
         ("sigmma (did you mean sigma?)",)),
    ]
    cases = []
    for i, (what, (old, new), said) in enumerate(workloads):
        name = f"tenth-w{i}"
        write(config / "presets" / "workloads" / f"{name}.toml", _WORKLOAD.format(name=name).replace(old, new, 1))
        cases.append(Case(f"run --workload with {what}", "structure", ["run", "--quiet", "--workload", name],
                          env=env, must_say=said, must_not_say=PYTHON_WORDS))
    utf16 = write(f / "workloads" / "utf16.toml", _WORKLOAD.format(name="utf16").encode("utf-16"))
    cases.append(Case("run --workload of a TOML file in UTF-16", "structure",
                      ["run", "--quiet", "--workload", str(utf16)],
                      must_say=("utf16.toml", "UTF-16 text")))
    presets = Path(__file__).resolve().parent.parent / "presets"
    model = (presets / "models" / "llama-3-8b.toml").read_text().replace('name = "llama-3-8b"', 'name = "tenth-typo"')
    write(config / "presets" / "models" / "tenth-typo.toml", model + "num_hiden_layers = 3\n")
    cases.append(Case("math --model whose preset has a misspelt field", "structure", ["math", "--model", "tenth-typo"],
                      env=env, must_say=("num_hiden_layers (did you mean num_hidden_layers?)",)))
    hardware = (presets / "hardware" / "l4-24gb.toml").read_text().replace('name = "l4-24gb"', 'name = "tenth-typo"')
    write(config / "presets" / "hardware" / "tenth-typo.toml", hardware.replace("gpu_count = 1", "gpu_count = 1\n"
                                                                               "memory_bandwith = 5", 1))
    cases.append(Case("math --hardware whose preset has a misspelt field", "structure",
                      ["math", "--hardware", "tenth-typo"], env=env,
                      must_say=("memory_bandwith (did you mean memory_bandwidth_bytes_per_s?)",)))
    scenario = (presets / "scenarios" / "cache-ceiling.toml").read_text().replace(
        "max_model_len = 4096", "max_model_lenn = 4096")
    path = write(f / "scenarios" / "typo.toml", scenario)
    cases.append(Case("compare --scenario whose engine table has a misspelt field", "structure",
                      ["compare", "--scenario", str(path), "--requests", "2"],
                      must_say=("base.engine", "max_model_lenn (did you mean max_model_len?)")))
    return cases


# -- recordings, calibration profiles -------------------------------------------------------------------------


def _recording_cases(f: Path, Case, write) -> list:
    from hostile_recordings import payload_of, reframed, small_recording, with_head

    from kvscope.app.lab.recording.format import FILE_HEADER, SIGNATURE

    data = small_recording(f / "recordings" / "good.kvrec").read_bytes()
    out = f / "out"
    out.mkdir(parents=True, exist_ok=True)
    old = write(f / "recordings" / "format-0.9.kvrec", FILE_HEADER.pack(SIGNATURE, 0, 9) + data[FILE_HEADER.size:])
    newer = write(f / "recordings" / "format-7.0.kvrec", FILE_HEADER.pack(SIGNATURE, 7, 0) + data[FILE_HEADER.size:])
    _, major, minor = FILE_HEADER.unpack_from(data)
    mixed = write(f / "recordings" / "versions-disagree.kvrec",
                  reframed(data, 0, with_head(payload_of(data, 0), lambda head: head.update(format_version=[0, 1]))))
    return [
        Case("export a recording of format 0.9", "recording", ["export", str(old), "--csv", str(out / "old.csv")],
             must_say=("format-0.9.kvrec", "format 0.9", "no kvscope writes")),
        Case("export a recording of format 7.0", "recording", ["export", str(newer), "--csv", str(out / "new.csv")],
             must_say=("newer than this kvscope reads",), must_not_say=("corrupt",)),
        Case("export a recording whose header's format_version is not the file's", "recording",
             ["export", str(mixed), "--csv", str(out / "mixed.csv")],
             must_say=("versions-disagree.kvrec", f"format_version [0, 1] is not the file's {major}.{minor}")),
    ]


def _calibration_cases(f: Path, Case, write) -> list:
    from hostile_fixtures import cpu_calibration_key

    key = cpu_calibration_key()
    if key is None:
        return []
    cache = f / "calibration" / "newer"
    write(cache / "calibration" / f"{key}.json",
          '{"format": "kvscope-calibration", "version": 2, "calibration": {"label": "x"}}')
    return [Case("math --hardware this-machine: a calibration profile of version 2", "files",
                 ["math", "--hardware", "this-machine"], env={"KVSCOPE_CACHE_DIR": str(cache)},
                 must_say=("version 2 is newer than this kvscope reads",))]
