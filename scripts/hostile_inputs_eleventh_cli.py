"""The eleventh hostile pass's cases (the command line), for scripts/hostile_inputs.py: flags that are each
fine and together change nothing, taken without a word. Where the KV pool is a set budget (a CPU target:
--hardware this-machine, or the real backend on a CPU; or --kv-cache-memory-bytes) a typed
--gpu-memory-utilization or --reserve-bytes, and `math`'s --enforce-eager, --max-num-seqs,
--max-num-batched-tokens and --no-enable-chunked-prefill, printed the very table they printed without it
("gpu_memory_utilization not applied (as in vLLM, a set KV budget replaces it)" though no budget was typed).
--requests past a trace's rows ran the rows there were and said "requests completed 2" (`compare --scenario
static-vs-continuous --requests 100000` ran 19,366 for minutes). The real backend ran --model-path's 30
layers under --layers 2, ran random weights under the trained model's name after "loading ... trained
weights" for --head-dim 32, and took --allow-pickle for a preset it builds as safetensors, and refused a
--kv-cache-memory-bytes under one block (or one request) only after `loading ...`; `verify --passages 2` on
a model with no tokenizer scored nothing and, under --json -, said nothing; `calibrate --threads 1000` on 2
cores timed (and stored) 1,000 threads taking turns. `attach --replay` on the --kv-events port (or on DP
rank 1's, port + 1) was dialed at a publisher. The real backend's --hardware refusal sent a CPU user to
--gpu-memory-utilization, which does nothing there; `math --hardware 8x-h100-80gb --model qwen2.5-7b` was
refused as "tensor_parallel_size 8 cannot split num_attention_heads 28", a flag never typed, with no word on
the split that works; and `kvscope presets` listed a user's llama-3-8b.toml, never read (the built-in's
name), as the built-in. Every case's `expect` is the right behaviour.

Environment variables tried without a finding: CUDA_VISIBLE_DEVICES=abc (said as no CUDA device),
KVSCOPE_ENTRY_TIME=nonsense (read by --self-test only), OMP_NUM_THREADS=0 (torch's default taken)."""

from __future__ import annotations

from pathlib import Path

RUN = ["run", "--quiet", "--requests", "2"]
REAL_CPU = ["run", "--quiet", "--requests", "2", "--backend", "real", "--model", "tiny-llama", "--device", "cpu"]
ATTACH = ["attach", "http://127.0.0.1:1", "--duration", "1"]
TRACE = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:47.6805900,100,10\n"


def eleventh_cli_cases(d: Path, Case, write) -> list:
    t = d / "eleventh-cli"
    t.mkdir(parents=True, exist_ok=True)
    return (_budget_cases(Case) + _trace_cases(t, Case, write) + _real_cases(t, Case, write) + _attach_cases(Case)
            + _preset_cases(t, Case, write))


def _budget_cases(Case) -> list:
    """A share of the memory, and what vLLM subtracts from it, where the pool is a set budget."""
    set_budget = ("the KV pool is a set budget",)
    subtracted = ("changes nothing here", "nothing is subtracted from it")
    return [
        Case("math --hardware this-machine --gpu-memory-utilization 0.5 ('a set KV budget replaces it': none typed)",
             "flags", ["math", "--hardware", "this-machine", "--gpu-memory-utilization", "0.5"],
             must_say=("--gpu-memory-utilization 0.5: on a CPU target (--hardware this-machine)", *set_budget,
                       "--kv-cache-memory-bytes", "--memory-gib")),
        Case("run --hardware this-machine --reserve-bytes 1e9 (held back from nothing)", "flags",
             RUN + ["--hardware", "this-machine", "--reserve-bytes", "1e9"],
             must_say=("--reserve-bytes 1e+09: on a CPU target", *set_budget)),
        Case("math --hardware this-machine --memory-gib 30 --gpu-memory-utilization 0.5 (a share of a given memory)",
             "flags", ["math", "--hardware", "this-machine", "--memory-gib", "30", "--gpu-memory-utilization", "0.5"],
             expect="ok", must_say=("x gpu_memory_utilization 0.5",)),
        Case("math --hardware 8x-h100-80gb --model qwen2.5-7b ('tensor_parallel_size 8', never typed)", "flags",
             ["math", "--hardware", "8x-h100-80gb", "--model", "qwen2.5-7b"],
             must_say=("--hardware 8x-h100-80gb has 8 devices", "give --tensor-parallel-size 4")),
        Case("math --kv-cache-memory-bytes 4e9 --max-num-seqs 8 (the same table as without it)", "flags",
             ["math", "--kv-cache-memory-bytes", "4e9", "--max-num-seqs", "8"],
             must_say=("--max-num-seqs 8 changes nothing here (--kv-cache-memory-bytes sets the KV pool",
                       "the activation peak")),
        Case("math --hardware this-machine --enforce-eager (no CUDA graphs to leave out)", "flags",
             ["math", "--hardware", "this-machine", "--enforce-eager"], must_say=("--enforce-eager", *subtracted)),
        Case("run --kv-cache-memory-bytes 2e9 --no-enforce-eager (nothing subtracted for graphs)", "flags",
             RUN + ["--kv-cache-memory-bytes", "2e9", "--no-enforce-eager"],
             must_say=("--no-enforce-eager", *subtracted, "the simulated clock does not read it")),
        Case("math --hardware h100-80gb --enforce-eager --max-num-seqs 8 (what vLLM subtracts: read)", "flags",
             ["math", "--hardware", "h100-80gb", "--enforce-eager", "--max-num-seqs", "8"], expect="ok",
             must_say=("activation",)),
    ]


def _trace_cases(t: Path, Case, write) -> list:
    """--requests past the rows of the trace that is replayed."""
    trace = write(t / "two.csv", TRACE)
    return [
        Case("run --trace (2 rows) --requests 5 ('requests completed 2', the 5 dropped)", "numbers",
             RUN[:2] + ["--trace", str(trace), "--requests", "5"], protected=[trace],
             must_say=("--requests 5: trace", "holds 2 requests", "give at most 2")),
        Case("run --trace (2 rows) --requests 2 (every row)", "numbers", RUN[:2] + ["--trace", str(trace), "--requests", "2"],
             expect="ok", must_say=("requests completed               2",)),
        Case("run --workload azure-conv --requests 100000 (19,366 rows run, for seconds)", "numbers",
             RUN[:2] + ["--workload", "azure-conv", "--requests", "100000"],
             must_say=("--requests 100,000: workload azure-conv's trace", "holds 19,366 requests")),
        Case("compare --scenario static-vs-continuous --requests 100000 (minutes of the trace's 19,366)", "numbers",
             ["compare", "--scenario", "static-vs-continuous", "--quiet", "--requests", "100000"],
             must_say=("scenario static-vs-continuous's trace", "give at most 19,366")),
    ]


def _real_cases(t: Path, Case, write) -> list:
    """The real backend on a CPU, and the weights it loads as they are."""
    folder = t / "model"
    write(folder / "config.json", '{"model_type": "llama", "num_hidden_layers": 30}\n')
    before = ("loading",)
    return [
        Case("run real on a CPU --gpu-memory-utilization 0.5 (the 1 GiB budget, 'not applied')", "flags",
             REAL_CPU + ["--gpu-memory-utilization", "0.5"], slow=True,
             must_say=("--gpu-memory-utilization 0.5: on this machine's CPU", "set budget"), must_not_say=before),
        Case("run real on a CPU --enforce-eager (no CUDA graphs there)", "flags", REAL_CPU + ["--enforce-eager"],
             slow=True, must_say=("--enforce-eager: the real backend on this machine's CPU captures no CUDA graphs",),
             must_not_say=before),
        Case("run real --hardware l4-24gb (sent a CPU user to --gpu-memory-utilization)", "flags",
             REAL_CPU + ["--hardware", "l4-24gb"], must_say=("--kv-cache-memory-bytes; on CUDA also --gpu-memory-utilization",)),
        Case("run real --model-path M --layers 2 (M's 30 layers ran)", "flags",
             RUN + ["--backend", "real", "--model-path", str(folder), "--layers", "2"], protected=[folder / "config.json"],
             must_say=("--layers 2: --model-path", "is loaded as it is"), must_not_say=before),
        Case("run real --head-dim 32 on the trained model (random weights under its name)", "flags",
             RUN + ["--backend", "real", "--model", "smollm2-135m-instruct", "--head-dim", "32"],
             must_say=("--head-dim 32: smollm2-135m-instruct's trained weights", "--model tiny-llama"),
             must_not_say=before),
        Case("run real --model tiny-llama --layers 2 (random weights of the edited shape)", "flags",
             REAL_CPU + ["--layers", "2"], expect="ok", slow=True, must_say=("tiny-llama: 2 layers",)),
        Case("run real --model tiny-llama --allow-pickle (nothing pickled to read)", "flags",
             REAL_CPU + ["--allow-pickle"], must_say=("--allow-pickle", "nothing pickled is read"), must_not_say=before),
        Case("run real on a CPU --kv-cache-memory-bytes 1000 (under one block: refused after loading)", "numbers",
             REAL_CPU + ["--kv-cache-memory-bytes", "1000"], slow=True,
             must_say=("--kv-cache-memory-bytes 1000: no room for a KV cache", "give at least 98,304 bytes"),
             must_not_say=before),
        Case("run real on a CPU --kv-cache-memory-bytes 200000 (2 blocks of 256 a request: after loading)", "numbers",
             REAL_CPU + ["--kv-cache-memory-bytes", "200000"], slow=True,
             must_say=("needs 256 blocks but the pool holds 2", "give --max-model-len"), must_not_say=before),
        Case("run real on a CPU --kv-cache-memory-bytes 200000 --max-model-len 32 (2 blocks: fits)", "numbers",
             REAL_CPU + ["--kv-cache-memory-bytes", "200000", "--max-model-len", "32"], expect="ok", slow=True,
             must_say=("2  (32 token slots)",)),
        Case("calibrate --threads 1024 (turns on a few cores, fitted and stored as this machine)", "numbers",
             ["calibrate", "--threads", "1024", "--scale", "0.05", "--model", "tiny-llama", "--device", "cpu",
              "--no-save"], slow=True, must_say=("--threads 1,024: this machine runs", "give at most"),
             must_not_say=before),
        Case("verify --model tiny-llama --passages 2 --json - (no tokenizer: nothing scored, nothing said)", "flags",
             ["verify", "--model", "tiny-llama", "--passages", "2", "--device", "cpu", "--json", "-"], slow=True,
             must_say=("--passages 2: tiny-llama has no tokenizer",), must_not_say=before),
    ]


def _attach_cases(Case) -> list:
    """A replay socket on a port the publisher (of some DP rank) holds."""
    return [
        Case("attach --kv-events E --replay E (one endpoint for both sockets)", "flags",
             ATTACH + ["--kv-events", "tcp://127.0.0.1:5557", "--replay", "tcp://127.0.0.1:5557"],
             must_say=("name the same endpoint",), must_not_say=("cannot reach",)),
        Case("attach --kv-events :5557 --replay :5558 --data-parallel-size 2 (DP rank 1 publishes on 5558)", "flags",
             ATTACH + ["--kv-events", "tcp://localhost:5557", "--replay", "tcp://127.0.0.1:5558",
                       "--data-parallel-size", "2"],
             must_say=("port 5558, where DP rank 1 publishes its events", "2 or more away"),
             must_not_say=("cannot reach",)),
        Case("attach --kv-listen tcp://*:5557 --replay tcp://127.0.0.1:5557 (kvscope's own socket)", "flags",
             ATTACH + ["--kv-listen", "tcp://*:5557", "--replay", "tcp://127.0.0.1:5557"],
             must_say=("--kv-listen tcp://*:5557 name the same endpoint",), must_not_say=("cannot reach",)),
        Case("attach --kv-events :5557 --replay :5559 --data-parallel-size 2 (apart: the server is what fails)", "flags",
             ATTACH + ["--kv-events", "tcp://127.0.0.1:5557", "--replay", "tcp://127.0.0.1:5559",
                       "--data-parallel-size", "2"], must_say=("cannot reach",)),
    ]


def _preset_cases(t: Path, Case, write) -> list:
    """A user's preset file with a built-in's name: never read, and listed as if it were the built-in."""
    config = t / "config"
    mine = write(config / "presets" / "models" / "llama-3-8b.toml",
                 'description = "my edited copy"\nnum_hidden_layers = 2\nnum_attention_heads = 32\n'
                 'num_key_value_heads = 8\nhead_dim = 128\nhidden_size = 4096\nintermediate_size = 14336\n'
                 'vocab_size = 128256\n')
    return [
        Case("presets models with a user file named llama-3-8b.toml (listed once, as the built-in)", "env",
             ["presets", "models"], env={"KVSCOPE_CONFIG_DIR": str(config)}, expect="ok", protected=[mine],
             must_say=("llama-3-8b.toml is not read: a built-in preset has its name",)),
    ]
