"""The fifth hostile pass's cases (the command line again), for scripts/hostile_inputs.py: control
characters echoed to the terminal, outputs that are the process's own standard streams, outputs
onto files a command reads that the earlier passes did not name (a model folder's weights, the
presets `attach`, `verify` and `calibrate` read), text that is not UTF-8 sent to the network,
scenario paths that are folders or pipes, fractional byte counts, and standard output on a full
disk under `--self-test`. Every case's `expect` is the right behaviour.

Not expressible with Case (tested in tests/test_cli_hostile_fifth.py instead): standard error
closed (`kvscope run 2>&-` was a traceback, exit 1), an output naming standard input
(`kvscope run --json /dev/stdin < notes.txt` replaced notes.txt: the runner gives no stdin), a
standard error whose reader has gone (`kvscope math --model nope 2>&1 | head -c 5` was exit 1),
and a tiny `ulimit -v` (a traceback from numpy's import, before main() ran)."""

from __future__ import annotations

import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEAD = "http://127.0.0.1:1"  # nothing listens: every attach case is refused before connecting
EVENTS = ["--kv-events", "tcp://127.0.0.1:9"]
NOT_UTF8 = "\udcff"  # the byte 0xFF in argv, as Python decodes it (os.fsencode gives the byte back)


def fifth_cli_cases(d: Path, Case, write) -> list:
    t = d / "fifth-cli"
    t.mkdir(parents=True, exist_ok=True)
    return (_control_character_cases(t, Case, write) + _standard_stream_cases(t, Case)
            + _read_file_cases(t, Case, write) + _attach_cases(Case) + _scenario_path_cases(t, Case)
            + _byte_count_cases(Case) + _flag_spelling_cases(Case) + _self_test_cases(Case) + _display_cases(Case))


def _control_character_cases(t: Path, Case, write) -> list:
    """A path or name is echoed in the refusal: ESC and BEL sent raw retitle a terminal, ESC[2J
    clears it, a right-to-left override reorders the line. They are shown escaped (\\x1b)."""
    config_file = write(t / "\x1b[2Jconfig-dir", "a file, not a folder\n")
    raw = ("\x1b", "\x07", "\u202e")
    user = t / "escape-config"
    write(user / "presets" / "models" / "\x1b[2Jevil.toml", (ROOT / "presets" / "models" / "tiny-llama.toml").read_text())
    trace = write(t / "\x1b]0;pwned\x07 trace.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,100,10\n1,100,10\n")
    return [
        # listed and reported on stdout: the names are shown, escaped
        Case("presets listing a user preset whose file name holds ESC [ 2 J", "env", ["presets", "models"],
             env={"KVSCOPE_CONFIG_DIR": str(user)}, expect="ok", must_say=("\\x1b[2Jevil",), must_not_say=raw),
        Case("models listing a user preset whose file name holds ESC [ 2 J", "env", ["models"],
             env={"KVSCOPE_CONFIG_DIR": str(user)}, expect="ok", must_not_say=raw),
        Case("run --trace a file whose name holds ESC ] 0 ; ... BEL (the summary's title)", "files",
             ["run", "--quiet", "--trace", str(trace)], expect="ok", must_not_say=raw),
        Case("run --trace a name holding ESC ] 0 ; ... BEL (a terminal title)", "files",
             ["run", "--quiet", "--trace", str(t / "\x1b]0;pwned\x07.csv")], must_say=("\\x1b",), must_not_say=raw),
        Case("math --config a name holding ESC [ 2 J (clear the screen)", "files",
             ["math", "--config", str(t / "\x1b[2J.json")], must_say=("\\x1b",), must_not_say=raw),
        Case("export a name holding a right-to-left override", "files", ["export", str(t / "run\u202eperc.kvrec")],
             must_say=("\\u202e",), must_not_say=raw),
        Case("gui --replay a name holding ESC", "files", ["gui", "--replay", str(t / "\x1b[31m.kvrec"), "--quit-after", "1"],
             must_not_say=raw),
        Case("presets with KVSCOPE_CONFIG_DIR a file whose name holds ESC", "env", ["presets"],
             env={"KVSCOPE_CONFIG_DIR": str(config_file)}, must_say=("KVSCOPE_CONFIG_DIR",), must_not_say=raw),
    ]


def _standard_stream_cases(t: Path, Case) -> list:
    """Another name of standard error (the runner's pipe): a recording or a PNG went into the
    command's messages, and the report said to replay `/dev/stderr`."""
    from hostile_inputs_fourth_cli import _recording

    run = ["run", "--quiet", "--requests", "2"]
    recording = _recording(t / "r.kvrec")
    return [
        Case("run --record /dev/stderr", "files", run + ["--record", "/dev/stderr"], must_say=("standard error",)),
        Case("run --json /dev/stderr", "files", run + ["--json", "/dev/stderr"], must_say=("standard error",)),
        Case("run --record /proc/self/fd/2", "files", run + ["--record", "/proc/self/fd/2"],
             must_say=("standard error",)),
        Case("compare --csv /dev/stderr", "files", ["compare", "--quiet", "--scenario", "cache-ceiling", "--csv",
                                                     "/dev/stderr"], must_say=("standard error",)),
        Case("gui --screenshot /dev/stderr", "files",
             ["gui", "--backend", "simulated", "--quit-after", "0", "--screenshot", "/dev/stderr"],
             must_say=("standard error",)),
        Case("export --perfetto /dev/fd/2", "files", ["export", str(recording), "--perfetto", "/dev/fd/2"],
             must_say=("standard error",)),
        Case("attach --record /dev/stderr", "files", ["attach", DEAD, *EVENTS, "--duration", "1", "--record",
                                                      "/dev/stderr"], must_say=("standard error",)),
        Case("verify --json /dev/stderr (before any model loads)", "files", ["verify", "--json", "/dev/stderr"],
             must_say=("standard error",)),
        # a file only: the benchmark's tables and calibrate's table take standard output
        Case("bench scheduler --json - (tables and JSON mixed)", "files", ["bench", "scheduler", "--json", "-"],
             must_say=("not to stdout",)),
        Case("bench scheduler --json /dev/stdout", "files", ["bench", "scheduler", "--json", "/dev/stdout"],
             must_say=("not to stdout",)),
        Case("calibrate --json - (before any model loads)", "files", ["calibrate", "--json", "-"],
             must_say=("not to stdout",)),
    ]


def _model_folder(t: Path, write) -> Path:
    """A model folder as the real backend reads it; no case gets as far as loading it."""
    folder = t / "model"
    write(folder / "config.json", json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                              "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64,
                                              "num_key_value_heads": 2, "intermediate_size": 128,
                                              "vocab_size": 256, "max_position_embeddings": 512}))
    write(folder / "model.safetensors", b"weights that must survive\n")
    write(folder / "tokenizer.json", '{"a tokenizer": "that must survive"}\n')
    return folder


def _read_file_cases(t: Path, Case, write) -> list:
    """Outputs onto a file the command reads: the earlier passes protected a --model-path folder's
    config.json and run's presets; the weights, the tokenizer, and the presets of attach, verify
    and calibrate were written over (attach writes --json even when it is refused)."""
    folder = _model_folder(t, write)
    weights, tokenizer, config = folder / "model.safetensors", folder / "tokenizer.json", folder / "config.json"
    user = t / "config"
    preset = write(user / "presets" / "models" / "mine.toml",
                   (ROOT / "presets" / "models" / "tiny-llama.toml").read_text().replace(
                       'name = "tiny-llama"', 'name = "mine"'))
    hardware = write(user / "presets" / "hardware" / "my-gpu.toml",
                     (ROOT / "presets" / "hardware" / "l4-24gb.toml").read_text().replace(
                         'name = "l4-24gb"', 'name = "my-gpu"'))
    built_in = ROOT / "presets" / "models" / "tiny-llama.toml"
    real = ["run", "--quiet", "--backend", "real", "--model-path", str(folder), "--requests", "2"]
    attach = ["attach", DEAD, *EVENTS, "--duration", "1"]
    env = {"KVSCOPE_CONFIG_DIR": str(user)}
    return [
        Case("run --model-path M --json M/model.safetensors (its weights)", "files",
             real + ["--json", str(weights)], protected=[weights], must_say=("--model-path folder",)),
        Case("run --model-path M --record M/tokenizer.json", "files", real + ["--record", str(tokenizer)],
             protected=[tokenizer], must_say=("--model-path folder",)),
        Case("verify --model-path M --json M/model.safetensors", "files",
             ["verify", "--model-path", str(folder), "--json", str(weights)], protected=[weights]),
        Case("verify --json the model preset it reads", "files",
             ["verify", "--model", "tiny-llama", "--json", str(built_in)], protected=[built_in],
             must_say=("model preset",)),
        Case("calibrate --model-path M --json M/model.safetensors", "files",
             ["calibrate", "--model-path", str(folder), "--json", str(weights)], protected=[weights]),
        Case("calibrate --json the model preset it reads", "files",
             ["calibrate", "--model", "tiny-llama", "--json", str(built_in)], protected=[built_in]),
        Case("attach --json the --model preset it reads", "files",
             attach + ["--model", "mine", "--json", str(preset)], env=env, protected=[preset],
             must_say=("model preset",)),
        Case("attach --json the --hardware preset it reads", "files",
             attach + ["--hardware", "my-gpu", "--json", str(hardware)], env=env, protected=[hardware],
             must_say=("hardware preset",)),
        Case("attach --record the --model-path folder's config.json", "files",
             attach + ["--model-path", str(folder), "--record", str(config)], protected=[config]),
    ]


def _attach_cases(Case) -> list:
    """Addresses and the topic are sent to ZMQ as UTF-8: a byte that is none (argv in Latin-1) was a
    traceback (--replay) or a hang closing the subscriber (--kv-events, --kv-listen, --topic)."""
    attach = ["attach", DEAD, "--duration", "0.5"]
    return [
        Case("attach --topic holding the byte 0xFF", "flags", attach + [*EVENTS, "--topic", "kv" + NOT_UTF8],
             must_say=("UTF-8",)),
        Case("attach --kv-events host holding the byte 0xFF", "flags",
             attach + ["--kv-events", f"tcp://{NOT_UTF8}:5557"], must_say=("UTF-8",)),
        Case("attach --kv-listen host holding the byte 0xFF", "flags",
             attach + ["--kv-listen", f"tcp://{NOT_UTF8}:5557"], must_say=("UTF-8",)),
        Case("attach --replay host holding the byte 0xFF", "flags",
             attach + [*EVENTS, "--replay", f"tcp://{NOT_UTF8}:5558"], must_say=("UTF-8",)),
        Case("attach --kv-events inproc:// (this process only)", "flags", attach + ["--kv-events", "inproc://kv"],
             must_say=("inproc",)),
        Case("attach --topic of 5,000 bytes (no message can match)", "flags", attach + [*EVENTS, "--topic", "t" * 5000],
             must_say=("--topic",)),
    ]


def _scenario_path_cases(t: Path, Case) -> list:
    """A scenario given as a path that is a folder, a pipe or a device was "no such file"."""
    pipe = t / "scenario-pipe"
    if not pipe.exists():
        os.mkfifo(pipe)
    folder = t / "scenarios.toml"
    folder.mkdir(exist_ok=True)
    return [
        Case("compare --scenario a folder", "files", ["compare", "--quiet", "--scenario", str(t)],
             must_say=("is a folder",)),
        Case("compare --scenario a folder named .toml", "files", ["compare", "--quiet", "--scenario", str(folder)],
             must_say=("is a folder",)),
        Case("compare --scenario a named pipe", "files", ["compare", "--quiet", "--scenario", str(pipe)],
             must_say=("not a regular file",)),
        Case("compare --scenario /dev/null", "files", ["compare", "--quiet", "--scenario", "/dev/null"],
             must_say=("not a regular file",)),
        Case("gui --scenario a folder", "files", ["gui", "--scenario", str(t), "--quit-after", "1"],
             must_say=("is a folder",)),
        Case("bench compare --scenario a named pipe (before measuring)", "files",
             ["bench", "compare", "--scenario", str(pipe)], must_say=("not a regular file",)),
    ]


def _byte_count_cases(Case) -> list:
    """A size in bytes (or a count of parameters) with a fraction was cut to a whole one silently:
    --weights-bytes 1.5 sized 1 byte of weights, --reserve-bytes 0.5 held back nothing."""
    return [
        Case("math --weights-bytes 1.5", "numbers", ["math", "--weights-bytes", "1.5"], must_say=("whole",)),
        Case("math --memory-bytes 80e9 + 0.5", "numbers", ["math", "--memory-bytes", "80000000000.5"],
             must_say=("whole",)),
        Case("math --reserve-bytes 0.5", "numbers", ["math", "--reserve-bytes", "0.5"], must_say=("whole",)),
        Case("run --kv-cache-memory-bytes 1048576.5", "numbers",
             ["run", "--quiet", "--requests", "2", "--kv-cache-memory-bytes", "1048576.5"], must_say=("whole",)),
        Case("math --params 1.5", "numbers", ["math", "--params", "1.5"], must_say=("whole",)),
        # a whole number written with a decimal point and an exponent is still one
        Case("math --weights-bytes 16.5e9 (a whole number)", "numbers", ["math", "--weights-bytes", "16.5e9"],
             expect="ok", must_say=("--weights-bytes",)),
    ]


def _flag_spelling_cases(Case) -> list:
    """A flag pasted from a web page or a word processor: its "--" became an en or em dash."""
    return [
        Case("run \u2014requests 3 (an em dash for --)", "flags", ["run", "--quiet", "\u2014requests", "3"],
             must_say=("--requests",)),
        Case("math \u2013model llama-2-7b (an en dash for --)", "flags", ["math", "\u2013model", "llama-2-7b"],
             must_say=("--model",)),
    ]


def _self_test_cases(Case) -> list:
    """--self-test printed its lines outside the commands' error handling: a full disk was a
    traceback (its first line fails at once; `--self-test --startup` fails after its window, whose
    Qt plugin adds lines of its own to stderr, so it is tested in tests/test_cli_hostile_fifth.py)."""
    return [
        Case("--self-test with stdout on a full disk", "files", ["--self-test"], stdout="/dev/full",
             must_say=("No space left",)),
    ]


def _display_cases(Case) -> list:
    """The window with no display Qt can use: Qt aborts with a core dump (exit 134), after "could
    not load the Qt platform plugin" and a list of plugins. `kvscope gui` checked only the X11
    plugin's libraries; `attach`'s window checked nothing."""
    gui = ["gui", "--backend", "simulated", "--quit-after", "1"]
    return [
        Case("gui with QT_QPA_PLATFORM a platform Qt does not have", "env", gui,
             env={"QT_QPA_PLATFORM": "nonsense"}, must_say=("QT_QPA_PLATFORM",)),
        Case("gui with QT_QPA_PLATFORM=xcb and no X server at DISPLAY", "env", gui,
             env={"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":87"}, must_say=("DISPLAY",)),
        Case("gui on a machine without a display (DISPLAY and QT_QPA_PLATFORM unset)", "env", gui,
             env={"QT_QPA_PLATFORM": "", "DISPLAY": "", "WAYLAND_DISPLAY": ""}, must_say=("offscreen",)),
        Case("attach's window with QT_QPA_PLATFORM a platform Qt does not have", "env",
             ["attach", DEAD, *EVENTS, "--quit-after", "1"], env={"QT_QPA_PLATFORM": "nonsense"},
             must_say=("QT_QPA_PLATFORM",)),
        # a fallback list and a plugin's arguments are Qt's own syntax: accepted
        Case("gui with QT_QPA_PLATFORM=nonsense;offscreen (a fallback)", "env", gui,
             env={"QT_QPA_PLATFORM": "nonsense;offscreen"}, expect="ok"),
    ]
