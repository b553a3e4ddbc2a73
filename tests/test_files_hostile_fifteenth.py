"""The fifteenth hostile pass over the files kvscope reads: config.json's older field names (GPT-2, GPT-J and
StarCoder's n_layer / n_head / n_embd, Bloom's n_embed, MPT and DBRX's n_layers / n_heads / d_model, the
RefinedWeb Falcons', ChatGLM's num_layers / padded_vocab_size) and the KV head count as vLLM takes it
(multi_query, Falcon's num_kv_heads, n_head_kv, attn_config.kv_n_heads, multi_query_group_num); ERNIE 4.5's
expert fields, Qwen (1)'s MLP, RecurrentGemma's block_types, state-space models, T5 without is_encoder_decoder,
XLNet, an LM head tied by its model type's default; an empty or a gzip-compressed JSON file. Each refusal test
failed before its fix; the consistent neighbours beside them pass.
scripts/hostile_inputs_fifteenth_files.py runs them through the command line."""

from __future__ import annotations

import gzip
import json

import pytest

from kvscope.app.lab.models.config_json import load_hf_config, model_from_hf_config
from kvscope.app.lab.workload import read_trace
from kvscope.engine.config import ConfigError
from kvscope.engine.memory_math import num_parameters

from test_files_hostile_thirteenth import BASE, refused

# real configs, cut to the fields kvscope reads (each as its Hugging Face release writes it)
GPT2 = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_inner": None, "n_layer": 12, "n_positions": 1024,
        "vocab_size": 50257}
STARCODER = {"model_type": "gpt_bigcode", "multi_query": True, "n_embd": 6144, "n_head": 48, "n_inner": 24576,
             "n_layer": 40, "n_positions": 8192, "vocab_size": 49152}
BLOOM_560M = {"model_type": "bloom", "n_embed": 1024, "n_layer": 24, "num_attention_heads": 16, "seq_length": 2048,
              "vocab_size": 250880}
MPT_7B = {"model_type": "mpt", "attn_config": {"alibi": True, "attn_type": "multihead_attention"}, "d_model": 4096,
          "expansion_ratio": 4, "max_seq_len": 2048, "n_heads": 32, "n_layers": 32, "vocab_size": 50432}
FALCON_7B = {"model_type": "falcon", "hidden_size": 4544, "multi_query": True, "new_decoder_architecture": False,
             "num_attention_heads": 71, "num_hidden_layers": 32, "vocab_size": 65024}
FALCON_40B = {"model_type": "falcon", "hidden_size": 8192, "new_decoder_architecture": True,
              "num_attention_heads": 128, "num_hidden_layers": 60, "num_kv_heads": 8, "vocab_size": 65024}
RW_40B = {"model_type": "RefinedWeb", "hidden_size": 8192, "n_head": 128, "n_head_kv": 8, "n_layer": 60,
          "vocab_size": 65024}
RW_7B = {"model_type": "RefinedWebModel", "hidden_size": 4544, "multi_query": True, "n_head": 71, "n_layer": 32,
         "vocab_size": 65024}
CHATGLM3 = {"model_type": "chatglm", "ffn_hidden_size": 13696, "hidden_size": 4096, "kv_channels": 128,
            "multi_query_attention": True, "multi_query_group_num": 2, "num_attention_heads": 32, "num_layers": 28,
            "padded_vocab_size": 65024, "seq_length": 8192}
DBRX = {"model_type": "dbrx", "attn_config": {"clip_qkv": 8, "kv_n_heads": 8}, "d_model": 6144,
        "ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 4}, "max_seq_len": 32768,
        "n_heads": 48, "n_layers": 40, "vocab_size": 100352}
ERNIE_MOE = {"model_type": "ernie4_5_moe", "hidden_size": 2560, "intermediate_size": 12288,
             "max_position_embeddings": 131072, "num_attention_heads": 20, "num_key_value_heads": 4,
             "num_hidden_layers": 28, "vocab_size": 103424, "tie_word_embeddings": True, "moe_num_experts": 64,
             "moe_num_shared_experts": 2, "moe_layer_start_index": 1, "moe_intermediate_size": 1536, "moe_k": 6,
             "moe_layer_interval": 1, "head_dim": 128}
GEMMA2_2B = {"model_type": "gemma2", "head_dim": 256, "hidden_size": 2304, "intermediate_size": 9216,
             "max_position_embeddings": 8192, "num_attention_heads": 8, "num_hidden_layers": 26,
             "num_key_value_heads": 4, "sliding_window": 4096, "vocab_size": 256000}


def shape(cfg: dict) -> tuple:
    m = model_from_hf_config(cfg, "m")
    return (m.num_hidden_layers, m.num_attention_heads, m.num_key_value_heads, m.head_dim, m.hidden_size,
            m.intermediate_size, m.vocab_size, m.max_position_embeddings)


# -- older field names and KV heads -------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg, expected", [
    # each was "missing field(s) num_hidden_layers, num_attention_heads, hidden_size" (or some of them)
    (GPT2, (12, 12, 12, 64, 768, 3072, 50257, 1024)),
    (STARCODER, (40, 48, 1, 128, 6144, 24576, 49152, 8192)),  # multi_query: 1 KV head, not 48
    (BLOOM_560M, (24, 16, 16, 64, 1024, 4096, 250880, 2048)),
    (MPT_7B, (32, 32, 32, 128, 4096, 16384, 50432, 2048)),
    (RW_7B, (32, 71, 1, 64, 4544, 18176, 65024, 2048)),  # no length field: vLLM's default 2,048
    (RW_40B, (60, 128, 8, 64, 8192, 32768, 65024, 2048)),
    (CHATGLM3, (28, 32, 2, 128, 4096, 13696, 65024, 8192)),
    ({"model_type": "exaone", "num_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
      "hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 102400, "max_position_embeddings": 4096},
     (32, 32, 8, 128, 4096, 14336, 102400, 4096)),
])
def test_a_config_json_of_older_field_names_is_read_as_transformers_reads_it(cfg, expected):
    assert shape(cfg) == expected


@pytest.mark.parametrize("cfg, kv", [
    (FALCON_7B, 1),  # was 71: multi_query dropped, the KV cache 71x too big
    (FALCON_40B, 8),  # was 128: num_kv_heads was never read
    ({**FALCON_40B, "multi_query": True}, 8),  # the new decoder ignores multi_query, as vLLM does
    ({**BASE, "model_type": "gpt_bigcode", "num_key_value_heads": None}, 1),  # GPTBigCode's default: multi-query
    ({**BASE, "model_type": "gpt_bigcode", "multi_query": False, "num_key_value_heads": None}, 4),
    ({**BASE, "model_type": "mpt", "attn_config": {"kv_n_heads": 1}}, 1),  # MPT's GQA: num_key_value_heads aside
    ({**BASE, "num_key_value_heads": None, "multi_query_group_num": 2}, 2),
])
def test_kv_heads_are_counted_as_vllm_counts_them(cfg, kv):
    assert model_from_hf_config(cfg, "m").num_key_value_heads == kv


def test_dbrx_is_read_with_its_experts_and_kv_heads():
    """DBRX was "missing field(s) ...": read now as 16 experts of 10,752, 4 a token, 8 KV heads."""
    m = model_from_hf_config(DBRX, "dbrx")
    assert (m.num_experts, m.num_experts_per_tok, m.moe_intermediate_size, m.num_key_value_heads) == (16, 4, 10752, 8)
    assert 125e9 < num_parameters(m) < 140e9  # DBRX is 132 B


@pytest.mark.parametrize("fields, said", [
    # the standard name was taken, the older dropped without a word
    ({"n_layer": 8}, "num_hidden_layers (4) and n_layer (8) are two names of one field (num_hidden_layers)"),
    ({"d_model": 256}, "hidden_size (128) and d_model (256) are two names of one field"),
    ({"num_kv_heads": 1}, "num_kv_heads (1) and num_key_value_heads (2) give different numbers of KV heads"),
    ({"n_head_kv": 4}, "n_head_kv (4) and num_key_value_heads (2) give different numbers of KV heads"),
    ({"n_layer": "4"}, "n_layer must be a whole number"),
    ({"multi_query": "yes"}, "multi_query must be true or false"),
    ({"model_type": "mpt", "attn_config": {"kv_n_heads": "2"}}, "attn_config.kv_n_heads must be a whole number"),
])
def test_two_names_of_one_field_that_disagree_are_refused(fields, said):
    assert said in refused(fields)


def test_two_names_of_one_field_that_agree_are_read():
    assert shape({**BASE, "n_layer": 4, "n_embd": 128, "num_kv_heads": 2})[:3] == (4, 4, 2)


# -- layouts, experts and model kinds -----------------------------------------------------------------------------

def test_ernie_moe_is_read_with_its_experts():
    """ERNIE-4.5-21B-A3B's moe_num_experts, moe_k, ...: sized as a dense model of 3.5 B parameters."""
    m = model_from_hf_config(ERNIE_MOE, "ernie")
    assert (m.num_experts, m.num_experts_per_tok, m.num_dense_layers) == (64, 6, 1)
    assert 21e9 < num_parameters(m) < 22.5e9 and 3e9 < num_parameters(m, active=True) < 3.6e9
    tail = model_from_hf_config({**ERNIE_MOE, "moe_layer_end_index": 25}, "e")  # layers 26, 27 dense too
    assert tail.num_dense_layers == 3
    with pytest.raises(ConfigError, match="leave no layer of the 28 for the experts"):
        model_from_hf_config({**ERNIE_MOE, "moe_layer_start_index": 28}, "e")


def test_qwen_1s_mlp_is_half_its_intermediate_size():
    """Qwen-7B (model_type qwen) was sized at 16 B parameters: its MLP is intermediate_size / 2 wide in vLLM."""
    qwen = {"model_type": "qwen", "hidden_size": 4096, "intermediate_size": 22016, "kv_channels": 128,
            "num_attention_heads": 32, "num_hidden_layers": 32, "seq_length": 8192,
            "max_position_embeddings": 32768, "vocab_size": 151936}
    m = model_from_hf_config(qwen, "q")
    assert m.intermediate_size == 11008 and 7.5e9 < num_parameters(m) < 8e9 and m.max_position_embeddings == 8192
    assert model_from_hf_config({**qwen, "model_type": "qwen2"}, "q").intermediate_size == 22016  # the neighbour


LLAMA4_TEXT = {"model_type": "llama4_text", "attention_chunk_size": 8192, "head_dim": 128, "hidden_size": 5120,
               "intermediate_size": 8192, "intermediate_size_mlp": 16384, "max_position_embeddings": 1048576,
               "num_attention_heads": 40, "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 128,
               "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "vocab_size": 202048}


def test_llama_4s_interleaved_experts_and_shared_expert():
    """Llama 4 Maverick was sized at 778 B parameters (128 experts on all 48 layers, no shared expert) for its
    400 B: every second layer holds the experts, the others a dense MLP of intermediate_size_mlp."""
    m = model_from_hf_config({"model_type": "llama4", "text_config": LLAMA4_TEXT}, "maverick")
    assert (m.num_dense_layers, m.intermediate_size, m.moe_intermediate_size) == (24, 16384, 8192)
    assert 395e9 < num_parameters(m) < 405e9 and 16.5e9 < num_parameters(m, active=True) < 17.5e9
    scout = model_from_hf_config({**LLAMA4_TEXT, "num_local_experts": 16, "interleave_moe_layer_step": 1}, "scout")
    assert scout.num_dense_layers == 0 and 106e9 < num_parameters(scout) < 109e9  # 109 B with its vision tower
    said = refused({**LLAMA4_TEXT, "interleave_moe_layer_step": 0})
    assert "interleave_moe_layer_step must be greater than 0" in said
    assert "moe_layers (layer numbers from 0 to 47) must be at most 47" in refused({**LLAMA4_TEXT, "moe_layers": [48]})


@pytest.mark.parametrize("fields, said", [
    # sized as full attention on all its layers
    ({"model_type": "recurrent_gemma", "block_types": ["recurrent", "recurrent", "attention"]},
     "block_types (['recurrent', 'recurrent', 'attention']) lays out recurrent layers (RecurrentGemma)"),
    # each was "missing field(s) num_attention_heads"
    ({"model_type": "mamba", "num_attention_heads": None}, "a Mamba state-space model (model_type 'mamba'): it has no "
                                                           "attention layers and keeps no KV cache"),
    ({"model_type": "rwkv", "num_attention_heads": None}, "an RWKV recurrent model"),
    ({"model_type": "t5", "num_attention_heads": None, "num_heads": 4}, "an encoder-decoder model (model_type 't5')"),
    # accepted as a decoder once n_layer and d_model were read
    ({"model_type": "xlnet", "n_layer": 4, "d_model": 128}, "an encoder-only model (model_type 'xlnet')"),
])
def test_a_model_that_is_not_an_attention_decoder_is_named(fields, said):
    assert said in refused(fields)
    assert shape({**BASE, "block_types": ["attention"] * 3})[0] == 4  # the neighbour: attention alone


def test_an_lm_head_tied_by_its_model_types_default():
    """Gemma 2 2B's config.json leaves tie_word_embeddings out (Gemma2Config's default: tied): it was
    sized at 3.20 B parameters for its 2.61 B."""
    m = model_from_hf_config(GEMMA2_2B, "g")
    assert m.tie_word_embeddings and 2.55e9 < num_parameters(m) < 2.7e9
    assert not model_from_hf_config({**GEMMA2_2B, "tie_word_embeddings": False}, "g").tie_word_embeddings
    assert not model_from_hf_config(BASE, "m").tie_word_embeddings  # LlamaConfig's default: untied


# -- JSON files that hold no JSON ---------------------------------------------------------------------------------

@pytest.mark.parametrize("data, said", [
    (b"", "empty (0 bytes), no JSON in it"),  # was "malformed JSON at line 1, column 1: Expecting value"
    (b"\xef\xbb\xbf \n\t", "empty (only blanks in its 6 bytes)"),
    (gzip.compress(json.dumps(BASE).encode()), "gzip-compressed, not JSON text; decompress it first"),  # "byte 1"
])
def test_a_config_json_holding_no_json_says_what_it_holds(tmp_path, data, said):
    (tmp_path / "config.json").write_bytes(data)
    with pytest.raises(ConfigError) as caught:
        load_hf_config(tmp_path)
    assert str(caught.value).startswith(f"config {tmp_path / 'config.json'}: ") and said in str(caught.value)
    (tmp_path / "config.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(BASE).encode())  # the neighbour
    assert load_hf_config(tmp_path).num_hidden_layers == 4


def test_a_compressed_trace_is_still_named_by_the_shared_check(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(gzip.compress(b"TIMESTAMP,ContextTokens,GeneratedTokens\n0,1,1\n"))
    with pytest.raises(ConfigError, match="gzip-compressed, not CSV text"):
        read_trace(path)


# -- quantization_config as vLLM reads it ------------------------------------------------------------------------

def test_fbgemm_fp8_and_autoawqs_w_bit_are_read():
    """Meta's Llama 3.1 FP8 (quant_method fbgemm_fp8) was "not one kvscope sizes"; AutoAWQ's w_bit 4 was said
    as "awq with bits None", though the file gives them (vLLM reads w_bit or bits)."""
    fbgemm = {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0}
    assert model_from_hf_config({**BASE, "quantization_config": fbgemm}, "m").weight_dtype == "fp8"
    awq = {"quant_method": "awq", "w_bit": 4, "q_group_size": 128, "zero_point": True, "version": "GEMM"}
    assert model_from_hf_config({**BASE, "quantization_config": awq}, "m").weight_dtype == "int4"
    said = refused({"quantization_config": {**awq, "bits": 8}})
    assert "bits (8) and w_bit (4) are two names of AWQ's weight bits and give different values" in said
    assert "w_bit must be a whole number" in refused({"quantization_config": {**awq, "w_bit": "4"}})


def test_an_fbgemm_fp8_folder_over_float_weights_is_refused(tmp_path):
    """The neighbour check fp8 has: a folder saying fbgemm_fp8 over F32 weights is not quantised."""
    import struct

    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 8)
    (tmp_path / "config.json").write_text(json.dumps({**BASE, "quantization_config": {"quant_method": "fbgemm_fp8"}}))
    with pytest.raises(ConfigError, match="says its weights are stored as fbgemm_fp8"):
        load_hf_config(tmp_path)


def test_a_null_num_hidden_layers_beside_a_text_config_is_absent():
    """null is absent everywhere else: beside a text_config it was "missing field(s) num_hidden_layers, ...",
    the text model's own fields never read."""
    cfg = {"model_type": "llava", "num_hidden_layers": None, "text_config": BASE}
    assert model_from_hf_config(cfg, "m").num_hidden_layers == 4
    top = {**BASE, "text_config": {**BASE}}  # the neighbour: the top level's own, read (the seventeenth pass
    assert model_from_hf_config(top, "m").num_hidden_layers == 4  # refuses a text_config of other numbers)


def test_opts_ffn_dim_and_lings_num_shared_experts_are_read():
    """OPT's MLP width (ffn_dim) was replaced by 4 x hidden_size; Ling's (bailing_moe) num_shared_experts
    was dropped, its shared expert sized as 0 bytes."""
    opt = {**BASE, "model_type": "opt", "intermediate_size": None, "ffn_dim": 512}
    assert model_from_hf_config(opt, "m").intermediate_size == 512
    assert "intermediate_size (256) and ffn_dim (512) are two names" in refused({"ffn_dim": 512})
    ling = {**BASE, "model_type": "bailing_moe", "num_experts": 8, "num_experts_per_tok": 2,
            "moe_intermediate_size": 64, "num_shared_experts": 1}
    assert model_from_hf_config(ling, "m").shared_expert_intermediate_size == 64
    assert model_from_hf_config({**ling, "num_shared_experts": None}, "m").shared_expert_intermediate_size == 0


@pytest.mark.parametrize("fields, said", [
    # each was said of the standard field the file does not have (num_hidden_layers, hidden_size,
    # num_key_value_heads, intermediate_size, mlp_only_layers)
    ({"num_hidden_layers": None, "n_layer": 0}, "n_layer must be greater than 0, got 0"),
    ({"hidden_size": None, "n_embd": 10**9}, "n_embd must be at most 4,194,304"),
    ({"num_key_value_heads": None, "n_head_kv": 0}, "n_head_kv must be greater than 0, got 0"),
    ({"intermediate_size": None, "model_type": "mpt", "expansion_ratio": 10**15},
     "expansion_ratio (the MLP's width / d_model) must be at most 32,768"),
    ({**LLAMA4_TEXT, "moe_layers": []}, "moe_layers is empty: no layer holds the 128 experts"),
])
def test_an_older_field_out_of_range_is_named_as_given(fields, said):
    assert said in refused(fields)
    assert model_from_hf_config({**BASE, "num_hidden_layers": None, "n_layer": 2}, "m").num_hidden_layers == 2


def test_a_length_field_is_named_as_given_and_no_limit_is_no_length():
    """seq_length 0 was "max_position_embeddings must be greater than 0" (a field the file did not give);
    a model_max_length of transformers' "no limit" (int(1e30), a tokenizer's, copied) was refused as past
    its ceiling, though vLLM takes the smallest length given and never reads it."""
    assert "seq_length must be greater than 0, got 0" in refused({"seq_length": 0})
    assert "n_positions must be at most 1,073,741,824" in refused({"max_position_embeddings": None,
                                                                   "n_positions": 2**31})
    for sentinel in (1000000000000000019884624838656, 1e30):
        assert model_from_hf_config({**BASE, "model_max_length": sentinel}, "m").max_position_embeddings == 512
    assert model_from_hf_config({**BASE, "seq_length": 256}, "m").max_position_embeddings == 256  # the smallest
