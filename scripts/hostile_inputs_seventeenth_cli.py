"""The seventeenth hostile pass's cases (the command line and attach), for scripts/hostile_inputs.py; every name
begins "seventeenth cli:" (`--only "seventeenth cli"` runs them). Found, and how it behaved before: `bench
calibration --requests 2048` (the flag's own bound, 1 to 2,048) held out 256 requests without a word, the flag read
as min(N, 256), and ran for minutes. `verify --quantization int8` (or nf4) loaded the quantised model twice, once
for its context and once to run it: two `loading tiny-llama with int8 weights ...` lines and twice the minutes; it
said "1 prompts". `verify --max-tokens 4096` past the model's context was refused after `loading tiny-llama ...`
(two lines, and with --quantization the model loaded first). `run --backend real --device cpu --block-size 1048576`
(one block past the CPU's default 1 GiB KV budget) was refused after `loading ...` and `loaded ...`: the check
before loading ran only when --kv-cache-memory-bytes was given. `calibrate --clock cpu` on a GPU was refused as
"with torch's default here, 16 threads ... give --threads 1", and --threads 1 was then refused as the CPU's: the
cause is the device, whose steps no CPU second times. `compare --scenario static-vs-continuous --requests 100000`
said "leave --requests out to replay them all", where leaving it out runs the scenario's 96 (a workload file's
num_requests likewise). attach's prediction: the latency window said in whole seconds ("over the last 0 s" for a
0.3 s attach); --hardware 8x-h100-80gb planned the model on one of its GPUs (llama-3-70b: 0 blocks predicted,
"error -100.0 %", where `kvscope math` gives 80,475); a model whose weights leave no room on --hardware was a
prediction of 0 blocks beside the server's running pool; a CPU preset's set KV budget was said as "from
this-machine x gpu_memory_utilization 0.9". `attach URL --quit-after 2` (the window, scripted) on a server that
cannot be reached exited 0; with `--record r.kvrec` too, and the attach's refusal was replaced by "Nothing to
record: not attached to a server." (the recording asked in the same frame), no file written, nothing said. Every
case's `expect` is the right behaviour.

Not expressible with Case (tested in tests/test_cli_hostile_seventeenth.py instead): the attach prediction (it
needs a server on loopback), `calibrate --clock cpu` on a GPU (this machine has none), and which models verify
loads (counted there without loading one)."""

from __future__ import annotations

from pathlib import Path


def seventeenth_cli_cases(d: Path, Case, write) -> list:
    return _bench_cases(Case) + _verify_cases(Case) + _trace_count_cases(d, Case, write) + _window_attach_cases(d, Case)


def _case(Case, name: str, *args, **kwargs):
    return Case(f"seventeenth cli: {name}", *args, **kwargs)


def _bench_cases(Case) -> list:
    held_out = "`kvscope bench calibration` holds out at most 256 requests"
    return [
        _case(Case, "bench calibration --requests 2048 (run as 256 without a word, for minutes)", "numbers",
              ["bench", "calibration", "--requests", "2048"], must_say=("--requests 2,048: " + held_out,)),
        _case(Case, "bench calibration --requests 257 (run as 256)", "numbers",
              ["bench", "calibration", "--requests", "257"], must_say=("--requests 257: " + held_out,)),
        _case(Case, "bench calibration --requests 256 --json / (256 taken: the folder is what is refused)", "numbers",
              ["bench", "calibration", "--requests", "256", "--json", "/"], must_say=("--json /: is a folder",),
              must_not_say=("holds out",)),
        _case(Case, "bench real --requests 2048 --json / (real's own bound: taken)", "numbers",
              ["bench", "real", "--requests", "2048", "--json", "/"], must_say=("--json /: is a folder",),
              must_not_say=("holds out",)),
    ]


def _verify_cases(Case) -> list:
    argv = ["verify", "--model", "tiny-llama", "--device", "cpu", "--prompts", "1", "--max-tokens", "1",
            "--passages", "0", "--kv-cache-dtype", "fp32", "--quantization", "int8"]
    context = "--max-tokens 4096: a prompt of up to 220 tokens and its answer must fit the model's 4,096-token context"
    return [
        _case(Case, "verify --model tiny-llama --max-tokens 4096 (refused after `loading ...`: two lines)", "numbers",
              ["verify", "--model", "tiny-llama", "--device", "cpu", "--max-tokens", "4096", "--passages", "0"],
              must_say=(context,), must_not_say=("loading",)),
        _case(Case, "verify --quantization nf4 --max-tokens 4096 (the model loaded, then refused)", "numbers",
              ["verify", "--model", "tiny-llama", "--device", "cpu", "--max-tokens", "4096", "--passages", "0",
               "--quantization", "nf4"], must_say=(context,), must_not_say=("loading",)),
        _case(Case, "run --backend real --block-size 1048576 (past the CPU's default 1 GiB: refused after loading)",
              "numbers", ["run", "--quiet", "--backend", "real", "--model", "tiny-llama", "--device", "cpu",
                          "--requests", "1", "--block-size", "1048576"],
              must_say=("no room for a KV cache: the budget kv_cache_memory_bytes (1.00 GiB (1.1 GB))",),
              must_not_say=("loading",)),
        _case(Case, "verify --quantization int8 (the model loaded twice, 'loading' said twice; '1 prompts')", "flags",
              argv, expect="ok", slow=True, must_say=("int8 weights, KV cache fp32",),
              must_not_say=("int8 weights ...\nkvscope: loading tiny-llama with int8 weights", "1 prompts")),
    ]


def _trace_count_cases(d: Path, Case, write) -> list:
    folder = d / "seventeenth-cli"
    trace = write(folder / "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,100,20\n"
                                    "2023-11-16 18:15:47.68,200,30\n")
    workload = write(folder / "w.toml", 'name = "w"\ntrace = "t.csv"\nnum_requests = 1\n')
    return [
        _case(Case, "compare --scenario static-vs-continuous --requests 100000 ('leave it out to replay them all')",
              "numbers", ["compare", "--scenario", "static-vs-continuous", "--requests", "100000"],
              must_say=("leave --requests out for scenario static-vs-continuous's 96 requests",),
              must_not_say=("replay them all",)),
        _case(Case, "run --workload w.toml (num_requests 1) --requests 5 ('leave it out to replay them all')",
              "numbers", ["run", "--quiet", "--workload", str(workload), "--requests", "5"],
              must_say=("give at most 2, or leave --requests out for workload w's 1 request",),
              protected=[workload, trace]),
        _case(Case, "run --trace t.csv --requests 5 (a bare trace: leaving it out replays them all, as before)",
              "numbers", ["run", "--quiet", "--trace", str(trace), "--requests", "5"],
              must_say=("give at most 2, or leave --requests out to replay them all",)),
    ]


def _window_attach_cases(d: Path, Case) -> list:
    kept = d / "seventeenth-cli" / "attached.kvrec"
    argv = ["attach", "http://127.0.0.1:1", "--kv-events", "tcp://127.0.0.1:2", "--quit-after", "2"]
    said = "not attached: cannot reach http://127.0.0.1:1/version: connection refused"
    quiet = {"QT_LOGGING_RULES": "default.warning=false"}  # the offscreen plugin's notice, which no display prints
    return [
        _case(Case, "attach UNREACHABLE --quit-after 2 (the window never attached, exit 0)", "flags", argv,
              slow=True, env=quiet, must_say=(said,)),
        _case(Case, "attach UNREACHABLE --quit-after 2 --record r.kvrec (exit 0, no file, 'Nothing to record')",
              "files", [*argv, "--record", str(kept)], slow=True, env=quiet,
              must_say=(said, f"nothing recorded to {kept}"), must_not_say=("Nothing to record",)),
    ]
