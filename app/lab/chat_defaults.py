"""The window's first run: the trained model answering real chat text on this machine, sized so
that a 2-core CPU shows the point within seconds -- the KV pool fills, requests queue for it --
while the engine still steps several times a second.

Each choice and its reason, measured headless by `kvscope bench real` (its "window default" table):
- The weights in bf16, the checkpoint's own precision, where the CPU multiplies bf16 natively
  (live_chat_dtype): a step of 48 tokens costs 0.165 s of one core instead of 0.253 s in fp32.
- A small KV pool: the lesson is the pool filling, and a pool the size of RAM would take minutes
  of CPU time to fill. 40 MiB holds 113 blocks of 16 tokens in bf16 (SmolLM2-135M keeps 22.5 KiB
  of K and V per token: 30 layers x 3 KV heads x 64 x 2 x 2 bytes), about eight conversations;
  56 blocks where the weights and KV stay fp32.
- 48 tokens a step (max_num_batched_tokens): a step's time grows with its tokens; at 48 the
  engine makes 5+ steps a second on one core, and a prompt is prefilled in chunks beside the
  answers being written.
- max_model_len 768: the longest conversation (386 prompt tokens) with a full answer (192) fits,
  and one full-length request (48 blocks) fits the pool, as vLLM requires.
- Arrivals at 4 requests a second: faster than answers finish, so requests queue for blocks.
- One compute thread: the window draws on the other core (process_tuning.leave_a_core_to_the_window).
"""

from __future__ import annotations

from kvscope.app.lab.trained_model import TRAINED_MODEL, find_gguf, is_converted
from kvscope.engine.config import ConfigError
from kvscope.engine.units import GiB

LIVE_CHAT_MODEL = TRAINED_MODEL.name
LIVE_CHAT_WORKLOAD = "chat-text"
LIVE_CHAT_ENGINE = {
    "kv_cache_memory_bytes": 40 * GiB // 1024,
    "max_model_len": 768,
    "max_num_batched_tokens": 48,
    "max_num_seqs": 16,
}
# The conversations ten times over: the window runs for many minutes before the workload ends.
LIVE_CHAT_WORKLOAD_SETTINGS = {"num_requests": 720, "arrival_rate_per_s": 4.0}
LIVE_CHAT_WHY = (
    "Chosen to feel alive on a 2-core CPU: bf16 weights where the CPU multiplies bf16, a 40 MiB KV pool "
    "(113 blocks of 16 tokens, about eight conversations) that fills within seconds, 48 tokens a step so "
    "the engine steps 5+ times a second on one core (the window draws on the other), max_model_len 768 "
    "(the longest conversation with its answer fits), and 4 requests a second, faster than answers "
    "finish, so requests queue for blocks. A bigger pool or token budget serves more at once, more slowly."
)


def live_chat_dtype() -> str | None:
    """The trained model's weights in the window: bf16, the checkpoint's own precision, where the CPU
    multiplies bf16 natively (oneDNN with AVX-512: measured 1.4x the steps per second of fp32, the
    decode steps being bound by reading the weights); elsewhere the loader's default for the device."""
    import torch

    if torch.cuda.is_available():
        return None
    return "bf16" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else None


def trained_model_available() -> bool:
    """Whether the trained model is converted already or can be (its package is installed)."""
    if is_converted():
        return True
    try:
        find_gguf()
    except ConfigError:
        return False
    return True
