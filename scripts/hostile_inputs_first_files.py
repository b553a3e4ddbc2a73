"""The first pass's cases over the files kvscope reads, for scripts/hostile_inputs.py: recordings
(damaged heads, records and deltas), traces, presets, config.json files and model folders. Every
case's `expect` is the right behaviour."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

from hostile_case import Case, write
from hostile_recordings import payload_of, reframed, reframed_raw, records_of, small_recording, with_head, zlib_bomb


def recording_cases(d: Path) -> list:
    from kvscope.app.lab.recording.format import DELTAS, HEADER, KEYFRAME, STEPS

    good = small_recording(d / "good.kvrec")
    data = good.read_bytes()
    records = records_of(data)
    number_of = {t: next(i for i, r in enumerate(records) if r[1] == t) for t in (HEADER, KEYFRAME, STEPS, DELTAS)}
    variants = {}
    (d / "out").mkdir(parents=True, exist_ok=True)

    def header_change(change):
        return reframed(data, 0, with_head(payload_of(data, 0), change))

    # header fields of the wrong type (the header record is uncompressed; the index still points right)
    variants["header-model-list"] = header_change(lambda h: h.update(model=[1, 2, 3]))
    variants["header-version-one"] = header_change(lambda h: h.update(format_version="one"))
    variants["header-version-list-text"] = header_change(lambda h: h.update(format_version=["one", 0]))
    variants["header-event-kinds-int"] = header_change(lambda h: h.update(event_kinds=7))
    variants["header-event-kinds-empty"] = header_change(lambda h: h.update(event_kinds=[]))
    variants["header-block-size-text"] = header_change(lambda h: h.update(block_size="16"))
    variants["header-num-blocks-huge"] = header_change(lambda h: h.update(num_blocks=10**12))
    variants["header-num-blocks-bigint"] = header_change(lambda h: h.update(num_blocks=10**40))
    variants["header-plan-string"] = header_change(lambda h: h.update(plan="big"))
    variants["header-workload-list"] = header_change(lambda h: h.update(workload=[1]))
    variants["header-engine-args-int"] = header_change(lambda h: h.update(engine_args=5))
    variants["header-not-object"] = reframed(data, 0, (lambda t: struct.pack("<I", len(t)) + t)(b"[1,2,3]"))
    variants["header-deep-json"] = reframed(
        data, 0, (lambda t: struct.pack("<I", len(t)) + t)(b"[" * 100_000 + b"]" * 100_000))
    # step and keyframe records (compressed; the file is cut after the change: the reader scans)
    steps, deltas, keyframe = number_of[STEPS], number_of[DELTAS], number_of[KEYFRAME]

    def cut_change(number, change):
        return reframed(data, number, with_head(payload_of(data, number), change))

    variants["steps-first-step-text"] = cut_change(steps, lambda h: h.update(first_step="zero"))
    variants["steps-num-steps-huge"] = cut_change(steps, lambda h: h.update(num_steps=10**15))
    variants["keyframe-position-text"] = cut_change(keyframe, lambda h: h.update(position="start"))
    variants["keyframe-no-owner"] = cut_change(keyframe, lambda h: h["arrays"].pop("owner"))
    variants["keyframe-time-text"] = cut_change(keyframe, lambda h: h.update(time_s="noon"))
    variants["keyframe-array-dtype-object"] = cut_change(keyframe, lambda h: h["arrays"]["owner"].update(dtype="|O"))
    variants["keyframe-array-count-negative"] = cut_change(keyframe, lambda h: h["arrays"]["owner"].update(count=-5))
    variants["keyframe-array-huge-count"] = cut_change(keyframe, lambda h: h["arrays"]["owner"].update(count=10**18))
    variants["keyframe-arrays-list"] = cut_change(keyframe, lambda h: h.update(arrays=[1, 2]))

    def event_kind_out_of_range(payload: bytes) -> bytes:
        (n,) = struct.unpack_from("<I", payload)
        head = json.loads(payload[4:4 + n])
        spec = head["arrays"]["event.kind"]
        raw = bytearray(payload)
        base = 4 + n + spec["offset"]
        raw[base] = 200  # the first event's kind: far past the known kinds
        return bytes(raw)

    variants["event-kind-out-of-range"] = reframed(data, steps, event_kind_out_of_range(payload_of(data, steps)))
    variants["deltas-missing-arrays"] = cut_change(deltas, lambda h: h.update(arrays={}))
    variants["steps-missing-arrays"] = cut_change(steps, lambda h: h.update(arrays={}))
    variants["zlib-bomb-deltas"] = reframed_raw(data, deltas, zlib_bomb(4 * 1024**3))
    # a frame claiming a huge payload length (the frame checksum made right)
    offset = records[steps][0]
    raw = bytearray(data[:offset + 20])
    struct.pack_into("<Q", raw, offset + 4, 2**62)
    struct.pack_into("<I", raw, offset + 16, zlib.crc32(bytes(raw[offset:offset + 16])))
    variants["huge-claimed-length"] = bytes(raw) + data[offset + 20:]
    variants["empty-file"] = b""
    variants["text-file"] = b"TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\n"
    variants["signature-only"] = data[:14]
    variants["half-file"] = data[: len(data) // 2]
    variants["flipped-byte-middle"] = bytes(b ^ (0x40 if i == len(data) // 3 else 0) for i, b in enumerate(data))

    cases = []
    for name, blob in variants.items():
        path = write(d / "recordings" / f"{name}.kvrec", blob)
        cases.append(Case(f"export {name}", "recording", ["export", str(path)], expect="refuse_or_ok"))
        cases.append(Case(f"export --csv {name}", "recording",
                          ["export", str(path), "--csv", str(d / "out" / f"{name}.csv")], expect="refuse_or_ok"))
        cases.append(Case(f"export --perfetto {name}", "recording",
                          ["export", str(path), "--perfetto", str(d / "out" / f"{name}.json")], expect="refuse_or_ok"))
    for name in ("header-num-blocks-huge", "keyframe-no-owner", "zlib-bomb-deltas", "header-event-kinds-int",
                 "huge-claimed-length", "empty-file", "text-file", "signature-only", "flipped-byte-middle"):
        cases.append(Case(f"gui --replay {name}", "recording",
                          ["gui", "--replay", str(d / "recordings" / f"{name}.kvrec"), "--quit-after", "1"],
                          expect="refuse", slow=True))
    return cases


def trace_cases(d: Path) -> list:
    t = d / "traces"
    header = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    files = {
        "prompt-1e9": header + "0,1000000000,10\n",
        "prompt-1e18": header + "0,1000000000000000000,10\n",
        "output-1e18": header + "0,10,1000000000000000000\n",
        "prompt-negative": header + "0,-5,10\n",
        "prompt-zero": header + "0,0,10\n",
        "prompt-float": header + "0,12.5,10\n",
        "prompt-1e400": header + "0,1e400,10\n",
        "time-nan": header + "nan,10,10\n",
        "time-inf": header + "inf,10,10\n",
        "time-huge": header + "0,10,10\n1e308,10,10\n",
        "time-backwards": header + "5,10,10\n1,10,10\n",
        "time-garbage-date": header + "2023-13-45 99:99:99,10,10\n",
        "empty": "",
        "header-only": header,
        "no-columns": "a,b,c\n1,2,3\n",
        "missing-cells": header + "0,10\n",
        "huge-field": header + "0," + "9" * 200_000 + ",10\n",
        "huge-quoted-field": header + '0,"' + "x" * 300_000 + '",10\n',
        "unterminated-quote": header + '0,"10,10\n1,10,10\n',
        "nul-bytes": header + "0,1\x000,10\n",
        "many-columns": ",".join(f"c{i}" for i in range(100_000)) + "\n",
    }
    cases = []
    for name, text in files.items():
        path = write(t / f"{name}.csv", text)
        cases.append(Case(f"run --trace {name}", "trace", ["run", "--quiet", "--trace", str(path)]))
    latin = write(t / "latin1.csv", (header + "0,10,10\n# caf\xe9\n").encode("latin-1"))
    cases.append(Case("run --trace latin-1", "trace", ["run", "--quiet", "--trace", str(latin)]))
    binary = write(t / "binary.csv", bytes(range(256)) * 64)
    cases.append(Case("run --trace binary", "trace", ["run", "--quiet", "--trace", str(binary)]))
    bom = write(t / "bom.csv", ("\ufeff" + header + "0,100,10\n1,100,10\n").encode("utf-8"))
    cases.append(Case("run --trace with a UTF-8 BOM", "trace", ["run", "--quiet", "--trace", str(bom)], expect="ok"))
    crlf = write(t / "crlf.csv", (header + "0,100,10\n1,100,10\n").replace("\n", "\r\n"))
    cases.append(Case("run --trace CRLF", "trace", ["run", "--quiet", "--trace", str(crlf)], expect="ok"))
    cases.append(Case("run --trace a folder", "trace", ["run", "--quiet", "--trace", str(t)]))
    cases.append(Case("run --trace /dev/zero", "trace", ["run", "--quiet", "--trace", "/dev/zero"]))
    cases.append(Case("run --trace /dev/urandom", "trace", ["run", "--quiet", "--trace", "/dev/urandom"]))
    cases.append(Case("run --trace missing", "trace", ["run", "--quiet", "--trace", str(t / "nope.csv")]))
    cases.append(Case("run --trace empty name", "trace", ["run", "--quiet", "--trace", ""]))
    return cases


def preset_cases(d: Path) -> list:
    user = d / "config"
    env = {"KVSCOPE_CONFIG_DIR": str(user)}
    models = {
        "empty": "",
        "name-int": 'name = 5\nnum_hidden_layers = 2\n',
        "layers-1e300": "num_hidden_layers = 1e300\nnum_attention_heads = 8\nnum_key_value_heads = 8\nhead_dim = 64\n"
                        "hidden_size = 512\nintermediate_size = 1024\nvocab_size = 1000\n",
        "layers-bigint": "num_hidden_layers = 9223372036854775807\nnum_attention_heads = 8\nnum_key_value_heads = 8\n"
                         "head_dim = 64\nhidden_size = 512\nintermediate_size = 1024\nvocab_size = 1000\n",
        "heads-list": "num_hidden_layers = 2\nnum_attention_heads = [8]\nnum_key_value_heads = 8\nhead_dim = 64\n"
                      "hidden_size = 512\nintermediate_size = 1024\nvocab_size = 1000\n",
        "head-dim-half": "num_hidden_layers = 2\nnum_attention_heads = 8\nnum_key_value_heads = 8\nhead_dim = 64.5\n"
                         "hidden_size = 512\nintermediate_size = 1024\nvocab_size = 1000\n",
        "nested-table": "[num_hidden_layers]\nx = 1\n",
        "weights-negative": "num_hidden_layers = 2\nnum_attention_heads = 8\nnum_key_value_heads = 8\nhead_dim = 64\n"
                            "hidden_size = 512\nintermediate_size = 1024\nvocab_size = 1000\nweights_bytes = -1\n",
        "dtype-list": "num_hidden_layers = 2\nnum_attention_heads = 8\nnum_key_value_heads = 8\nhead_dim = 64\n"
                      "hidden_size = 512\nintermediate_size = 1024\nvocab_size = 1000\nweight_dtype = ['bf16']\n",
        "malformed": "num_hidden_layers = \n",
        "binary": b"\xff\xfe\x00\x01" * 100,
    }
    hardware = {
        "flops-string": 'memory_bytes = 80e9\nmemory_bandwidth_bytes_per_s = 3e12\npeak_flops = "fast"\n',
        "flops-list": "memory_bytes = 80e9\nmemory_bandwidth_bytes_per_s = 3e12\npeak_flops = [1, 2]\n",
        "flops-table-of-text": 'memory_bytes = 80e9\nmemory_bandwidth_bytes_per_s = 3e12\n[peak_flops]\nfp16 = "lots"\n',
        "flops-nan": "memory_bytes = 80e9\nmemory_bandwidth_bytes_per_s = 3e12\n[peak_flops]\nfp16 = nan\n",
        "memory-1e300": "memory_bytes = 1e300\nmemory_bandwidth_bytes_per_s = 3e12\n[peak_flops]\nfp16 = 1e15\n",
        "memory-text": 'memory_bytes = "80GB"\nmemory_bandwidth_bytes_per_s = 3e12\n[peak_flops]\nfp16 = 1e15\n',
        "gpus-1e9": "memory_bytes = 80e9\nmemory_bandwidth_bytes_per_s = 3e12\ngpu_count = 1000000000\n"
                    "[peak_flops]\nfp16 = 1e15\n",
        "kind-tpu": 'memory_bytes = 80e9\nmemory_bandwidth_bytes_per_s = 3e12\nkind = "tpu"\n[peak_flops]\nfp16 = 1e15\n',
        "empty": "",
    }
    workloads = {
        "requests-1e300": 'name = "w"\nnum_requests = 1e300\n',
        "requests-text": 'name = "w"\nnum_requests = "many"\n',
        "prompt-1e12": 'name = "w"\nnum_requests = 2\nprompt_tokens = 1000000000000\n',
        "prompt-list": 'name = "w"\nprompt_tokens = [1, 2]\n',
        "lognormal-huge": 'name = "w"\nnum_requests = 2\nprompt_tokens = { dist = "lognormal", median = 1e308, '
                          'sigma = 1e308 }\n',
        "uniform-huge": 'name = "w"\nnum_requests = 2\nprompt_tokens = { dist = "uniform", min = 1, '
                        'max = 1000000000000000000 }\n',
        "trace-int": 'name = "w"\ntrace = 5\n',
        "trace-absolute-missing": 'name = "w"\ntrace = "/no/such/trace.csv"\n',
        "rate-nan": 'name = "w"\narrival_rate_per_s = nan\n',
        "name-table": "[name]\nx = 1\n",
        "empty": "",
        "speedup-zero": 'name = "w"\ntrace = "t.csv"\ntrace_speedup = 0\n',
    }
    for name, text in models.items():
        write(user / "presets" / "models" / f"bad-{name}.toml", text)
    for name, text in hardware.items():
        write(user / "presets" / "hardware" / f"bad-{name}.toml", text)
    for name, text in workloads.items():
        write(user / "presets" / "workloads" / f"bad-{name}.toml", text)
    # a user workload whose trace lies beside it (a relative path)
    write(user / "presets" / "workloads" / "mine.toml", 'name = "mine"\ntrace = "mine.csv"\n')
    write(user / "presets" / "workloads" / "mine.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,50,5\n1,60,6\n")

    cases = [Case("presets listing with invalid user presets", "structure", ["presets"], expect="ok", env=env,
                  must_say=("invalid",))]
    for name in models:
        cases.append(Case(f"math --model bad-{name}", "structure", ["math", "--model", f"bad-{name}"], env=env,
                          must_not_say=("ModelConfig.__init__", "positional argument")))
    for name in hardware:
        cases.append(Case(f"math --hardware bad-{name}", "structure", ["math", "--hardware", f"bad-{name}"], env=env,
                          must_not_say=("HardwareSpec.__init__", "positional argument")))
    for name in workloads:
        cases.append(Case(f"run --workload bad-{name}", "structure",
                          ["run", "--quiet", "--workload", f"bad-{name}", "--requests", "3"], env=env))
    cases.append(Case("run --workload user preset with a relative trace", "files",
                      ["run", "--quiet", "--workload", "mine"], expect="ok", env=env))
    cases += [
        Case("math --model ''", "structure", ["math", "--model", ""]),
        Case("math --hardware ''", "structure", ["math", "--hardware", ""]),
        Case("run --workload ''", "structure", ["run", "--quiet", "--workload", ""]),
        Case("math --model path traversal", "structure", ["math", "--model", "../hardware/h100-80gb"]),
        Case("math --model with a slash", "structure", ["math", "--model", "a/b"]),
        Case("math --model ' '", "structure", ["math", "--model", " "]),
        Case("compare --scenario ''", "structure", ["compare", "--scenario", ""]),
        Case("gui --scenario ''", "structure", ["gui", "--scenario", "", "--quit-after", "1"], slow=True),
        Case("gui --model ''", "structure", ["gui", "--model", "", "--quit-after", "1"], slow=True),
        Case("gui --model nope", "structure", ["gui", "--model", "nope", "--quit-after", "1"], slow=True,
             must_say=("nope",)),
        Case("gui --hardware nope", "structure", ["gui", "--hardware", "nope", "--quit-after", "1"], slow=True),
        Case("gui --workload nope", "structure", ["gui", "--workload", "nope", "--quit-after", "1"], slow=True),
        Case("gui --scenario nope", "structure", ["gui", "--scenario", "nope", "--quit-after", "1"], slow=True),
        Case("gui --theme nope", "structure", ["gui", "--theme", "nope", "--quit-after", "1"]),
        Case("gui --backend nope", "structure", ["gui", "--backend", "nope", "--quit-after", "1"]),
        Case("gui --model ../../etc/passwd", "structure",
             ["gui", "--model", "../../etc/passwd", "--quit-after", "1"], slow=True),
        Case("run --workload a folder .toml", "files", ["run", "--quiet", "--workload", str(d) + "/x.toml"]),
    ]
    scen = d / "scenarios"
    scenario_files = {
        "empty": "",
        "configs-table": 'name = "s"\norder = 1\n[configs]\nx = 1\n',
        "answer-list": 'name = "s"\norder = 1\nanswer = [1]\n',
        "order-huge": 'name = "s"\norder = 1e300\n',
        "base-list": 'name = "s"\norder = 1\nbase = [1, 2]\n',
    }
    for name, text in scenario_files.items():
        path = write(scen / f"{name}.toml", text)
        cases.append(Case(f"compare --scenario file {name}", "structure", ["compare", "--scenario", str(path)]))
    return cases


def config_cases(d: Path) -> list:
    c = d / "configs"
    base = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 128, "intermediate_size": 256,
            "vocab_size": 1000, "max_position_embeddings": 512}

    def cfg(**changes):
        return json.dumps({**base, **changes})

    files = {
        "list": "[1, 2, 3]",
        "string": '"config"',
        "null": "null",
        "empty": "",
        "deep": "[" * 100_000 + "]" * 100_000,
        "deep-object": '{"a":' * 100_000 + "1" + "}" * 100_000,
        "layers-1e300": cfg(num_hidden_layers=1e300),
        "layers-bigint": cfg().replace('"num_hidden_layers": 2', '"num_hidden_layers": ' + "9" * 400),
        "layers-huge-exponent": cfg().replace('"num_hidden_layers": 2', '"num_hidden_layers": 1e99999'),
        "heads-zero": cfg(num_attention_heads=0),
        "heads-string": cfg(num_attention_heads="four"),
        "hidden-float": cfg(hidden_size=127.5),
        "text-config-int": json.dumps({"model_type": "x", "text_config": 5}),
        "text-config-wrong-types": json.dumps({"model_type": "x", "text_config": {**base, "num_hidden_layers": "two",
                                                                                  "hidden_size": [128]}}),
        "quantization-list": cfg(quantization_config=[1]),
        "quantization-bits-text": cfg(quantization_config={"quant_method": "gptq", "bits": "four"}),
        "torch-dtype-int": cfg(torch_dtype=5),
        "layer-types-text": cfg(layer_types="full_attention"),
        "layer-types-ints": cfg(layer_types=[1, 2]),
        "sliding-window-text": cfg(sliding_window="big", model_type="mistral"),
        "experts-text": cfg(num_experts="many", num_experts_per_tok=2),
        "kv-lora-text": cfg(kv_lora_rank="x"),
        "max-positions-1e30": cfg(max_position_embeddings=10**30),
        "vocab-1e15": cfg(vocab_size=10**15),
        "model-type-list": cfg(model_type=["llama"]),
        "interval-text": cfg(full_attention_interval="4"),
        "utf16": None,
    }
    cases = []
    for name, text in files.items():
        if text is None:
            path = write(c / name / "config.json", cfg().encode("utf-16"))
        else:
            path = write(c / name / "config.json", text)
        cases.append(Case(f"math --config {name}", "structure", ["math", "--config", str(path)]))
    binary = write(c / "binary" / "config.json", bytes(range(256)) * 40)
    cases.append(Case("math --config binary", "structure", ["math", "--config", str(binary)]))
    cases.append(Case("math --config /dev/zero", "files", ["math", "--config", "/dev/zero"]))
    cases.append(Case("math --config a folder without config.json", "files", ["math", "--config", str(d)]))
    return cases


def model_folder_cases(d: Path) -> list:
    """Model folders for --model-path: a small random Llama, then broken copies of it."""
    import torch
    from safetensors.torch import load_file, save_file

    from kvscope.app.lab.verify.tiny_model import build_random_model
    from kvscope.engine.config import ModelConfig

    shape = ModelConfig(name="hostile", num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        head_dim=16, hidden_size=64, intermediate_size=128, vocab_size=512,
                        max_position_embeddings=512, weight_dtype="fp32")
    good = build_random_model(shape, d / "models" / "good")
    tensors = load_file(good / "model.safetensors")
    config = json.loads((good / "config.json").read_text())

    def variant(name, config_changes=None, drop=(), add=None, tensors_override=None, files=None, no_weights=False):
        folder = d / "models" / name
        folder.mkdir(parents=True, exist_ok=True)
        cfg = {**config, **(config_changes or {})}
        for key, value in list(cfg.items()):
            if value is _DELETE:
                del cfg[key]
        (folder / "config.json").write_text(json.dumps(cfg))
        if not no_weights:
            weights = dict(tensors_override if tensors_override is not None else tensors)
            for key in drop:
                weights.pop(key)
            weights.update(add or {})
            save_file(weights, folder / "model.safetensors")
        for file_name, content in (files or {}).items():
            write(folder / file_name, content)
        return folder

    layer_key = next(k for k in tensors if k.endswith("layers.1.mlp.up_proj.weight"))
    folders = {
        "missing-parameter": variant("missing-parameter", drop=[layer_key]),
        "unexpected-parameter": variant("unexpected-parameter", add={"model.extra.weight": torch.zeros(3)}),
        "more-layers-in-config": variant("more-layers", {"num_hidden_layers": 3}),
        "shape-mismatch": variant("shape-mismatch", {"intermediate_size": 96}),
        "no-architectures": variant("no-architectures", {"architectures": _DELETE}),
        "architectures-string": variant("architectures-string", {"architectures": "LlamaForCausalLM"}),
        "architectures-ints": variant("architectures-ints", {"architectures": [1, 2]}),
        "architectures-unsupported": variant("architectures-unsupported", {"architectures": ["GPT2LMHeadModel"]}),
        "auto-map": variant("auto-map", {"auto_map": {"AutoModel": "x.Y"}}),
        "no-weights": variant("no-weights", no_weights=True),
        "garbage-safetensors": variant("garbage-safetensors", no_weights=True,
                                       files={"model.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}garbage"}),
        "index-map-list": variant("index-map-list", files={"model.safetensors.index.json":
                                                           json.dumps({"weight_map": ["model.safetensors"]})}),
        "index-binary": variant("index-binary", files={"model.safetensors.index.json": bytes(range(256))}),
        "index-missing-shard": variant("index-missing-shard", files={"model.safetensors.index.json": json.dumps(
            {"weight_map": {"lm_head.weight": "model-00002.safetensors"}})}),
        "index-shard-escapes": variant("index-shard-escapes", files={"model.safetensors.index.json": json.dumps(
            {"weight_map": {"lm_head.weight": "../../../etc/passwd"}})}),
    }
    for name, text in (("config-list", "[1]"), ("config-binary", bytes(range(256))),
                       ("config-deep", "[" * 100_000 + "]" * 100_000)):
        folder = variant(name)
        write(folder / "config.json", text)
        folders[name] = folder
    cases = [Case("run --backend real --model-path good", "model", ["run", "--quiet", "--backend", "real",
                                                                    "--model-path", str(good), "--requests", "2",
                                                                    "--kv-cache-memory-bytes", "1e6"],
                  expect="ok", slow=True)]
    for name, folder in folders.items():
        if name == "no-architectures":
            continue  # transformers picks the class from model_type: it loads (a case below)
        cases.append(Case(f"run --model-path {name}", "model",
                          ["run", "--quiet", "--backend", "real", "--model-path", str(folder), "--requests", "2"],
                          slow=True, must_not_say=("model_type 'llama'", "L, l, a, m, a")))
    for name in ("missing-parameter", "architectures-string", "config-deep"):
        cases.append(Case(f"verify --model-path {name}", "model", ["verify", "--model-path", str(folders[name])],
                          slow=True))
    # weights that do not match their config are refused before the window opens, as by `run`
    for name in ("missing-parameter", "unexpected-parameter", "more-layers-in-config", "shape-mismatch",
                 "architectures-string", "config-deep", "garbage-safetensors", "no-weights", "auto-map"):
        cases.append(Case(f"gui --model-path {name}", "model", ["gui", "--model-path", str(folders[name]),
                                                                "--quit-after", "1"], slow=True,
                          must_say=("weights do not match",) if "parameter" in name or "mismatch" in name
                          or "more-layers" in name else ()))
    cases.append(Case("gui --model-path good", "model", ["gui", "--model-path", str(good), "--quit-after", "1"],
                      expect="ok", slow=True))
    cases.append(Case("run --model-path without architectures (llama)", "model",
                      ["run", "--quiet", "--backend", "real", "--model-path", str(folders["no-architectures"]),
                       "--requests", "2"], expect="ok", slow=True))
    cases += [
        Case("gui --model-path missing", "model", ["gui", "--model-path", str(d / "nope"), "--quit-after", "1"],
             slow=True),
        Case("gui --model-path a file", "model", ["gui", "--model-path", str(good / "config.json"),
                                                  "--quit-after", "1"], slow=True),
        Case("run --model-path missing", "model", ["run", "--backend", "real", "--model-path", str(d / "nope")],
             slow=True),
        Case("verify --prompts 0", "numbers", ["verify", "--prompts", "0"]),
        Case("verify --prompts -3", "numbers", ["verify", "--prompts", "-3"]),
        Case("verify --max-tokens -1", "numbers", ["verify", "--max-tokens", "-1"]),
        Case("verify --max-tokens 0", "numbers", ["verify", "--max-tokens", "0"]),
        Case("verify --max-tokens 1e12", "numbers", ["verify", "--max-tokens", "1e12"]),
        Case("verify --prompts 1e9", "numbers", ["verify", "--prompts", "1e9"]),
        Case("verify --kv-cache-dtype nonsense", "numbers", ["verify", "--kv-cache-dtype", "fp7"]),
        Case("run real --kv-cache-memory-bytes 1", "numbers",
             ["run", "--quiet", "--backend", "real", "--model-path", str(good), "--kv-cache-memory-bytes", "1"],
             slow=True, must_not_say=("weights take",)),
    ]
    return cases


_DELETE = object()
