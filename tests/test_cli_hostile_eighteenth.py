"""The command line against bad input, eighteenth round (scripts/hostile_inputs_eighteenth_cli.py): an output
named for a compressor (`run --json r.json.gz`, `export --perfetto t.json.gz`, `compare --csv c.csv.xz`) written
uncompressed under that name, `--csv o.tsv` written with commas, and a run stopped early (Ctrl+C, SIGTERM, an engine
error) whose new --record file kept its steps without a word ("kvscope: interrupted" alone), counts of one said
in the plural ("1 partial prompt chunks", "1 request tracks"), and `kvscope --version` (unrecognized; once taken,
printed on stderr with standard output closed). Each refusal test fails on the code before its fix; each has a
consistent neighbour that is still taken."""

from __future__ import annotations

import pytest

from cli_helper import cli
from test_cli_hostile_fifth import refused

from kvscope.app.lab.output_path import check_output_path
from kvscope.engine import Engine
from kvscope.engine.config import ConfigError

# -- 1. an output named for a compressor, or for tab-separated values ---------------------------------------------


@pytest.mark.parametrize("flag, name, kind", [("--json", "r.json.gz", "gzip"), ("--perfetto", "t.json.GZ", "gzip"),
                                              ("--csv", "c.csv.xz", "xz"), ("--json", "r.zst", "zstd"),
                                              ("--csv", "c.csv.bz2", "bzip2"), ("--json", "r.json.zip", "zip")])
def test_an_output_named_for_a_compressor_is_refused(tmp_path, flag, name, kind):
    with pytest.raises(ConfigError, match="uncompressed, and the name's .* says a " + kind + "-compressed file"):
        check_output_path(flag, str(tmp_path / name))
    check_output_path(flag, str(tmp_path / name.rsplit(".", 1)[0]))  # the name without it: taken
    check_output_path("export to", str(tmp_path / name))  # the window's own export is not a flag's (its format list)


def test_a_recording_named_gz_says_it_is_compressed_inside(tmp_path):
    with pytest.raises(ConfigError) as said:
        check_output_path("--record", str(tmp_path / "r.kvrec.gz"))
    assert "its steps compressed inside it" in str(said.value) and "afterwards" not in str(said.value)


def test_csv_named_tsv_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"--csv .*o\.tsv: writes CSV, and the name's \.tsv says tab-separated"):
        check_output_path("--csv", str(tmp_path / "o.tsv"))
    check_output_path("--csv", str(tmp_path / "o.csv"))


@pytest.mark.parametrize("argv", [["run", "--quiet", "--requests", "1", "--json", "{d}/r.json.gz"],
                                  ["compare", "--scenario", "static-vs-continuous", "--csv", "{d}/c.csv.xz"],
                                  ["run", "--quiet", "--requests", "1", "--record", "{d}/r.kvrec.gz"]])
def test_the_commands_refuse_a_compressed_name_before_running(capsys, tmp_path, argv):
    rc, out, err = cli(capsys, *[a.format(d=tmp_path) for a in argv])
    refused(rc, err, "-compressed file; give the name without .")
    assert out == "" and not any(tmp_path.iterdir())


# -- 2. a run stopped early says what its new recording keeps -------------------------------------------------------


@pytest.fixture
def stops_after(monkeypatch):
    """Engine.step raising `exc` after `n` steps."""

    def arrange(n: int, exc: BaseException):
        original, calls = Engine.step, {"n": 0}

        def step(self):
            calls["n"] += 1
            if calls["n"] > n:
                raise exc
            return original(self)

        monkeypatch.setattr(Engine, "step", step)

    return arrange


def test_an_interrupted_run_says_its_new_recording_keeps_the_steps_so_far(capsys, tmp_path, stops_after):
    from kvscope.app.lab.recording import Recording

    target = tmp_path / "run.kvrec"
    stops_after(5, KeyboardInterrupt())
    rc, _, err = cli(capsys, "run", "--quiet", "--requests", 3, "--record", target)
    lines = err.strip().splitlines()
    assert rc == 130 and lines[-1] == "kvscope: interrupted", err
    assert lines[-2] == (f"kvscope: the run stopped early: {target} keeps the 5 steps run before it (its note says "
                         f"the run stopped early): `kvscope gui --replay {target}` replays them")
    assert Recording.open(target).num_steps == 5  # closed whole, as it says


def test_a_run_failing_mid_run_says_its_new_recording_in_its_one_line(capsys, tmp_path, stops_after):
    target = tmp_path / "run.kvrec"
    stops_after(1, ConfigError("the device went away"))
    rc, _, err = cli(capsys, "run", "--quiet", "--requests", 3, "--record", target)
    refused(rc, err, "the device went away (the run stopped; ", f"{target} keeps the 1 step run before it",
            "replays it")
    assert target.is_file()


def test_an_interrupted_run_into_dev_null_or_over_a_file_says_no_kept_steps(capsys, tmp_path, stops_after):
    stops_after(2, KeyboardInterrupt())
    rc, _, err = cli(capsys, "run", "--quiet", "--requests", 3, "--record", "/dev/null")
    assert rc == 130 and err.strip().splitlines() == ["kvscope: interrupted"], err
    old = tmp_path / "old.kvrec"
    old.write_bytes(b"an older recording")
    rc, _, err = cli(capsys, "run", "--quiet", "--requests", 3, "--record", old)
    assert rc == 130 and f"{old} was left as it was" in err and "keeps the" not in err, err
    assert old.read_bytes() == b"an older recording"


# -- 3. counts of one said in the singular --------------------------------------------------------------------------


def test_verify_says_one_partial_prompt_chunk_in_the_singular():
    from types import SimpleNamespace

    from kvscope.app.cli.verify import _parity_table

    result = SimpleNamespace(weights="fp32", kv_cache_dtype="fp32", exact=True, identical_sequences=1, sequences=1,
                             token_agreement=1.0, top1_agreement=1.0, max_logit_diff=0.0, preemptions=1,
                             prefix_hit_tokens=1, chunked_prefill_chunks=1)
    said = _parity_table(result)
    assert "1 preemption, 1 prefix-cache token reused, 1 partial prompt chunk" in said, said  # "1 ... chunks"
    said = _parity_table(SimpleNamespace(**{**vars(result), "preemptions": 0, "chunked_prefill_chunks": 2}))
    assert "0 preemptions, 1 prefix-cache token reused, 2 partial prompt chunks" in said, said


def test_export_of_a_one_request_run_says_one_request_track(capsys, tmp_path):
    recording, trace = tmp_path / "r.kvrec", tmp_path / "t.json"
    rc, _, err = cli(capsys, "run", "--quiet", "--requests", 1, "--record", recording)
    assert rc == 0, err
    rc, out, err = cli(capsys, "export", recording, "--perfetto", trace)
    assert rc == 0, err
    assert ", 1 request track)" in out and "request tracks" not in out, out


# -- 4. kvscope --version -----------------------------------------------------------------------------------------


def test_version_is_printed_and_a_commands_version_names_kvscope_itself(capsys):
    rc, out, err = cli(capsys, "--version")
    assert rc == 0 and out.startswith("kvscope ") and len(out.strip().splitlines()) == 1 and err == "", (out, err)
    rc, out, err = cli(capsys, "math", "--version")  # the command's own flags have no --version: said whose it is
    refused(rc, err, "--version (a flag of `kvscope` itself")
    rc, out, err = cli(capsys, "--json", "math")  # the list of kvscope's own flags says --version too
    refused(rc, err, "kvscope itself takes only --help, --version and --self-test")


def test_version_with_standard_output_closed_is_said_as_any_command(capsys, monkeypatch):
    """`kvscope --version >&-`: argparse fell back to stderr, so the version was printed there, then the error."""
    import sys

    monkeypatch.setattr(sys, "stdout", None)
    rc, _, err = cli(capsys, "--version")
    assert rc == 2 and err == "kvscope: error: the standard output is closed; give the command somewhere to write\n"
