"""Is the paged engine right? The same prompts through kvscope's engine — with chunked prefill,
shared prefixes and forced preemption — and through transformers' own generate(do_sample=False).

With fp32 KV the tokens must be identical. With a narrower KV dtype the cost is measured two
ways on the engine's own outputs: top-1 agreement (does the full-precision model, given the same
prefix, pick the same token?) and the largest logit difference.

With weights quantised on load (int8, nf4) generate() runs the same quantised model. nf4 stays
exact. int8 need not: bitsandbytes' LLM.int8() sends every input column holding a value above
6.0 in ANY row of the matmul through a 16-bit path, so a token's result depends on which other
tokens share its matmul: the engine's packed batch of chunks and decodes, or generate()'s one
sequence. app/lab/verify/quality.py measures what the quantisation itself costs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from kvscope.app.lab.real_backend import create_real_engine
from kvscope.engine.config import EngineArgs
from kvscope.engine.events import EventKind
from kvscope.engine.runners.loaded_model import LoadedModel
from kvscope.engine.runners.paged_attention import ATTN_IMPLEMENTATION

SAMPLE_TEXTS = (
    "The KV cache holds the keys and values of every token a request has seen,",
    "Continuous batching admits a new request the moment another one finishes,",
    "PagedAttention splits the cache into fixed-size blocks handed out on demand,",
    "A long prompt can be split into chunks and interleaved with decode steps,",
)


@dataclass(frozen=True)
class ParityResult:
    kv_cache_dtype: str
    sequences: int
    identical_sequences: int
    token_agreement: float  # generated positions equal to generate()'s, over all positions
    top1_agreement: float  # teacher-forced on the engine's own prefix
    max_logit_diff: float
    preemptions: int
    prefix_hit_tokens: int
    chunked_prefill_chunks: int  # prompt chunks that left part of their prompt for a later step
    weights: str = ""  # the loaded weights' type: fp32, bf16, or the quantisation (int8, nf4)

    @property
    def exact(self) -> bool:
        return self.identical_sequences == self.sequences

    def to_dict(self) -> dict:
        return {**asdict(self), "exact": self.exact}


def parity_prompts(loaded: LoadedModel, count: int, seed: int) -> list[list[int]]:
    """Prompts of mixed lengths, half of them sharing a two-block prefix (so the prefix cache hits)."""
    rng = np.random.default_rng(seed)
    vocab = loaded.config.vocab_size
    if loaded.tokenizer is not None:
        base = [loaded.tokenizer.encode(t, add_special_tokens=False) for t in SAMPLE_TEXTS]
        shared = (base[0] * 8)[:40]
    else:
        base = None
        shared = rng.integers(0, vocab, 40).tolist()
    prompts = []
    for i in range(count):
        length = int(rng.integers(20, 180))
        tail = (base[i % len(base)] * 20)[:length] if base else rng.integers(0, vocab, length).tolist()
        prompts.append(shared + tail if i % 2 == 0 else tail)
    return prompts


def run_parity(loaded: LoadedModel, kv_cache_dtype: str, num_prompts: int = 8, max_tokens: int = 16,
               seed: int = 0) -> ParityResult:
    prompts = parity_prompts(loaded, num_prompts, seed)
    longest = max(len(p) for p in prompts) + max_tokens
    block_size = 16
    blocks_for_longest = -(-longest // block_size)
    args = EngineArgs(
        kv_cache_dtype=kv_cache_dtype, block_size=block_size, max_model_len=longest,
        max_num_batched_tokens=64,  # prompts of up to ~220 tokens run in chunks
        num_gpu_blocks_override=blocks_for_longest + 8,  # room for ~2 requests: the rest get preempted
        max_num_seqs=num_prompts,
    )
    engine = create_real_engine(loaded, args, record_outputs=True)
    engine.runner.recorded_logits = {}
    ids = [engine.add_request(p, max_tokens) for p in prompts]
    chunked = 0
    prefix_tokens = 0

    def watch(step):
        nonlocal chunked, prefix_tokens
        for rid, prefill in zip(step.request_ids, step.is_prefill):
            req = engine.requests.get(rid)
            chunked += prefill and req is not None and req.num_computed_tokens < req.num_tokens
        prefix_tokens += int(sum(ev.value for ev in step.events if ev.kind == EventKind.PREFIX_HIT))

    summary = engine.run(on_step=watch)
    outputs = [engine.outputs[i] for i in ids]
    engine_logits = [torch.stack(engine.runner.recorded_logits[i]) for i in ids]

    model = loaded.hf_model
    model.set_attn_implementation("sdpa")
    identical = agree = top1 = positions = 0
    max_diff = 0.0
    try:
        with torch.inference_mode():
            for prompt, out, logits in zip(prompts, outputs, engine_logits):
                ids_t = torch.tensor([prompt], device=loaded.device)
                # An explicit mask: otherwise generate() takes prompt tokens equal to the pad id for padding.
                reference = model.generate(ids_t, attention_mask=torch.ones_like(ids_t), max_new_tokens=max_tokens,
                                           min_new_tokens=max_tokens, do_sample=False,
                                           pad_token_id=0)[0, len(prompt):].tolist()
                identical += reference == out
                agree += sum(a == b for a, b in zip(reference, out))
                # the full-precision model on the engine's own prefix, all positions in one forward
                forced = torch.tensor([prompt + out[:-1]], device=loaded.device)
                ref_logits = model(input_ids=forced, use_cache=False).logits[0, len(prompt) - 1:].float().cpu()
                top1 += int((ref_logits.argmax(-1) == torch.tensor(out)).sum())
                max_diff = max(max_diff, float((ref_logits - logits).abs().max()))
                positions += len(out)
    finally:
        model.set_attn_implementation(ATTN_IMPLEMENTATION)
    return ParityResult(
        kv_cache_dtype=engine.resolved.kv_cache_dtype, sequences=len(prompts), identical_sequences=identical,
        token_agreement=agree / positions, top1_agreement=top1 / positions, max_logit_diff=max_diff,
        preemptions=summary["preemptions"], prefix_hit_tokens=prefix_tokens, chunked_prefill_chunks=chunked,
        weights=loaded.quantization or loaded.config.weight_dtype,
    )
