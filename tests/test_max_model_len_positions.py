"""A max_model_len past the model's positions: vLLM refuses to start with it (unless told to allow
it), and kvscope said nothing: llama-2-7b at 100,000 tokens read as 1.16 concurrent requests.
config.json's rope_scaling stretches the positions as vLLM derives them."""


import pytest

from cli_helper import cli
from kvscope.app.lab.models.config_json import model_from_hf_config
from kvscope.app.lab.presets import load_hardware, load_model
from kvscope.engine import EngineArgs
from kvscope.engine.config import ConfigError, resolve_engine_args

QWEN_LIKE = {"num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "hidden_size": 3584,
             "intermediate_size": 18944, "vocab_size": 152064, "max_position_embeddings": 32768}


def resolved(model, max_model_len=None):
    return resolve_engine_args(EngineArgs(max_model_len=max_model_len), model, load_hardware("h100-80gb"))


def test_a_max_model_len_past_the_positions_is_refused_with_the_longest_one_allowed():
    model = load_model("llama-2-7b")
    assert resolved(model, 4096).max_model_len == 4096
    with pytest.raises(ConfigError, match=r"max_model_len 4,097 tokens is longer than the 4,096 positions of "
                                          r"llama-2-7b .*vLLM refuses to start.*give at most 4,096"):
        resolved(model, 4097)


def test_math_and_run_refuse_it_in_one_line(capsys):
    for command in ("math", "run"):
        rc, out, err = cli(capsys, command, "--model", "llama-2-7b", "--max-model-len", 100000)
        assert rc == 2, (command, out, err)
        assert "4,096 positions" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("scaling, longest", [
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 131072),
    ({"type": "linear", "factor": 2}, 65536),  # the older spelling of the type
    ({"rope_type": "dynamic", "factor": 2.0}, 65536),
    ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}, 32768),  # in the positions
    ({"rope_type": "longrope", "factor": 4.0}, 32768),
    ({"rope_type": "yarn", "factor": 1.0}, 32768),
    # odd values ("4", true, nan, -2, an original of "x", a table given as "yarn") were read as no stretch
    # without a word: they are refused now, naming the field (tests/test_files_hostile_thirteenth.py)
])
def test_rope_scaling_in_config_json_stretches_the_positions_as_vllm_derives_them(scaling, longest):
    model = model_from_hf_config({**QWEN_LIKE, "rope_scaling": scaling}, "qwen-like")
    assert model.longest_context == longest
    assert resolved(model).max_model_len == longest  # vLLM's default max_model_len is the derived one
    assert resolved(model, longest).max_model_len == longest
    with pytest.raises(ConfigError, match="positions of qwen-like"):
        resolved(model, longest + 1)


@pytest.mark.parametrize("factor", [1e300, 1e308])  # 1e308 x 32,768 overflows a float to inf
def test_a_huge_factor_is_held_to_kvscopes_ceiling_not_a_traceback(factor):
    model = model_from_hf_config({**QWEN_LIKE, "rope_scaling": {"rope_type": "yarn", "factor": factor}}, "huge")
    assert model.longest_context == 1 << 30


def test_a_shape_given_by_flags_has_the_positions_it_is_asked_for(capsys):
    """The lessons' 70B full-MHA model at 8K has no config.json: nothing to refuse against."""
    rc, out, err = cli(capsys, "math", "--layers", 80, "--kv-heads", 64, "--head-dim", 128, "--weights-bytes", 140e9,
                       "--memory-bytes", 80e9, "--tensor-parallel-size", 8, "--gpu-memory-utilization", 1,
                       "--max-model-len", 8192, "--kv-cache-dtype", "fp16", "--accounting", "lesson")
    assert rc == 0, err
    assert "23.28" in out


def test_a_config_json_without_positions_refuses_no_length_as_vllm_does():
    model = model_from_hf_config({k: v for k, v in QWEN_LIKE.items() if k != "max_position_embeddings"}, "bare")
    assert not model.max_position_embeddings_given
    assert resolved(model).max_model_len == 2048  # vLLM's default (it warns), LlamaConfig's too; it had been 4,096
    assert resolved(model, 100_000).max_model_len == 100_000


@pytest.mark.parametrize("fields, positions", [
    ({"seq_length": 2048}, 2048),  # ChatGLM's name: the model was given 4,096 positions it does not have
    ({"n_positions": 1024}, 1024),  # GPT-2's
    ({"max_position_embeddings": 32768, "seq_length": 8192}, 8192),  # vLLM takes the smallest given
    ({"model_max_length": 131072, "max_position_embeddings": 8192}, 8192),
    ({}, 2048),  # none given: vLLM's default, and a max_model_len past it is not refused
])
def test_the_models_length_is_the_smallest_of_the_fields_vllm_reads(fields, positions):
    base = {k: v for k, v in QWEN_LIKE.items() if k != "max_position_embeddings"}
    model = model_from_hf_config({**base, **fields}, "m")
    assert model.max_position_embeddings == positions
    assert model.max_position_embeddings_given == bool(fields)
    if fields:
        with pytest.raises(ConfigError, match=f"{positions:,} positions"):
            resolved(model, positions + 1)


def test_a_length_field_that_is_not_a_whole_number_is_refused_by_its_name():
    base = {k: v for k, v in QWEN_LIKE.items() if k != "max_position_embeddings"}
    with pytest.raises(ConfigError, match="seq_length"):
        model_from_hf_config({**base, "seq_length": "8k"}, "m")
