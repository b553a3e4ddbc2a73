"""A newcomer's ordinary command-line mistakes get one line that names the command and the fix."""

from cli_helper import cli


def test_a_misspelled_flag_is_named_by_its_command_with_the_flag_meant(capsys):
    rc, out, err = cli(capsys, "math", "--gpu-mem-util", "0.9")
    assert rc == 2 and out == ""
    assert err.strip().splitlines() == [
        "kvscope math: error: unrecognized arguments: --gpu-mem-util (did you mean --gpu-memory-utilization?) 0.9 "
        "(`kvscope math --help` says what it takes)"]
    rc, _, err = cli(capsys, "run", "--memory-gb", "80")
    assert rc == 2 and "kvscope run: error:" in err and "(did you mean --memory-gib?)" in err


def test_a_flag_nothing_resembles_is_named_without_a_guess(capsys):
    rc, _, err = cli(capsys, "math", "--zzzzzz")
    assert rc == 2 and err.strip() == ("kvscope math: error: unrecognized arguments: --zzzzzz "
                                       "(`kvscope math --help` says what it takes)")


def test_a_bad_value_is_one_line_not_the_usage_block_first(capsys):
    rc, _, err = cli(capsys, "math", "--max-model-len", "8k")
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("kvscope math: error: argument --max-model-len")


def test_math_takes_no_flag_that_would_change_nothing_in_it(capsys):
    for flag, value in (("--scheduling", "static"), ("--allocation", "contiguous")):
        rc, _, err = cli(capsys, "math", flag, value)
        assert rc == 2 and f"unrecognized arguments: {flag}" in err
    # what does change the memory math stays: the token budget sizes vLLM's profiled activations
    rc, small, _ = cli(capsys, "math", "--max-num-batched-tokens", "512")
    rc2, large, _ = cli(capsys, "math", "--max-num-batched-tokens", "16384")
    assert rc == rc2 == 0 and small != large


def test_bench_part_goes_with_the_window_benchmark_only(capsys):
    rc, _, err = cli(capsys, "bench", "scheduler", "--part", "fast")
    assert rc == 2 and "--part goes with `kvscope bench gui`" in err
    rc, _, err = cli(capsys, "bench", "gui", "--part", "fast", "--rounds", "5")
    assert rc == 2 and "--rounds goes with" in err
