"""What kvscope's engine is measured against: transformers' own ways to serve a batch.

static:     generate() over fixed batches in arrival order, left-padded; a batch runs until its
            longest member is done (the seeds' "restaurant problem").
continuous: transformers' continuous batching manager (the engine behind generate_batch), with
            each request's own output length.
Both produce exactly the requested number of tokens per request (end-of-sequence ignored), so
the useful tokens are the same as the engine's.
"""

from __future__ import annotations

import contextlib
import time

import torch

from kvscope.engine.runners.loaded_model import LoadedModel


@contextlib.contextmanager
def attention_implementation(model, name: str):
    previous = model.config._attn_implementation
    model.set_attn_implementation(name)
    try:
        yield
    finally:
        model.set_attn_implementation(previous)


def run_static_generate(loaded: LoadedModel, prompts: list[list[int]], max_tokens: list[int],
                        batch_size: int) -> dict:
    model = loaded.hf_model
    pad = 0
    generated = 0
    started = time.perf_counter()
    with attention_implementation(model, "sdpa"), torch.inference_mode():
        for start in range(0, len(prompts), batch_size):
            batch = prompts[start:start + batch_size]
            longest = max(len(p) for p in batch)
            ids = torch.full((len(batch), longest), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), longest), dtype=torch.long)
            for row, p in enumerate(batch):  # left padding, so every row's last token is real
                ids[row, longest - len(p):] = torch.tensor(p)
                mask[row, longest - len(p):] = 1
            new = max(max_tokens[start:start + batch_size])
            out = model.generate(input_ids=ids.to(loaded.device), attention_mask=mask.to(loaded.device),
                                 max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=pad)
            generated += (out.shape[1] - longest) * len(batch)
    wall = time.perf_counter() - started
    useful = sum(max_tokens)
    return {"wall_time_s": wall, "output_tokens": useful, "generated_tokens": generated,
            "throughput_tokens_per_s": useful / wall}


def run_continuous_batching(loaded: LoadedModel, prompts: list[list[int]], max_tokens: list[int],
                            options: dict | None = None) -> dict:
    """options: `attn_implementation` (default sdpa, which the manager turns into its paged
    variant) and ContinuousBatchingConfig fields (use_cuda_graph, ...)."""
    from transformers import GenerationConfig

    model = loaded.hf_model
    unreachable_eos = model.config.vocab_size + 1  # no token can end a request early
    config = GenerationConfig(do_sample=False, max_new_tokens=max(max_tokens), eos_token_id=unreachable_eos,
                              pad_token_id=0)
    options = dict(options or {})
    previous = model.config._attn_implementation
    model.set_attn_implementation(options.pop("attn_implementation", "sdpa"))  # the manager pages it
    cb_config = None
    if options:
        from transformers import ContinuousBatchingConfig

        cb_config = ContinuousBatchingConfig(**options)
    started = time.perf_counter()
    try:
        with torch.inference_mode():
            manager = (model.init_continuous_batching(generation_config=config) if cb_config is None else
                       model.init_continuous_batching(generation_config=config, continuous_batching_config=cb_config))
            manager.start()
            try:
                for i, (p, n) in enumerate(zip(prompts, max_tokens)):
                    manager.add_request(p, request_id=str(i), max_new_tokens=n, eos_token_id=unreachable_eos)
                generated = 0
                for _ in range(len(prompts)):
                    result = manager.get_result(timeout=600)
                    if result is None:
                        raise RuntimeError("transformers' continuous batching produced no result in 10 minutes")
                    generated += len(result.generated_tokens)
            finally:
                manager.stop(block=True)
    finally:
        model.set_attn_implementation(previous)
    wall = time.perf_counter() - started
    return {"wall_time_s": wall, "output_tokens": generated, "generated_tokens": generated,
            "throughput_tokens_per_s": generated / wall}
