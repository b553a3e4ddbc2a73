"""Flags that would change nothing, values read past what was typed, and outputs that name the
standard output: each is refused in one line, or read exactly as typed (the fourth hostile pass)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helper import cli

from kvscope.app.cli.main import one_line
from kvscope.app.lab.output_path import names_standard_output
from kvscope.app.lab.vllm.prediction import modelled_vllm_version
from kvscope.engine.config import DEFAULT_VLLM_VERSION, ConfigError, EngineArgs, parse_vllm_version

KVSCOPE = Path(sys.executable).with_name("kvscope")


@pytest.mark.parametrize("version", ["0.²", "¹.⁸", "0." + "9" * 5000, "0.12345"])
def test_a_vllm_version_in_other_digits_or_too_long_is_refused_by_its_field(version):
    with pytest.raises(ConfigError, match="vllm_version must look like 0.19"):
        parse_vllm_version(version)


def test_a_vllm_release_newer_than_kvscope_models_is_refused_and_a_server_of_one_is_planned_as_the_newest():
    with pytest.raises(ConfigError, match=f"up to {DEFAULT_VLLM_VERSION}"):
        EngineArgs(vllm_version="99.99")
    assert EngineArgs(vllm_version="0.6.4").vllm_version == "0.6.4"
    assert modelled_vllm_version("0.99") == DEFAULT_VLLM_VERSION and modelled_vllm_version("0.19") == "0.19"


def test_a_seed_is_read_exactly_not_through_a_float(capsys):
    rc, out, err = cli(capsys, "run", "--quiet", "--requests", "2", "--seed", "9007199254740993", "--json", "-")
    assert rc == 0, err
    assert '"seed": 9007199254740993' in out
    rc, _, err = cli(capsys, "run", "--quiet", "--requests", "2", "--seed", "9223372036854775807")
    assert rc == 0, err
    rc, _, err = cli(capsys, "math", "--block-size", "16.0000000000000001")
    assert rc == 2 and "not a whole number" in err


def test_a_token_budget_below_max_num_seqs_is_refused_as_vllm_does(capsys):
    rc, _, err = cli(capsys, "math", "--max-num-batched-tokens", "64", "--max-num-seqs", "256")
    assert rc == 2 and "max_num_batched_tokens (64) is smaller than max_num_seqs (256)" in err
    rc, _, err = cli(capsys, "math", "--max-num-batched-tokens", "256", "--max-num-seqs", "256")
    assert rc == 0, err


@pytest.mark.parametrize("argv, said", [
    (["math", "--params", "8e9", "--weights-bytes", "16e9"], "--params and --weights-bytes"),
    (["math", "--kv-cache-memory-bytes", "1e9", "--reserve-bytes", "1e9"], "give one of them"),
    (["math", "--model", "deepseek-v3", "--kv-heads", "4"], "multi-head latent attention"),
    (["run", "--backend", "real", "--model", "tiny-llama", "--weight-dtype", "int4"], "--weight-dtype"),
    (["bench", "scheduler", "--minutes", "5"], "--minutes goes with `kvscope bench soak`"),
    (["bench", "gui", "--requests", "3"], "--requests goes with"),
    (["bench", "cuda", "--device", "nonsense"], "--device is cpu or cuda"),
])
def test_a_flag_that_would_change_nothing_is_refused_in_one_line(capsys, argv, said):
    rc, out, err = cli(capsys, *argv)
    assert rc == 2 and out == "" and said in err
    assert len(err.strip().splitlines()) == 1 and "kvscope" in err and "error:" in err


def test_the_top_level_flag_is_not_read_from_an_abbreviation(capsys):
    rc, _, err = cli(capsys, "--self", "math")
    assert rc == 2 and "unrecognized arguments: --self" in err


def test_a_long_value_is_said_by_its_ends_and_length():
    value = "x" * 100_000
    said = one_line(f"argument --kv-cache-dtype: invalid choice: '{value}'")
    assert len(said) < 200 and "(100,002 characters)" in said


def test_another_name_of_the_standard_output_is_the_standard_output(tmp_path):
    out = tmp_path / "out.txt"
    code = ("import sys; from kvscope.app.lab.output_path import names_standard_output as n; "
            f"print(n('/dev/stdout'), n({str(out)!r}), n('/dev/null'), n({str(tmp_path / 'other')!r}))")
    with open(out, "w") as stdout:
        subprocess.run([sys.executable, "-c", code], stdout=stdout, check=True)
    assert out.read_text().split() == ["True", "True", "False", "False"]
    assert names_standard_output("-") and not names_standard_output(None)


def test_json_to_the_file_stdout_already_writes_goes_to_stdout_and_a_recording_there_is_refused(tmp_path):
    out = tmp_path / "out.txt"
    with open(out, "w") as stdout:
        done = subprocess.run([str(KVSCOPE), "run", "--quiet", "--requests", "2", "--json", str(out)],
                              stdout=stdout, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 0, done.stderr
    assert out.read_text().lstrip().startswith("{")  # the JSON, not replaced by a rename, the table on stderr
    with open(out, "w") as stdout:
        done = subprocess.run([str(KVSCOPE), "run", "--quiet", "--requests", "2", "--record", "/dev/stdout"],
                              stdout=stdout, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 2 and "a recording is written to a file, not to stdout" in done.stderr


@pytest.mark.parametrize("json_to, csv_to", [("/dev/stdout", "-"), ("-", "-"), ("-", "/dev/stdout")])
def test_two_outputs_onto_the_standard_output_are_refused_as_typed(json_to, csv_to):
    """Before: `--json /dev/stdout --csv -` was said as "--json - and --csv -"."""
    done = subprocess.run([str(KVSCOPE), "compare", "--scenario", "prefix-caching", "--json", json_to, "--csv", csv_to],
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (f"kvscope: error: --json {json_to} and --csv {csv_to} both name the standard "
                                   "output; give at most one of them, the others a file")


@pytest.mark.parametrize("argv", [["--help"], ["math", "--help"]])
def test_help_that_cannot_be_written_is_an_error(argv):
    with open("/dev/full", "w") as full:
        done = subprocess.run([str(KVSCOPE), *argv], stdout=full, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 2 and "No space left" in done.stderr and "Traceback" not in done.stderr


def test_a_closed_standard_output_is_said_and_an_ascii_one_gets_no_traceback():
    done = subprocess.run([str(KVSCOPE), "math"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          preexec_fn=lambda: os.close(1))
    assert done.returncode == 2 and "standard output is closed" in done.stderr
    done = subprocess.run([str(KVSCOPE), "run", "--quiet", "--requests", "2"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0 and "Traceback" not in done.stderr


def test_the_self_test_refuses_an_unknown_option_with_an_error_line():
    done = subprocess.run([str(KVSCOPE), "--self-test", "math"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.strip() == (
        "kvscope --self-test: error: unknown option(s) math; the only one is --startup")


def test_prompts_longer_than_max_model_len_are_rejected_without_their_tokens_being_made():
    import dataclasses
    import resource

    from kvscope.app.lab.presets import load_hardware, load_model, load_workload
    from kvscope.app.lab.workload import LengthDist, generate_requests
    from kvscope.engine import Engine

    spec = dataclasses.replace(load_workload("chat"), num_requests=200,
                               prompt_tokens=LengthDist("lognormal", median=4_194_304, sigma=0.5, min=1, max=4_194_304))
    engine = Engine(load_model("llama-3-8b"), load_hardware("h100-80gb"), EngineArgs())
    engine.add_workload(generate_requests(spec, engine.model.vocab_size, longest_request=engine.resolved.max_model_len))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    while engine.step() is not None:
        pass
    assert engine.metrics.rejected == 200  # 200 lists of ~4M ids would be ~30 GB
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024  # KiB: under 200 MB grown
    assert "exceed max_model_len" in engine.metrics.first_rejection


def test_requests_arriving_together_are_held_to_a_token_budget(capsys):
    rc, _, err = cli(capsys, "run", "--quiet", "--requests", "10000000", "--arrival-rate", "0")
    assert rc == 2 and "token ids in memory together" in err
    rc, _, err = cli(capsys, "run", "--quiet", "--requests", "20", "--arrival-rate", "0")
    assert rc == 0, err
