"""The third hostile pass's cases (2026-11-27), for scripts/hostile_inputs.py: each carries the
category it belongs to (numbers, structure, files, trace), beside its fixture. A file of its own
only so that hostile_inputs.py stays readable in one sitting."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HUGE = "9" * 5000  # past Python's int_max_str_digits (4,300)
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 128, "intermediate_size": 256,
         "vocab_size": 1000, "max_position_embeddings": 512}


def third_pass_cases(d: Path, Case, write) -> list:
    t = d / "third"
    return (_huge_number_cases(t, Case, write) + _file_cases(t, Case, write) + _trace_cases(t, Case, write)
            + _flag_cases(Case) + _config_cases(t, Case, write) + _attach_cases(Case))


def _attach_cases(Case) -> list:
    """A vLLM look-alike on loopback (a thread of this process, for the whole run) answering hostile
    /version and /metrics under a path prefix per case."""
    import http.server
    import threading

    version = b'{"version": "0.32.0"}'
    prom = (ROOT / "tests" / "fixtures" / "vllm" / "metrics_live_vllm_cpu_0.32_pressure.prom").read_bytes()
    running = 'vllm:num_requests_running{{engine="{}",model_name="tiny"}} 1\n'
    routes = {
        "/deep/version": b'{"version": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "/label/version": version, "/label/metrics": prom + running.format(HUGE).encode(),
        "/engines/version": version,
        "/engines/metrics": prom + "".join(running.format(i) for i in range(5000)).encode(),
    }

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            body = routes.get(self.path, b"not found")
            self.send_response(200 if self.path in routes else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"

    def attach(prefix):
        return ["attach", f"{url}/{prefix}", "--kv-events", "tcp://127.0.0.1:9", "--duration", "0.5"]

    return [
        Case("attach: /version nested 100,000 deep", "structure", attach("deep"), must_say=("did not answer",)),
        Case("attach: /metrics with a 5,000-digit engine label", "structure", attach("label")),
        Case("attach: /metrics naming 5,000 engines", "structure", attach("engines"), must_say=("5,000 engines",)),
    ]


def _huge_number_cases(t: Path, Case, write) -> list:
    config = t / "config"
    write(config / "presets" / "models" / "big.toml", f"num_hidden_layers = {HUGE}\n")
    env = {"KVSCOPE_CONFIG_DIR": str(config)}
    scenario = (ROOT / "presets" / "scenarios" / "cache-ceiling.toml").read_text()
    big_order = write(t / "scenarios" / "big-order.toml", scenario.replace("order = 1", f"order = {HUGE}"))
    minus_output = write(t / "scenarios" / "output-minus.toml", scenario.replace(
        "engine = { max_num_seqs = 64 }", "engine = { max_num_seqs = 64 }\noutput_tokens = -1"))
    newline_label = write(t / "scenarios" / "label-newline.toml", scenario.replace('"max_num_seqs 64"', '"a\\nb"'))
    cache = t / "cache"
    try:  # where `--hardware this-machine` looks (kvscope.app.lab.calibration.profile_path, in this cache)
        from kvscope.app.lab.this_machine import this_machine_key

        write(cache / "calibration" / f"{this_machine_key(use_cuda=False)}.json", f'{{"format": {HUGE}}}')
    except Exception as exc:  # noqa: BLE001 - a machine whose key cannot be made runs the other cases
        print(f"(no calibration profile case: {exc})")
    return [
        Case("math --model a user preset with a 5,000-digit number", "structure", ["math", "--model", "big"], env=env,
             must_say=("4,300 digits",)),
        Case("presets listing with a 5,000-digit user preset", "structure", ["presets"], expect="ok", env=env),
        Case("compare --scenario file with a 5,000-digit order", "structure",
             ["compare", "--scenario", str(big_order)], must_say=("4,300 digits",)),
        Case("math --hardware this-machine with a 5,000-digit calibration profile", "files",
             ["math", "--hardware", "this-machine"], env={"KVSCOPE_CACHE_DIR": str(cache)}),
        Case("compare --scenario file with output_tokens -1", "structure",
             ["compare", "--scenario", str(minus_output)], must_say=(".output_tokens: must be",),
             must_not_say=("quantization",)),
        Case("compare --scenario file with a label holding a newline", "structure",
             ["compare", "--scenario", str(newline_label)], must_say=("must be one line",)),
    ]


def _file_cases(t: Path, Case, write) -> list:
    a_file = write(t / "a-file", "not a folder\n")
    shape = write(t / "shape" / "config.json", json.dumps(LLAMA)).parent
    model = ROOT / "presets" / "models" / "llama-2-7b.toml"  # cache-ceiling's model
    real = ["run", "--quiet", "--backend", "real", "--model", "tiny-llama", "--requests", "2"]
    return [
        Case("run real with KVSCOPE_CACHE_DIR a file", "files", real, env={"KVSCOPE_CACHE_DIR": str(a_file)},
             slow=True, must_say=("KVSCOPE_CACHE_DIR",)),
        Case("run real with KVSCOPE_CACHE_DIR /dev/null", "files", real, env={"KVSCOPE_CACHE_DIR": "/dev/null"},
             slow=True, must_say=("KVSCOPE_CACHE_DIR",)),
        Case("presets with KVSCOPE_CONFIG_DIR a file", "files", ["presets"], env={"KVSCOPE_CONFIG_DIR": str(a_file)},
             must_say=("not a folder",)),
        Case("run --record -", "files", ["run", "--quiet", "--requests", "2", "--record", "-"],
             must_say=("not to stdout",)),
        Case("gui --screenshot -", "files", ["gui", "--screenshot", "-", "--quit-after", "1"],
             must_say=("not to stdout",)),
        Case("attach --record -", "files", ["attach", "http://127.0.0.1:1", "--kv-events", "tcp://127.0.0.1:5557",
                                            "--duration", "1", "--record", "-"], must_say=("not to stdout",)),
        Case("gui --model-path with --model", "files", ["gui", "--model-path", str(shape), "--model", "tiny-llama",
                                                        "--quit-after", "1"], must_say=("give one",)),
        Case("gui --model-path with --backend simulated", "files",
             ["gui", "--model-path", str(shape), "--backend", "simulated", "--quit-after", "1"],
             must_say=("--backend real",)),
        Case("gui --backend real --hardware h100-80gb", "files",
             ["gui", "--backend", "real", "--hardware", "h100-80gb", "--quit-after", "1"],
             must_say=("simulated target",)),
        Case("compare --csv onto the model preset the scenario reads", "files",
             ["compare", "--quiet", "--scenario", "cache-ceiling", "--csv", str(model)], protected=[model],
             must_say=("model preset",)),
        Case("bench --json a folder (before measuring)", "files", ["bench", "scheduler", "--json", str(t)],
             must_say=("is a folder",)),
        Case("math with stdout on a full disk", "files", ["math"], stdout="/dev/full", must_say=("No space left",)),
        Case("presets with stdout on a full disk", "files", ["presets"], stdout="/dev/full"),
        Case("run --json - with stdout on a full disk", "files", ["run", "--quiet", "--requests", "2", "--json", "-"],
             stdout="/dev/full"),
    ]


def _trace_cases(t: Path, Case, write) -> list:
    trace = write(t / "traces" / "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,100,10\n1,100,10\n")
    workload = write(t / "traces" / "w.toml", 'name = "w"\ntrace = "t.csv"\nprompt_tokens = 100\n')
    scenario = (ROOT / "presets" / "scenarios" / "fp8-kv-real.toml").read_text()
    rated = write(t / "traces" / "rated.toml", scenario.replace("prompt_scale = 0.0625", "arrival_rate_per_s = 3"))
    chat = (ROOT / "presets" / "workloads" / "chat-text.toml").read_text()
    chat_prompt = write(t / "traces" / "chat-prompt.toml",
                        chat.replace("output_tokens = 192", "output_tokens = 192\nprompt_tokens = 5000"))
    comma = write(t / "traces" / "comma.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,1,500,10\n")
    twice = write(t / "traces" / "twice.csv", "TIMESTAMP,ContextTokens,GeneratedTokens,TIMESTAMP\n0,100,10,5\n")
    return [
        Case("run --workload chat file with prompt_tokens", "trace", ["run", "--quiet", "--workload", str(chat_prompt)],
             must_say=("prompt_tokens would be ignored",)),
        Case("run --trace a row with a comma inside a number", "trace", ["run", "--quiet", "--trace", str(comma)],
             must_say=("4 cells",)),
        Case("run --trace two arrival columns", "trace", ["run", "--quiet", "--trace", str(twice)],
             must_say=("2 arrival columns",)),
        Case("run --trace with --workload", "trace", ["run", "--quiet", "--trace", str(trace), "--workload", "agent"],
             must_say=("give one",)),
        Case("run --trace with --arrival-rate", "trace", ["run", "--quiet", "--trace", str(trace), "--arrival-rate", "5"],
             must_say=("would be ignored",)),
        Case("run --workload azure-conv --arrival-rate 5", "trace",
             ["run", "--quiet", "--workload", "azure-conv", "--arrival-rate", "5"], must_say=("would be ignored",)),
        Case("run --workload file with trace and prompt_tokens", "trace", ["run", "--quiet", "--workload", str(workload)],
             must_say=("prompt_tokens would be ignored",)),
        Case("compare --scenario file: a trace preset with arrival_rate_per_s", "trace",
             ["compare", "--scenario", str(rated)], must_say=("would be ignored",)),
    ]


def _flag_cases(Case) -> list:
    return [
        Case("run --model twice", "numbers", ["run", "--quiet", "--model", "llama-3-8b", "--model", "tiny-llama"],
             must_say=("given twice",)),
        Case("run --requests then an abbreviation of it", "numbers", ["run", "--quiet", "--requests", "2", "--req", "3"],
             must_say=("given twice",)),
        Case("math --enable-prefix-caching --no-enable-prefix-caching", "numbers",
             ["math", "--enable-prefix-caching", "--no-enable-prefix-caching"], must_say=("contradicts",)),
        Case("compare --scenario twice", "numbers",
             ["compare", "--scenario", "cache-ceiling", "--scenario", "benchmark-trap"], must_say=("given twice",)),
        Case("gui --size twice", "numbers", ["gui", "--size", "800x600", "--size", "900x600", "--quit-after", "1"],
             must_say=("given twice",)),
        Case("math --block-size 16 twice (the same value)", "numbers", ["math", "--block-size", "16", "--block-size", "16"],
             expect="ok"),
    ]


def _config_cases(t: Path, Case, write) -> list:
    files = {
        "head-dim-zero": {**LLAMA, "head_dim": 0},
        "compressed-tensors-2-bit": {**LLAMA, "quantization_config": {
            "quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 2, "type": "int"}}}}},
    }
    cases = [Case(f"math --config {name}", "structure",
                  ["math", "--config", str(write(t / "configs" / name / "config.json", json.dumps(cfg)))])
             for name, cfg in files.items()]
    # rope_scaling, read since this pass: a huge factor is held to kvscope's ceiling; odd values, which
    # stretched nothing without a word, are refused naming the field since the thirteenth pass
    ropes = {"rope-factor-text": ({"rope_type": "yarn", "factor": "4"}, "rope_scaling.factor"),
             "rope-factor-nan": ({"type": "linear", "factor": "NaN"}, "rope_scaling.factor"),
             "rope-factor-1e308": ({"rope_type": "dynamic", "factor": 1e308}, None),
             "rope-a-list": ([1, 2], "rope_scaling must be a table"),
             "rope-original-negative": ({"rope_type": "yarn", "factor": 2, "original_max_position_embeddings": -5},
                                        "rope_scaling.original_max_position_embeddings")}
    for name, (scaling, said) in ropes.items():
        config = str(write(t / "configs" / name / "config.json", json.dumps({**LLAMA, "rope_scaling": scaling})))
        cases.append(Case(f"math --config {name}", "structure", ["math", "--config", config],
                          expect="refuse" if said else "ok", must_say=(said,) if said else ()))
    cases.append(Case("math --max-model-len past llama-2-7b's 4,096 positions", "numbers",
                      ["math", "--model", "llama-2-7b", "--max-model-len", "100000"], must_say=("4,096 positions",)))
    return cases
