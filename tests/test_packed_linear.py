"""The real runner's oneDNN-packed linear layers: same results as nn.Linear, every plain linear of
the decoder and the head packed, quantised and non-linear modules left alone."""

import pytest
import torch
from torch import nn

from kvscope.engine.runners.packed_linear import PackedLinear, onednn_packing_available, pack_linear_layers

pytestmark = pytest.mark.skipif(not onednn_packing_available(torch.float32),
                                reason="this torch build has no oneDNN packing")


@pytest.mark.parametrize("tokens", [1, 5, 64, 300])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_linear_computes_what_nn_linear_computes(tokens, bias):
    torch.manual_seed(tokens)
    linear = nn.Linear(96, 160, bias=bias)
    x = torch.randn(1, tokens, 96)
    with torch.no_grad():
        expected = linear(x)
        got = PackedLinear(linear)(x)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


class TinyBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.ModuleDict({"q_proj": nn.Linear(8, 8), "k_proj": nn.Linear(8, 4)})
        self.norm = nn.LayerNorm(8)
        self.quantised = type("Linear8bitLike", (nn.Linear,), {})(8, 8)  # a subclass, as bitsandbytes' are


class TinyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Module()
        self.model.layers = nn.ModuleList([TinyBlock(), TinyBlock()])
        self.lm_head = nn.Linear(8, 32, bias=False)


def test_every_plain_linear_of_the_layers_and_the_head_is_packed_and_nothing_else():
    model = TinyModel()
    assert pack_linear_layers(model) == 2 * 2 + 1
    for block in model.model.layers:
        assert isinstance(block.attn["q_proj"], PackedLinear) and isinstance(block.attn["k_proj"], PackedLinear)
        assert type(block.norm) is nn.LayerNorm
        assert not isinstance(block.quantised, PackedLinear)
    assert isinstance(model.lm_head, PackedLinear)
    assert pack_linear_layers(model) == 0  # packing twice changes nothing


def test_a_model_without_decoder_layers_is_left_as_it_is():
    assert pack_linear_layers(nn.Sequential(nn.Linear(4, 4))) == 0


def test_the_real_runner_packs_a_cpu_model_and_still_matches_generate():
    from kvscope.app.lab.real_backend import create_real_engine, load_for_real_backend
    from kvscope.engine import EngineArgs

    loaded = load_for_real_backend("tiny-llama", device="cpu", dtype="fp32")
    prompt = list(range(20, 52))
    with torch.inference_mode():
        reference = loaded.hf_model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False,
                                             attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    engine = create_real_engine(loaded, EngineArgs(num_gpu_blocks_override=32, max_model_len=256),
                                record_outputs=True)
    assert engine.runner.packed_layers == loaded.config.num_hidden_layers * 7 + 1
    request = engine.add_request(prompt, 8)
    engine.run()
    assert engine.outputs[request] == reference[0, len(prompt):].tolist()
