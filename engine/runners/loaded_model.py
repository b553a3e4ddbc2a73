"""What the real runner is given: a transformers model already on its device, and its config.

Reading it from disk (safetensors, quantisation on load, the Hugging Face cache) is
app/lab/models/loader.py's job; the engine only runs what it receives.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvscope.engine.config import ModelConfig


@dataclass
class LoadedModel:
    hf_model: object  # a transformers PreTrainedModel, in eval mode
    tokenizer: object | None
    config: ModelConfig  # weights_bytes is what the loaded weights really occupy
    path: Path
    device: object  # torch.device
    random_weights: bool = False
    quantization: str | None = None

    @property
    def label(self) -> str:
        kind = "random weights" if self.random_weights else "weights from disk"
        weights = f"{self.quantization} weights" if self.quantization else self.config.weight_dtype
        return f"{self.config.name} ({kind}, {weights} on {self.device})"
