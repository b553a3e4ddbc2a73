"""The fourth hostile pass's cases (2026-11-27): the FILES and DATA kvscope reads, for
scripts/hostile_inputs.py. Traces, workload and preset TOML files, calibration profiles,
config.json, recordings (.kvrec), model folders (safetensors, tokenizer files, chat templates),
the Hugging Face cache `kvscope models` lists, and a vLLM look-alike on loopback that `kvscope
attach` reads (HTTP /version, /metrics, /v1/models; a ZMQ KV event publisher and replay socket),
served by threads of this process for the whole run.

Every case's expect is the correct behaviour: a case that fails here is a bug. Large fixtures are
sparse files (no disk) or built lazily (the publisher's big batches exist only while sent).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import struct
import threading
import time
import zlib
from pathlib import Path

from hostile_recordings import records_of, small_recording
from hostile_fixtures import cpu_calibration_key, fake_http_server, hostile_model, stored, zmq_publisher

ROOT = Path(__file__).resolve().parent.parent
TRACE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
SMALL_MODEL = "num_hidden_layers = 2\nnum_attention_heads = 8\nnum_key_value_heads = 8\nhead_dim = 64\n" \
              "hidden_size = 512\nintermediate_size = 1024\nvocab_size = 1000\n"
SMALL_HARDWARE = "memory_bytes = 80e9\nmemory_bandwidth_bytes_per_s = 3e12\n[peak_flops]\nfp16 = 1e15\nbf16 = 1e15\n"
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 128, "intermediate_size": 256,
         "vocab_size": 1000, "max_position_embeddings": 512}


def fourth_file_cases(d: Path, Case, write) -> list:
    f = d / "fourth"
    f.mkdir(parents=True, exist_ok=True)
    return (_trace_cases(f, Case, write) + _workload_cases(f, Case, write) + _preset_cases(f, Case, write)
            + _calibration_cases(f, Case, write) + _config_cases(f, Case, write) + _recording_cases(f, Case, write)
            + _hf_cache_cases(f, Case, write) + _model_cases(f, Case, write) + _attach_cases(f, Case, write))


# -- traces ------------------------------------------------------------------------------------------


def _sparse(path: Path, head: bytes, size: int) -> Path:
    """A file of `size` bytes that starts with `head` and is zeros (a hole: no disk) after it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(head)
        handle.truncate(size)
    return path


def _trace_cases(f: Path, Case, write) -> list:
    t = f / "traces"
    sparse = _sparse(t / "sparse-1gib.csv", (TRACE_HEADER + "0,100,10\n").encode(), 1024**3 - 1)
    rows = t / "rows-10m.csv"
    rows.parent.mkdir(parents=True, exist_ok=True)
    with open(rows, "w") as handle:  # 60 MB: one row past MAX_REQUESTS
        handle.write(TRACE_HEADER)
        chunk = "0,1,1\n" * 1_000_000
        for _ in range(10):
            handle.write(chunk)
        handle.write("0,1,1\n")
    files = {
        "iso-mixed-zones": TRACE_HEADER + "2023-11-16 18:15:46+00:00,100,10\n2023-11-16 18:15:47,100,10\n",
        "date-only": TRACE_HEADER + "2023-11-16,100,10\n2023-11-17,100,10\n",
        "year-9999-long-fraction": TRACE_HEADER + "9999-12-31 23:59:59.9999999999,100,10\n",
        "cr-only": (TRACE_HEADER + "0,100,10\n1,100,10\n").replace("\n", "\r"),
        "year-0001": TRACE_HEADER + "0001-01-01 00:00:00,100,10\n0001-01-01 00:00:01,100,10\n",
        "minus-then-plus-1e308": TRACE_HEADER + "-1e308,100,10\n1e308,100,10\n",
        "fraction-5000-digits": TRACE_HEADER + "2023-11-16 18:15:46." + "9" * 5000 + ",100,10\n",
    }
    # year-0001: refused while a time without a zone was read in the machine's zone (no local time for
    # year 1); read as UTC (the ninth pass), its two rows are 1 s apart like any others
    ok = {"iso-mixed-zones", "date-only", "year-9999-long-fraction", "cr-only", "fraction-5000-digits", "year-0001"}
    cases = [
        # read whole (1 GiB), decoded, then put in a StringIO (4 bytes a character): 6 GiB
        Case("run --trace a sparse 1 GiB file (under the 1 GiB cap)", "trace",
             ["run", "--quiet", "--trace", str(sparse)]),
        # every row is parsed into a TraceRow before the 10,000,000-row bound is noticed
        Case("run --trace 10,000,001 rows", "trace", ["run", "--quiet", "--trace", str(rows)],
             must_say=("10,000,000 rows",)),
        Case("run --trace 10,000,001 rows --requests 5", "trace",
             ["run", "--quiet", "--trace", str(rows), "--requests", "5"], expect="ok"),
    ]
    for name, text in files.items():
        path = write(t / f"{name}.csv", text)
        cases.append(Case(f"run --trace {name}", "trace", ["run", "--quiet", "--trace", str(path)],
                          expect="ok" if name in ok else "refuse"))
    return cases


# -- workload files ------------------------------------------------------------------------------------


def _workload_cases(f: Path, Case, write) -> list:
    w = f / "workloads"
    words = "a " * 9000
    turns = ",\n".join(f'{{ user = "{words}", assistant = "{words}" }}' for _ in range(99)) + f',\n{{ user = "{words}" }}'
    # 3.5 MB (under the 4 MiB TOML cap): each turn resends the conversation, 91 M hashed tokens in all
    resend = write(w / "chat-resend.toml", f'name = "resend"\nnum_requests = 100\noutput_tokens = 1\n[chat]\n'
                                           f'system_prompt = "s"\n[[chat.conversations]]\nturns = [\n{turns}\n]\n')
    prefixes = write(w / "huge-prefixes.toml", 'name = "prefixes"\nnum_requests = 2000\nshared_prefix_fraction = 1.0\n'
                                               'shared_prefix_tokens = 4194304\nnum_shared_prefixes = 4\n'
                                               'prompt_tokens = 4194304\noutput_tokens = 1\n')
    prompts = write(w / "huge-prompts.toml", 'name = "prompts"\nnum_requests = 100\nprompt_tokens = 4194304\n'
                                             'output_tokens = 1\n')
    return [
        # all 100 requests are longer than max_model_len and rejected, after a minute and 4 GB
        Case("run --workload chat file whose turns resend 3.5 MB of text", "structure",
             ["run", "--quiet", "--workload", str(resend)], expect="either"),
        Case("run --workload file: 2,000 requests on 4 shared prefixes of 4,194,304 tokens", "structure",
             ["run", "--quiet", "--workload", str(prefixes)], expect="either"),
        Case("run --workload file: 100 prompts of 4,194,304 tokens", "structure",
             ["run", "--quiet", "--workload", str(prompts)], expect="either"),
    ]


# -- presets ---------------------------------------------------------------------------------------------


def _preset_cases(f: Path, Case, write) -> list:
    config = f / "config"
    models, hardware, workloads = (config / "presets" / k for k in ("models", "hardware", "workloads"))
    for folder in (models, hardware, workloads):
        folder.mkdir(parents=True, exist_ok=True)
    env = {"KVSCOPE_CONFIG_DIR": str(config)}
    pipe = models / "pipe.toml"
    if not pipe.exists():
        os.mkfifo(pipe)
    (models / "folder.toml").mkdir(exist_ok=True)
    zero = models / "zero.toml"
    if not zero.is_symlink():
        os.symlink("/dev/zero", zero)
    write(models / "llama-3-8b.toml", "num_hidden_layers = 'x'\n")  # shadowing a built-in: the built-in wins
    write(models / "escape.toml", SMALL_MODEL + 'name = "a\\nb\\u001b[2J"\n')
    write(hardware / "tiny-efficiency.toml", SMALL_HARDWARE + '[calibration]\nlabel = "x"\nflops_efficiency = 1e-300\n'
                                             'bandwidth_efficiency = 1e-300\n')
    write(hardware / "tiny-rates.toml", "memory_bytes = 80e9\nmemory_bandwidth_bytes_per_s = 1e-300\n[peak_flops]\n"
                                        "fp16 = 1e-300\nbf16 = 1e-300\n")
    write(hardware / "escape-label.toml", SMALL_HARDWARE + '[calibration]\nlabel = "a\\nb\\u001b[31m"\n')
    write(hardware / "fp64-only.toml", "memory_bytes = 80e9\nmemory_bandwidth_bytes_per_s = 3e12\n[peak_flops]\n"
                                       "fp64 = 1e15\n")
    write(workloads / "devzero.toml", 'name = "devzero"\ntrace = "../../../../../../../../dev/zero"\n')
    return [
        Case("presets listing with a FIFO, a folder and /dev/zero as presets", "files", ["presets"], expect="ok",
             env=env),
        Case("models listing with a FIFO preset", "files", ["models"], expect="ok", env=env),
        # refused as "unknown model preset 'pipe'; known: ..., pipe": it lists the name it calls unknown
        Case("math --model a user preset that is a FIFO", "files", ["math", "--model", "pipe"], env=env,
             must_not_say=("unknown model preset",)),
        Case("math --model a user preset .toml that is a folder", "files", ["math", "--model", "folder"], env=env,
             must_not_say=("unknown model preset",)),
        Case("math --model a user preset linked to /dev/zero", "files", ["math", "--model", "zero"], env=env,
             must_not_say=("unknown model preset",)),
        Case("math --model a user preset shadowing a built-in", "files", ["math", "--model", "llama-3-8b"],
             expect="ok", env=env),
        # a name with a newline and a terminal escape is printed raw in the table
        Case("math --model a user preset whose name holds a newline and ESC", "structure",
             ["math", "--model", "escape"], env=env),
        # accepted: the run reports a 4e298-second engine clock
        Case("run --hardware a preset calibrated to 1e-300 efficiency", "structure",
             ["run", "--quiet", "--hardware", "tiny-efficiency", "--requests", "2"], env=env),
        # accepted: the run reports "duration (engine clock) inf s"
        Case("run --hardware a preset of 1e-300 bytes/s and FLOP/s", "structure",
             ["run", "--quiet", "--hardware", "tiny-rates", "--requests", "2"], env=env),
        Case("run --hardware a preset whose calibration label holds a newline and ESC", "structure",
             ["run", "--quiet", "--hardware", "escape-label", "--requests", "2"], env=env),
        Case("math --hardware a preset of fp64 FLOP/s only", "structure", ["math", "--hardware", "fp64-only"],
             env=env, must_say=("fp64",)),
        Case("run --workload a user preset whose trace climbs to /dev/zero", "files",
             ["run", "--quiet", "--workload", "devzero"], env=env, must_say=("not a regular file",)),
    ]


# -- calibration profiles (what --hardware this-machine reads) -------------------------------------------


def _calibration_cases(f: Path, Case, write) -> list:
    key = cpu_calibration_key()
    if key is None:
        return []
    base = {"format": "kvscope-calibration", "version": 1, "calibration": {"label": "x", "flops_efficiency": 0.5}}
    profiles = {
        "peak-dtype-list": ({**base, "measured_on": {"peak_flops": 1e11, "peak_dtype": ["fp32"]}}, "refuse"),
        "peak-dtype-table": ({**base, "measured_on": {"peak_flops": 1e11, "peak_dtype": {"a": 1}}}, "refuse"),
        "label-escape": ({**base, "calibration": {"label": "a\nb\x1b[31m"}}, "refuse"),
        "efficiency-1e-300": ({**base, "calibration": {"label": "x", "flops_efficiency": 1e-300,
                                                       "bandwidth_efficiency": 1e-300}}, "refuse"),
        "byte-order-mark": ("\ufeff" + json.dumps(base), "ok"),  # presets, config.json and traces take one
        "calibration-null": ({**base, "calibration": None}, "ok"),
        "peak-nan": ('{"format": "kvscope-calibration", "version": 1, "calibration": {"label": "x"}, '
                     '"measured_on": {"peak_flops": NaN}}', "refuse"),
    }
    cases = []
    for name, (profile, expect) in profiles.items():
        cache = f / "calibration" / name
        write(cache / "calibration" / f"{key}.json", profile if isinstance(profile, str) else json.dumps(profile))
        argv = ["run", "--quiet", "--hardware", "this-machine", "--requests", "2"] if name in (
            "label-escape", "efficiency-1e-300") else ["math", "--hardware", "this-machine"]
        cases.append(Case(f"{argv[0]} --hardware this-machine with a calibration profile: {name}", "files", argv,
                          expect=expect, env={"KVSCOPE_CACHE_DIR": str(cache)}))
    return cases


# -- config.json -------------------------------------------------------------------------------------------


def _config_cases(f: Path, Case, write) -> list:
    c = f / "configs"
    files = {
        "compressed-tensors-weights-int": ({**LLAMA, "quantization_config": {
            "quant_method": "compressed-tensors", "config_groups": {"g": {"weights": 5}}}}, "refuse"),
        "layer-types-100000": ({**LLAMA, "layer_types": ["full_attention"] * 100_000}, "refuse"),
        "mlp-only-layers-200000": ({**LLAMA, "num_experts": 4, "num_experts_per_tok": 2,
                                    "mlp_only_layers": list(range(200_000))}, "refuse"),
        "linear-state-huge": ({**LLAMA, "layer_types": ["linear_attention", "full_attention"],
                               "linear_num_key_heads": 65_536_000, "linear_num_value_heads": 65_536_000,
                               "linear_key_head_dim": 65_536_000, "linear_value_head_dim": 65_536_000,
                               "linear_conv_kernel_dim": 10**15}, "refuse"),
        "text-config-nested-twice": ({"model_type": "x", "text_config": {"text_config": LLAMA}}, "refuse"),
        "num-experts-per-tok-past-experts": ({**LLAMA, "num_experts": 4, "num_experts_per_tok": 100}, "refuse"),
        # a 0 given is read as absent (4 x hidden_size): weights sized for an MLP the file does not have
        "intermediate-size-zero": ({**LLAMA, "intermediate_size": 0}, "refuse"),
    }
    cases = []
    for name, (config, expect) in files.items():
        path = write(c / name / "config.json", json.dumps(config))
        cases.append(Case(f"math --config {name}", "structure", ["math", "--config", str(path)], expect=expect))
    bom = write(c / "byte-order-mark" / "config.json", b"\xef\xbb\xbf" + json.dumps(LLAMA).encode())
    cases.append(Case("math --config with a byte-order mark", "structure", ["math", "--config", str(bom)], expect="ok"))
    duplicate = write(c / "duplicate-key" / "config.json", json.dumps(LLAMA)[:-1] + ', "num_hidden_layers": "two"}')
    cases.append(Case("math --config a key given twice (the second wrong)", "structure",
                      ["math", "--config", str(duplicate)], must_say=("num_hidden_layers",)))
    return cases


# -- recordings ---------------------------------------------------------------------------------------------




def _recording_cases(f: Path, Case, write) -> list:
    from kvscope.app.lab.recording.format import FRAME, INDEX, TRAILER_TAG, frame_record

    r = f / "recordings"
    data = small_recording(r / "good.kvrec").read_bytes()
    records = records_of(data)
    index_offset = next(o for o, t, _, _ in records if t == INDEX)

    # record 1's frame claims 5.9 GiB and the file (sparse) is that long: read whole before its checksum
    offset = records[1][0]
    raw = bytearray(data[:offset + FRAME.size])
    claimed = int(5.9 * 1024**3)
    struct.pack_into("<Q", raw, offset + 4, claimed)
    struct.pack_into("<I", raw, offset + 16, zlib.crc32(bytes(raw[offset:offset + 16])))
    sparse = _sparse(r / "claims-5.9-gib.kvrec", bytes(raw), offset + FRAME.size + claimed)

    # the header record, zlib'd (2 MB): arrays over 500 MB of zeros restored as float64 / cumsummed int64
    (n,) = struct.unpack_from("<I", data, records[0][0] + FRAME.size)
    head = json.loads(data[records[0][0] + FRAME.size + 4:records[0][0] + FRAME.size + 4 + n])
    size = 500_000_000

    def header_with(specs) -> bytes:
        text = json.dumps({**head, "arrays": specs}).encode()
        payload = struct.pack("<I", len(text)) + text + bytes(size)
        return data[:records[0][0]] + frame_record(1, payload, True) + data[records[1][0]:index_offset]

    widened = write(r / "arrays-widened.kvrec", header_with(
        {k: {"dtype": "|u1", "count": size, "offset": 0, "as": "<f8"} for k in "abc"}))
    summed = write(r / "array-delta.kvrec", header_with(
        {"a": {"dtype": "|u1", "count": size, "offset": 0, "delta": True}}))

    # a closed file whose index lists 10,000,000 records (each pointing at the header): 100 KB
    count = 10_000_000
    specs = {"record.type": {"dtype": "|u1", "count": count, "offset": 0},
             "record.offset": {"dtype": "|u1", "count": count, "offset": 0, "as": "<i8"},
             "record.first": {"dtype": "|u1", "count": count, "offset": 0},
             "record.count": {"dtype": "|u1", "count": count, "offset": 0}}
    text = json.dumps({"arrays": specs}).encode()
    index = frame_record(INDEX, struct.pack("<I", len(text)) + text + bytes([14]) * count, True)
    trailer_head = struct.pack("<Q8s", index_offset, TRAILER_TAG)
    listed = write(r / "index-10m.kvrec", data[:index_offset] + index + trailer_head
                   + struct.pack("<I", zlib.crc32(trailer_head)))
    out = r / "out"
    out.mkdir(exist_ok=True)
    return [
        Case("export a recording whose record claims 5.9 GiB (a sparse file)", "recording", ["export", str(sparse)]),
        Case("export a 2 MB recording whose arrays restore as 3 x 4 GB of float64", "recording",
             ["export", str(widened)]),
        Case("export a 2 MB recording with a 500,000,000-entry delta array", "recording",
             ["export", str(summed), "--csv", str(out / "delta.csv")]),
        Case("export a recording whose index lists 10,000,000 records", "recording", ["export", str(listed)]),
        Case("gui --replay a 2 MB recording whose arrays restore as 3 x 4 GB of float64", "recording",
             ["gui", "--replay", str(widened), "--quit-after", "1"], slow=True),
    ]


# -- the Hugging Face cache (`kvscope models`) ----------------------------------------------------------------


def _hf_cache_cases(f: Path, Case, write) -> list:
    def snapshot(root: Path, repo: str) -> Path:
        folder = root / "hub" / f"models--{repo}" / "snapshots" / "abc123"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def link(target: str, path: Path) -> None:
        if not path.is_symlink():
            os.symlink(target, path)

    weights = f / "hf" / "dangling-weights"  # an interrupted download: the blob the link names is missing
    folder = snapshot(weights, "org--model")
    write(folder / "config.json", json.dumps(LLAMA))
    link("../../blobs/0123456789abcdef", folder / "model.safetensors")
    config = f / "hf" / "dangling-config"
    link("../../blobs/fedcba9876543210", snapshot(config, "org--model") / "config.json")
    loop = f / "hf" / "config-loop"
    link("config.json", snapshot(loop, "org--model") / "config.json")
    flat = f / "hf" / "snapshots-a-file"
    write(flat / "hub" / "models--org--model" / "snapshots", "x")
    return [
        Case("models with a dangling model.safetensors link in the Hugging Face cache", "files", ["models"],
             expect="ok", env={"HF_HOME": str(weights)}),
        Case("models with a dangling config.json link in the Hugging Face cache", "files", ["models"], expect="ok",
             env={"HF_HOME": str(config)}),
        Case("models with a config.json symlink loop in the Hugging Face cache", "files", ["models"], expect="ok",
             env={"HF_HOME": str(loop)}),
        Case("models with a snapshots file in the Hugging Face cache", "files", ["models"], expect="ok",
             env={"HF_HOME": str(flat)}),
    ]


# -- model folders: tokenizers and chat templates -----------------------------------------------------------


def _model_cases(f: Path, Case, write) -> list:
    from tokenizers import Tokenizer, models, pre_tokenizers

    m = f / "models"
    good = hostile_model(m / "good")

    def tokenizer_json(size: int) -> str:
        """A word-level tokenizer of `size` ids; words it does not know are its last id."""
        vocab = {"<eos>": 0, **{f"w{i}": i for i in range(1, size - 1)}, "[UNK]": size - 1}
        tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
        tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
        return tokenizer.to_str()

    def tokenizer_config(template: str) -> str:
        return json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<eos>", "unk_token": "[UNK]",
                           "chat_template": template})

    plain = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    small, large = tokenizer_json(100), tokenizer_json(5001)

    def variant(name: str, files: dict) -> Path:
        folder = m / name
        if folder.exists():
            shutil.rmtree(folder)
        shutil.copytree(good, folder)
        for file_name, content in files.items():
            write(folder / file_name, content)
        return folder

    folders = {
        "tokenizer-json-list": variant("tokenizer-json-list", {"tokenizer.json": "[1, 2, 3]",
                                                               "tokenizer_config.json": tokenizer_config(plain)}),
        "tokenizer-past-vocab": variant("tokenizer-past-vocab", {"tokenizer.json": large,
                                                                 "tokenizer_config.json": tokenizer_config(plain)}),
        "template-raises": variant("template-raises", {
            "tokenizer.json": small, "tokenizer_config.json": tokenizer_config("{{ raise_exception('no system') }}")}),
        "template-syntax": variant("template-syntax", {"tokenizer.json": small,
                                                       "tokenizer_config.json": tokenizer_config("{% if %}")}),
        "template-undefined": variant("template-undefined", {
            "tokenizer.json": small, "tokenizer_config.json": tokenizer_config("{{ foo.bar.baz }}")}),
        "template-loops": variant("template-loops", {"tokenizer.json": small, "tokenizer_config.json": tokenizer_config(
            "{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}")}),
        "tokenizer-config-deep": variant("tokenizer-config-deep",
                                         {"tokenizer_config.json": "[" * 100_000 + "]" * 100_000}),
        "template-plain": variant("template-plain", {"tokenizer.json": small,
                                                     "tokenizer_config.json": tokenizer_config(plain)}),
    }
    fifo = variant("generation-config-fifo", {})
    (fifo / "generation_config.json").unlink()
    os.mkfifo(fifo / "generation_config.json")
    # the trained model's converted copy in kvscope's cache, damaged (its tokenizer.json a JSON list)
    cache = f / "kvscope-cache"
    trained = cache / "models" / "smollm2-135m-instruct"
    if trained.exists():
        shutil.rmtree(trained)
    shutil.copytree(good, trained)
    write(trained / "tokenizer.json", "[1, 2, 3]")
    write(trained / "tokenizer_config.json", tokenizer_config(plain))

    def real(folder, *more):
        return ["run", "--quiet", "--backend", "real", "--model-path", str(folder), "--requests", "2",
                "--kv-cache-memory-bytes", "1e6", *more]

    chat = ("--workload", "chat-text")
    return [
        Case("run --model-path: tokenizer.json a JSON list", "model", real(folders["tokenizer-json-list"]), slow=True),
        Case("run --model-path chat-text: a tokenizer of 5,001 ids on a 512-token model", "model",
             real(folders["tokenizer-past-vocab"], *chat), slow=True),
        Case("verify --model-path: a tokenizer of 5,001 ids on a 512-token model", "model",
             ["verify", "--model-path", str(folders["tokenizer-past-vocab"]), "--kv-cache-dtype", "fp32",
              "--prompts", "1", "--max-tokens", "1", "--passages", "1"], slow=True),
        Case("run --model-path chat-text: a chat template that raises", "model",
             real(folders["template-raises"], *chat), slow=True),
        Case("run --model-path chat-text: a chat template with a syntax error", "model",
             real(folders["template-syntax"], *chat), slow=True),
        Case("run --model-path chat-text: a chat template naming an undefined variable", "model",
             real(folders["template-undefined"], *chat), slow=True),
        Case("run --model-path chat-text: a chat template looping 10,000,000,000 times", "model",
             real(folders["template-loops"], *chat), slow=True),
        Case("run --model-path: tokenizer_config.json nested 100,000 deep", "model",
             real(folders["tokenizer-config-deep"]), expect="either", slow=True),
        Case("run --model-path chat-text: a plain tokenizer and template", "model",
             real(folders["template-plain"], *chat), expect="ok", slow=True),
        Case("run --model-path: generation_config.json a FIFO", "model", real(fifo), expect="ok", slow=True),
        Case("run --model smollm2-135m-instruct: its cached conversion has a damaged tokenizer.json", "model",
             ["run", "--quiet", "--backend", "real", "--model", "smollm2-135m-instruct", "--requests", "2",
              "--kv-cache-memory-bytes", "1e6"], env={"KVSCOPE_CACHE_DIR": str(cache)}, slow=True),
    ]


# -- a vLLM look-alike on loopback ---------------------------------------------------------------------------


def _attach_cases(f: Path, Case, write) -> list:
    """HTTP routes per path prefix, and ZMQ publishers / replay sockets per case, all threads of
    this process. A publisher (XPUB) sends its batches each time a subscriber subscribes, so the
    large ones exist only while a case runs."""

    import msgspec
    import zmq

    prom = (ROOT / "tests" / "fixtures" / "vllm" / "metrics_live_vllm_cpu_0.32_pressure.prom").read_text()
    version = b'{"version": "0.32.0"}'
    encode = msgspec.msgpack.encode

    def metrics(blocks: str = "12", extra: str = "") -> bytes:
        return (prom.replace('num_gpu_blocks="12"', f'num_gpu_blocks="{blocks}"') + extra).encode()

    def dribble(handler, length: int) -> None:  # a slow-loris answer: a byte every half second
        handler.send_response(200)
        handler.send_header("Content-Length", str(length))
        handler.end_headers()
        for _ in range(240):
            try:
                handler.wfile.write(b" ")
                handler.wfile.flush()
            except OSError:
                return
            time.sleep(0.5)

    engines = "".join(f'vllm:num_requests_running{{engine="{i}",model_name="tiny"}} 1e308\n' for i in (1, 2))
    routes = {
        "/good/version": version, "/good/metrics": metrics(),
        "/models-deep/version": version, "/models-deep/metrics": metrics(),
        "/models-deep/v1/models": b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "/models-many/version": version, "/models-many/metrics": metrics(),
        "/models-many/v1/models": json.dumps({"data": [{"id": "m" * 100} for _ in range(100_000)]}).encode(),
        "/big-pool/version": version, "/big-pool/metrics": metrics(blocks="4194304"),
        "/inf-sum/version": version, "/inf-sum/metrics": metrics(extra=engines),
        "/slow-metrics/version": version, "/slow-metrics/metrics": lambda h: dribble(h, 100_000),
        "/slow-version/version": lambda h: dribble(h, 100_000),
    }

    url = fake_http_server(routes)
    context = zmq.Context()

    def seq(n: int) -> bytes:
        return n.to_bytes(8, "big", signed=True)

    def batch(events, rank=None, ts=1.0) -> bytes:
        return encode([ts, events] + ([rank] if rank is not None else []))

    publisher = functools.partial(zmq_publisher, context)

    def replay_socket(answer) -> str:
        """A ROUTER: the probe (seq 2**62) gets the end marker; a replay request is answered by answer(send, seq)."""
        socket = context.socket(zmq.ROUTER)
        port = socket.bind_to_random_port("tcp://127.0.0.1")
        lock = threading.Lock()

        def send(identity, frames):
            with lock:
                socket.send_multipart([identity, b""] + frames)

        def loop():
            while True:
                with lock:
                    frames = socket.recv_multipart() if socket.poll(50) else None
                if not frames:
                    continue
                identity, first = frames[0], int.from_bytes(frames[-1], "big", signed=True)
                if first == 1 << 62:
                    send(identity, [seq(-1), b""])
                else:
                    threading.Thread(target=answer, args=(lambda fr, i=identity: send(i, fr), first),
                                     daemon=True).start()

        threading.Thread(target=loop, daemon=True).start()
        return f"tcp://127.0.0.1:{port}"

    empty = batch([])
    deep = b"\x92\x01\x91" + b"\x91" * 100_000 + b"\xc0"  # [1, [[[[...]]]]]: an event nested 100,000 deep

    def big_tokens(count: int) -> bytes:
        """One BlockStored batch of `count` token ids, encoded by hand (a list of them would take GBs here)."""
        event = (b"\x85" + encode("type") + encode("BlockStored") + encode("block_hashes") + b"\x91\x01"
                 + encode("parent_block_hash") + b"\xc0" + encode("block_size") + b"\x20"
                 + encode("token_ids") + b"\xdd" + struct.pack(">I", count) + b"\x01" * count)
        return b"\x92\xcb" + struct.pack(">d", 1.0) + b"\x91" + event

    def stale_replies(send, first):  # batches the subscriber already has, each under the 2 s timeout
        for _ in range(120):
            send([seq(0), empty])
            time.sleep(0.5)

    def deep_reply(send, first):
        send([seq(first), deep])
        send([seq(-1), b""])

    good = publisher(lambda: [[b"kv", seq(0), batch([stored([1, 2])])]])
    gap = lambda: [[b"kv", seq(0), empty], [b"kv", seq(5), empty]]  # noqa: E731
    odd = publisher(lambda: [
        [b"kv", seq(0), batch([stored([1, b"\x00" * 7 + b"\x01", -1, b""], parent_block_hash=b"y" * 10_000)],
                              rank=2**64 - 1, ts=float("nan"))],
        [b"kv", seq(1), batch([stored([5], group_idx=2**63, block_size=2**63, medium="m" * 10_000)], rank=-3)],
        [b"kv", seq(2), batch([{"type": "X" * 10_000}, {"type": "BlockRemoved", "block_hashes": [b"\x01"]}])],
    ])
    existing = small_recording(f / "attach" / "existing.kvrec")
    out = f / "attach"

    def attach(prefix, events, *more, duration="2"):
        return ["attach", f"{url}/{prefix}", "--kv-events", events, "--duration", duration, *more]

    return [
        Case("attach: /v1/models nested 100,000 deep", "structure", attach("models-deep", good), expect="ok"),
        Case("attach: /v1/models listing 100,000 models", "structure", attach("models-many", good), expect="ok"),
        Case("attach: /metrics running counts summing past a float", "structure",
             attach("inf-sum", good, "--data-parallel-size", "3"), expect="ok"),  # its 3 engines followed
        Case("attach: /metrics sent a byte every half second (slow loris)", "structure",
             attach("slow-metrics", good)),
        Case("attach: /version sent a byte every half second (slow loris)", "structure",
             attach("slow-version", good)),
        Case("attach: batches from 64 DP ranks on a 4,194,304-block pool", "structure",
             attach("big-pool", publisher(lambda: [[b"kv", seq(i), batch([stored([i])], rank=i)]
                                                   for i in range(64)])), expect="either"),
        Case("attach: batches from 20,000 DP ranks (the server has 1 engine)", "structure",
             attach("good", publisher(lambda: [[b"kv", seq(0), batch([stored([i])], rank=i)]
                                               for i in range(20_000)]), duration="3"), expect="either"),
        Case("attach: one batch of 500,000,000 token ids", "structure",
             attach("good", publisher(lambda: [[b"kv", seq(0), big_tokens(500_000_000)]]), duration="5"),
             expect="either"),
        Case("attach: a batch nested 100,000 deep, then a good one", "structure",
             attach("good", publisher(lambda: [[b"kv", seq(0), deep], [b"kv", seq(1), batch([stored([1])])]])),
             expect="ok"),
        Case("attach --record over a recording: only a batch nested 100,000 deep", "files",
             attach("good", publisher(lambda: [[b"kv", seq(0), deep]]), "--record", str(existing)),
             protected=[existing]),
        Case("attach: the replay socket answers a batch nested 100,000 deep", "structure",
             attach("good", publisher(gap), "--replay", replay_socket(deep_reply), duration="1"), expect="ok"),
        Case("attach --duration 1: the replay socket trickles stale batches", "structure",
             attach("good", publisher(gap), "--replay", replay_socket(stale_replies), duration="1"),
             expect="either"),
        Case("attach --record: odd hashes, ranks, NaN time, huge group and block size", "structure",
             attach("good", odd, "--record", str(out / "odd.kvrec")), expect="ok"),
    ]
