"""Settings a real vLLM server refuses at start-up are said to be refused, wherever kvscope takes
them: `kvscope math` (which reports, and exits 0), `kvscope run` and the window (which refuse)."""

import json

from cli_helper import cli


def test_math_says_a_max_model_len_no_request_of_which_fits_and_the_json_says_it_would_not_start(capsys):
    rc, out, err = cli(capsys, "math", "--model", "llama-3.1-8b", "--hardware", "l4-24gb", "--max-model-len", "131072")
    assert rc == 0 and err == ""
    row = next(line for line in out.splitlines() if line.startswith("does not fit"))
    assert "vLLM would refuse to start" in row and "the longest max_model_len that fits is 30,128 tokens" in row
    rc, out, _ = cli(capsys, "math", "--json", "--model", "llama-3.1-8b", "--hardware", "l4-24gb",
                     "--max-model-len", "131072")
    plan = json.loads(out)
    assert plan["fits"] is False and "not one full-length request fits" in plan["does_not_fit"]
    assert plan["num_blocks"] > 0  # the blocks fit; a whole request does not


def test_math_on_settings_a_server_starts_with_has_no_such_row(capsys):
    rc, out, _ = cli(capsys, "math", "--model", "llama-3.1-8b", "--hardware", "l4-24gb", "--max-model-len", "8192")
    assert rc == 0 and "does not fit" not in out
    rc, out, _ = cli(capsys, "math", "--json", "--model", "llama-3.1-8b", "--hardware", "l4-24gb", "--max-model-len", "8192")
    assert json.loads(out)["fits"] is True and json.loads(out)["does_not_fit"] is None


def test_run_refuses_what_vllm_would_not_start_with_and_names_the_longest_length_that_fits(capsys):
    rc, out, err = cli(capsys, "run", "--quiet", "--model", "llama-3.1-8b", "--hardware", "l4-24gb", "--requests", "5")
    assert rc == 2 and out == ""
    assert "vLLM would refuse to start; the longest max_model_len that fits is 30,128 tokens" in err
    assert "give --max-model-len" in err
    rc, _, err = cli(capsys, "run", "--quiet", "--model", "llama-3.1-8b", "--hardware", "l4-24gb", "--requests", "5",
                     "--max-model-len", "26512")
    assert rc == 0, err
