"""The eighteenth hostile pass over the files kvscope reads: real config.json files of checkpoint formats not met
before. A multimodal wrapper's language model kept as llm_config (InternVL 3, Ovis 2, Nemotron Nano VL) or
language_config (DeepSeek-VL2); a Qwen-VL text_config of its class's defaults; Aria's experts (moe_topk, its class's
two shared experts); Hunyuan-A13B's MoE fields given one value per layer; Molmo's fused MLP width, Fuyu's ungated
one; EmbeddingGemma's use_bidirectional_attention; Step3's attention; torchao's and FP-Quant's quantisation; and
UTF-32, or UTF-16 without a byte-order mark, where kvscope reads UTF-8 (config.json, TOML, a trace CSV). Each test
failed before its fix; the consistent neighbours beside them pass. scripts/hostile_inputs_eighteenth_files.py runs
them through the command line."""

from __future__ import annotations

import re

import pytest

from kvscope.app.lab.bounded_reads import load_json, wide_unicode
from kvscope.app.lab.models.config_json import model_from_hf_config
from kvscope.app.lab.presets import read_toml
from kvscope.app.lab.workload import read_trace
from kvscope.engine.config import ConfigError
from kvscope.engine.memory_math import num_parameters

from test_files_hostile_thirteenth import BASE, refused

# real configs, cut to the fields kvscope reads (each as its Hugging Face release writes it)
QWEN2_7B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
            "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
            "vocab_size": 151674, "max_position_embeddings": 32768, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16"}
INTERNVL3_8B = {"architectures": ["InternVLChatModel"], "model_type": "internvl_chat", "llm_config": QWEN2_7B,
                "vision_config": {"model_type": "intern_vit_6b", "hidden_size": 1024, "num_hidden_layers": 24},
                "torch_dtype": "bfloat16"}
DEEPSEEK_VL2 = {"architectures": ["DeepseekVLV2ForCausalLM"], "model_type": "deepseek_vl_v2", "language_config": {
    "model_type": "deepseek_v2", "hidden_size": 2560, "intermediate_size": 12288, "moe_intermediate_size": 1536,
    "n_routed_experts": 72, "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1,
    "num_hidden_layers": 30, "num_attention_heads": 32, "num_key_value_heads": 32, "kv_lora_rank": 512,
    "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
    "max_position_embeddings": 4096}, "vision_config": {}}
ARIA = {"architectures": ["AriaForConditionalGeneration"], "model_type": "aria", "text_config": {
    "model_type": "aria_text", "hidden_size": 2560, "intermediate_size": 1664, "moe_num_experts": 64, "moe_topk": 6,
    "num_attention_heads": 20, "num_key_value_heads": 20, "num_hidden_layers": 28, "vocab_size": 100352,
    "max_position_embeddings": 65536, "tie_word_embeddings": False}}
HUNYUAN_A13B = {"architectures": ["HunYuanMoEV1ForCausalLM"], "model_type": "hunyuan_v1_moe", "hidden_size": 4096,
                "intermediate_size": 3072, "moe_intermediate_size": [3072] * 32, "num_experts": 64,
                "moe_topk": [8] * 32, "num_shared_expert": [1] * 32, "use_mixed_mlp_moe": True,
                "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                "vocab_size": 128167, "max_position_embeddings": 32768, "tie_word_embeddings": True, "use_cla": False}
SMALL_HUNYUAN = {"model_type": "hunyuan_v1_moe", "num_experts": 8, "moe_topk": [2] * 4,
                 "moe_intermediate_size": [64] * 4, "num_shared_expert": [1] * 4}


def read(cfg: dict):
    return model_from_hf_config(cfg, "m", label="config c.json")


def billions(model) -> float:
    return round(num_parameters(model) / 1e9, 2)


# -- a wrapper's language model under llm_config / language_config ------------------------------------------------

def test_internvl_llm_config_is_its_language_model():
    """was: "missing field(s) num_hidden_layers, num_attention_heads, hidden_size, vocab_size"."""
    model = read(INTERNVL3_8B)
    assert (model.num_hidden_layers, model.num_attention_heads, model.num_key_value_heads, model.head_dim) == \
        (28, 28, 4, 128)
    assert billions(model) == 7.61  # Qwen2.5-7B, InternVL3-8B's language model


def test_deepseek_vl2_language_config_is_its_language_model():
    model = read(DEEPSEEK_VL2)
    assert (model.num_hidden_layers, model.kv_lora_rank, model.num_experts) == (30, 512, 72)
    assert billions(model) == 26.96  # of DeepSeek-VL2's 27.5 B with its vision encoder


@pytest.mark.parametrize("fields, said", [
    ({"llm_config": [4]}, "llm_config must be a table (the language model's config.json fields), got [4]"),
    ({"language_config": "qwen2"}, "language_config must be a table"),
    # the wrapped model's own refusals, named by where they were read
    ({"llm_config": {**BASE, "model_type": "nemotron_h", "hybrid_override_pattern": "M*M*"}},
     "config c.json: llm_config: hybrid_override_pattern ('M*M*') lays out Mamba layers (Nemotron-H)"),
    ({"llm_config": {**BASE, "num_hidden_layers": None}},
     "config c.json: llm_config: missing field(s) num_hidden_layers"),
])
def test_wrapped_language_config_refusals(fields, said):
    assert said in refused({"model_type": "internvl_chat", "num_hidden_layers": None, **fields})


def test_llm_config_beside_a_top_level_shape_of_another():
    """Read as a text_config beside the top level: two shapes are refused (vLLM reads the wrapped one)."""
    assert "num_hidden_layers (4) and text_config.num_hidden_layers (2) give the text model two shapes" in \
        refused({"llm_config": {**BASE, "num_hidden_layers": 2}})
    assert read({**BASE, "llm_config": BASE}).num_hidden_layers == 4


def test_text_config_is_read_before_llm_config():
    model = read({"model_type": "x", "text_config": BASE, "llm_config": {**BASE, "num_hidden_layers": 2}})
    assert model.num_hidden_layers == 4


def test_qwen_vl_text_config_of_its_class_defaults():
    """transformers 4.52+ writes Qwen2.5-VL's text model as a text_config of what differs from its class: a 72B's
    gives no shape (was "missing field(s) num_hidden_layers, num_attention_heads, hidden_size, vocab_size")."""
    model = read({"model_type": "qwen2_5_vl", "text_config": {"model_type": "qwen2_5_vl_text"}})
    assert (model.num_hidden_layers, model.num_attention_heads, model.num_key_value_heads, model.hidden_size) == \
        (80, 64, 8, 8192)
    assert billions(model) == 72.71  # Qwen2.5-VL-72B's language model
    assert read({"model_type": "qwen3_vl", "text_config": {"num_hidden_layers": 36, "intermediate_size": 12288,
                                                           "num_key_value_heads": 8}}).head_dim == 128


# -- Aria's and Hunyuan's experts -----------------------------------------------------------------------------------

def test_aria_experts_and_shared_experts():
    """was: "a mixture of experts needs ...; missing num_experts_per_tok" of a file that gives moe_topk 6."""
    model = read(ARIA)
    assert (model.num_experts, model.num_experts_per_tok, model.moe_intermediate_size) == (64, 6, 1664)
    assert model.shared_expert_intermediate_size == 2 * 1664  # AriaTextConfig's moe_num_shared_experts, 2
    assert billions(model) == 24.87  # of Aria's 25.3 B with its vision encoder
    one = read({**ARIA, "text_config": {**ARIA["text_config"], "moe_num_shared_experts": 1}})
    assert one.shared_expert_intermediate_size == 1664


def test_hunyuan_a13b_per_layer_lists():
    """was: "moe_intermediate_size must be a whole number from 0 to 4,194,304, got [3072, ...]"."""
    model = read(HUNYUAN_A13B)
    assert (model.num_experts, model.num_experts_per_tok, model.moe_intermediate_size) == (64, 8, 3072)
    assert model.shared_expert_intermediate_size == 3072  # num_shared_expert 1 x intermediate_size
    assert billions(model) == 80.39  # Hunyuan-A13B: 80 B, 13 B active
    scalar = {**HUNYUAN_A13B, "moe_intermediate_size": 3072, "moe_topk": 8, "num_shared_expert": 1}
    assert billions(read(scalar)) == 80.39  # single numbers: was "missing num_experts_per_tok"


def test_hunyuan_shared_mlp_follows_num_shared_expert_and_use_mixed_mlp_moe():
    assert read({**BASE, **SMALL_HUNYUAN, "num_shared_expert": [2] * 4}).shared_expert_intermediate_size == 512
    assert read({**BASE, **SMALL_HUNYUAN, "use_mixed_mlp_moe": False}).shared_expert_intermediate_size == 0


def test_hunyuan_of_one_expert_is_dense():
    """Hunyuan-7B's num_experts 1, moe_topk 1: was "missing num_experts_per_tok", then "1 experts (1 per token)"."""
    model = read({**BASE, "model_type": "hunyuan_v1_dense", "num_experts": 1, "moe_topk": 1,
                  "use_mixed_mlp_moe": False})
    assert not model.num_experts and model.shared_expert_intermediate_size == 0
    assert num_parameters(model) == num_parameters(read(BASE))


@pytest.mark.parametrize("fields, said", [
    ({"moe_topk": [2, 2, 4, 2]}, "moe_topk gives the layers different values ([2, 2, 4, 2]); kvscope sizes one "
                                 "moe_topk for every layer: give one number, or a list of one value repeated"),
    ({"moe_intermediate_size": [64] * 3}, "moe_intermediate_size gives 3 values, one per layer, but "
                                          "num_hidden_layers is 4"),
    ({"num_shared_expert": []}, "num_shared_expert gives 0 values, one per layer, but num_hidden_layers is 4"),
    ({"moe_topk": ["2"] * 4}, "moe_topk must be a whole number"),
    ({"moe_topk": [True] * 4}, "moe_topk gives the layers different values"),
    ({"moe_topk": [0] * 4}, "num_experts_per_tok"),
])
def test_per_layer_list_refusals(fields, said):
    assert said in refused({**SMALL_HUNYUAN, **fields})


def test_lists_of_other_models_are_not_read_per_layer():
    """ERNIE 4.5 VL's moe_intermediate_size [1536, 512] is its text and vision experts', not one per layer."""
    said = refused({"model_type": "ernie4_5_moe_vl", "moe_num_experts": 8, "moe_k": 2,
                    "moe_intermediate_size": [64, 32, 64, 32]})
    assert "moe_intermediate_size must be a whole number" in said and "per layer" not in said


def test_molmo_mlp_is_half_its_intermediate_size():
    """was: 13.32 B parameters for Molmo-7B-D's 7.6 B language model (Qwen2-7B's MLP of 18,944), no word said."""
    molmo = {**QWEN2_7B, "model_type": "molmo", "intermediate_size": 37888, "vocab_size": 152064}
    model = read(molmo)
    assert model.intermediate_size == 18944
    assert billions(model) == 7.62


def test_fuyu_mlp_is_ungated():
    """was: 11.81 B parameters for Fuyu-8B's 9.4 B (its Persimmon MLP sized as a gated one)."""
    fuyu = {"model_type": "fuyu", "hidden_size": 4096, "intermediate_size": 16384, "num_hidden_layers": 36,
            "num_attention_heads": 64, "vocab_size": 262144, "max_position_embeddings": 16384,
            "tie_word_embeddings": False}
    assert not read(fuyu).gated_mlp
    assert billions(read(fuyu)) == 9.40
    assert billions(read({**fuyu, "text_config": {**fuyu, "model_type": "persimmon"}})) == 9.40


def test_step3_attention_is_refused_by_name():
    """Step3's text model: one KV head (num_attention_groups) for 64 query heads, a low-rank query (share_q_dim);
    was "missing num_experts_per_tok" of a file that gives moe_top_k, its KV heads about to be read as 64."""
    said = refused({"model_type": "step3_text", "num_key_value_heads": None, "num_attention_groups": 1,
                    "share_q_dim": 64, "moe_num_experts": 8, "moe_top_k": 2})
    assert "share_q_dim (64) gives Step3's attention a low-rank query and num_attention_groups KV heads, which " \
           "kvscope does not size" in said
    assert read({**BASE, "share_q_dim": None}).num_key_value_heads == 2  # null: not there


# -- torchao and FP-Quant -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("quant, kind", [
    ({"quant_method": "torchao", "quant_type": {"default": {"_type": "Int4WeightOnlyConfig", "_data": {}}}}, "int4"),
    ({"quant_method": "torchao", "quant_type": {"default": {"_type": "Int8DynamicActivationInt4WeightConfig"}}},
     "int4"),  # the weights' kind, not the activations'
    ({"quant_method": "torchao", "quant_type": {"default": {"_type": "Int8WeightOnlyConfig"}}}, "int8"),
    ({"quant_method": "torchao", "quant_type": {"default": {"_type": "Float8WeightOnlyConfig"}}}, "fp8"),
    ({"quant_method": "torchao", "quant_type": "int4_weight_only", "quant_type_kwargs": {"group_size": 128}}, "int4"),
    ({"quant_method": "fp_quant", "forward_dtype": "mxfp4"}, "int4"),
    ({"quant_method": "fp_quant", "forward_dtype": "nvfp4"}, "int4"),
])
def test_torchao_and_fp_quant_weights(quant, kind):
    """was: "quant_method 'torchao' is not one kvscope sizes" (vLLM serves both)."""
    assert read({**BASE, "quantization_config": quant}).weight_dtype == kind


@pytest.mark.parametrize("quant, said", [
    ({"quant_method": "torchao", "quant_type": {"default": {"_type": "UIntXWeightOnlyConfig"}}},
     "torchao with quant_type {'default': {'_type': 'UIntXWeightOnlyConfig'}}: kvscope sizes its Int4, Int8 and "
     "Float8 weights"),
    ({"quant_method": "torchao", "quant_type": ["int4"]}, "torchao with quant_type ['int4']"),
    ({"quant_method": "torchao"}, "torchao with quant_type not given"),
    ({"quant_method": "fp_quant", "forward_dtype": 4}, "fp_quant with forward_dtype 4: kvscope sizes its mxfp4 and "
                                                        "nvfp4 weights"),
])
def test_torchao_and_fp_quant_refusals(quant, said):
    assert said in refused({"quantization_config": quant})


def test_minicpm_ties_its_embeddings_by_default():
    """MiniCPM-2B's config.json leaves tie_word_embeddings out, and openbmb's MiniCPMConfig ties them: was 3.01 B
    parameters for its 2.72 B (a second 122,753 x 2,304 matrix)."""
    minicpm = {"model_type": "minicpm", "hidden_size": 2304, "intermediate_size": 5760, "num_hidden_layers": 40,
               "num_attention_heads": 36, "vocab_size": 122753, "max_position_embeddings": 2048}
    assert read(minicpm).tie_word_embeddings and billions(read(minicpm)) == 2.72
    assert not read({**minicpm, "tie_word_embeddings": False}).tie_word_embeddings  # MiniCPM4's says so
    jais = {"model_type": "jais", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_inner": 128, "vocab_size": 100}
    assert read(jais).tie_word_embeddings  # JAISConfig keeps PretrainedConfig's default, as GPT-2's


# -- EmbeddingGemma -------------------------------------------------------------------------------------------------

def test_bidirectional_attention_is_an_encoder():
    """was: sized as a decoder's KV cache (vLLM runs EmbeddingGemma as an encoder that keeps none)."""
    said = refused({"model_type": "gemma3_text", "use_bidirectional_attention": True})
    assert "use_bidirectional_attention is true: an encoder (an embedding model such as EmbeddingGemma), which " \
           "keeps no KV cache" in said
    assert "use_bidirectional_attention must be true or false, got 'yes'" in \
        refused({"use_bidirectional_attention": "yes"})
    assert read({**BASE, "use_bidirectional_attention": False}).num_hidden_layers == 4


# -- UTF-16 and UTF-32 where UTF-8 is read --------------------------------------------------------------------------

NO_BOM = "UTF-16 or UTF-32 text without a byte-order mark (NUL bytes between its characters)"


@pytest.mark.parametrize("encoding, said", [
    ("utf-32", "UTF-32 text"), ("utf-32-le", NO_BOM), ("utf-32-be", NO_BOM), ("utf-16-le", NO_BOM),
    ("utf-16-be", NO_BOM), ("utf-16", "UTF-16 text"),
])
def test_wide_unicode_json(encoding, said):
    with pytest.raises(ConfigError) as caught:
        load_json('{"num_hidden_layers": 4}'.encode(encoding), "config c.json")
    assert str(caught.value) == f"config c.json: {said}; JSON is read as UTF-8: save it as UTF-8"


def test_wide_unicode_is_not_said_of_binary_data_or_utf8():
    assert wide_unicode(bytes(16)) is None  # NUL bytes alone: binary data
    assert wide_unicode(b'{"a": 1}') is None
    assert wide_unicode(b"\x00\x01\x00\x02\x00\x03\x00\x04") is None  # not ASCII letters between the NULs
    assert wide_unicode('{"a": 1}') is None


def test_wide_unicode_toml_and_trace(tmp_path):
    toml = tmp_path / "w.toml"
    toml.write_bytes('name = "w"\n'.encode("utf-16-le"))
    said = f"workload file {toml}: {NO_BOM}; TOML is UTF-8: save it as UTF-8"
    with pytest.raises(ConfigError, match=re.escape(said)):
        read_toml(toml, f"workload file {toml}", "workload")
    toml.write_bytes('name = "w"\n'.encode("utf-32"))
    with pytest.raises(ConfigError, match="UTF-32 text; TOML is UTF-8"):
        read_toml(toml, f"workload file {toml}", "workload")
    trace = tmp_path / "t.csv"
    rows = "TIMESTAMP,ContextTokens,GeneratedTokens\n0,10,5\n"
    trace.write_bytes(rows.encode("utf-16-le"))
    with pytest.raises(ConfigError, match=re.escape(f"trace {trace}: {NO_BOM}; save it as CSV in UTF-8")):
        read_trace(trace)
    trace.write_bytes(rows.encode("utf-32"))
    with pytest.raises(ConfigError, match="UTF-32 text; save it as CSV"):
        read_trace(trace)
    trace.write_bytes(bytes(64))  # still binary data
    with pytest.raises(ConfigError, match="binary data \\(a NUL byte\\)"):
        read_trace(trace)


def test_trace_after_a_spreadsheets_sep_line(tmp_path):
    """Excel's and LibreOffice's "sep=," first line: was "line 1: no arrival column" of a trace that has one."""
    trace = tmp_path / "t.csv"
    trace.write_bytes(b"\xef\xbb\xbfsep=,\r\nTIMESTAMP,ContextTokens,GeneratedTokens\r\n0,10,5\r\n2,12,6\r\n")
    rows = read_trace(trace)
    assert [(r.arrival_time_s, r.prompt_tokens, r.output_tokens) for r in rows] == [(0, 10, 5), (2, 12, 6)]
    trace.write_bytes(b"sep=,\n")
    with pytest.raises(ConfigError, match="only a sep=, line"):
        read_trace(trace)
    trace.write_bytes(b"sep=,\nsep=,\nTIMESTAMP,ContextTokens,GeneratedTokens\n0,10,5\n")  # once, first
    with pytest.raises(ConfigError, match="line 2: no arrival column"):
        read_trace(trace)
