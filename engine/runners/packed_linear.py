"""Linear layers with their weights packed once for oneDNN, for the real runner on a CPU.

torch's default CPU GEMM (MKL's sgemm) re-lays-out the weight on every call; oneDNN can reorder it
once into the blocked layout its kernels read, as vLLM's CPU build does for its linear layers.
Measured on this project's 2-core AVX-512 EPYC, one thread, fp32: a decode step's projections
(4 - 64 tokens) 1.1 - 1.9x faster, a 2,048-token prefill's about 1.1x. The packed weight replaces
the original (no second copy); the model's own forward code is unchanged: each nn.Linear of the
decoder layers becomes a PackedLinear with the same call signature.
"""

from __future__ import annotations

import torch
from torch import nn

# The batch size oneDNN packs for; the packed layout serves every batch size, this only picks the
# blocking, and 64 measured as fast as an exact hint from 4 to 2,048 tokens.
PACKING_BATCH_HINT = 64
PACKABLE_DTYPES = (torch.float32, torch.bfloat16)


class PackedLinear(nn.Module):
    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach()
        self.dtype = weight.dtype
        self.register_buffer("packed_weight", torch.ops.mkldnn._reorder_linear_weight(weight, PACKING_BATCH_HINT),
                             persistent=False)
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, oneDNN-packed {self.dtype}"


def onednn_packing_available(dtype: torch.dtype) -> bool:
    """Whether this torch build and CPU pack and multiply weights of this dtype with oneDNN (a tiny
    probe, so a build without it runs the model's own layers instead of failing)."""
    if dtype not in PACKABLE_DTYPES or not torch.backends.mkldnn.is_available():
        return False
    if dtype == torch.bfloat16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return False
    try:
        linear = nn.Linear(8, 8, bias=True, dtype=dtype)
        x = torch.linspace(-1, 1, 16, dtype=dtype).view(2, 8)
        with torch.no_grad():
            return torch.allclose(PackedLinear(linear)(x).float(), linear(x).float(), atol=1e-2)
    except (RuntimeError, AttributeError):
        return False


def pack_linear_layers(model: nn.Module) -> int:
    """Replace every plain nn.Linear of the decoder layers and the output head by a PackedLinear;
    returns how many. Quantised layers (bitsandbytes subclasses of nn.Linear) keep their own
    kernels. A head tied to the embedding gets a packed copy (the embedding still reads the
    original): vocabulary x hidden size more bytes, 113 MB for SmolLM2-135M in fp32, for a head
    that runs 1.7 - 2.7x faster on a decode step (measured here, 4 - 64 tokens)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        return 0
    packed = 0
    for layer in layers:
        for parent in layer.modules():
            for name, child in list(parent.named_children()):
                if type(child) is nn.Linear:
                    setattr(parent, name, PackedLinear(child))
                    packed += 1
    if type(getattr(model, "lm_head", None)) is nn.Linear:
        model.lm_head = PackedLinear(model.lm_head)
        packed += 1
    return packed
