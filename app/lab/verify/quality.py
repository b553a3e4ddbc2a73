"""What a narrower KV cache or quantised weights cost on real text, measured against full precision.

English passages (presets/texts/quality-passages.txt) run as prompts through kvscope's engine,
in prompt chunks that read earlier chunks back from the paged KV pool, so every position sees
the keys and values as the cache stored them. A hook on the decoder keeps the hidden state of
every prompt position (the engine itself only turns the last one into logits), and the model's
own output layer makes them logits. Two figures per configuration:

- top-1 agreement: the share of positions whose most likely next token is the one the full-
  precision model (fp32 weights and no cache at all: transformers' own forward) picks;
- perplexity: exp of the mean negative log-likelihood of each passage's actual next token.
  The full-precision model's own perplexity is the floor it is read against.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from kvscope.engine.config import ConfigError, EngineArgs
from kvscope.engine.runners.loaded_model import LoadedModel

PASSAGE_SEPARATOR = "---"
# A step's token budget while scoring: passages of ~270 tokens run in two chunks, the second
# reading the first from the pool.
SCORING_CHUNK_TOKENS = 192
BLOCK_SIZE = 16


def passages_path() -> Path:
    from kvscope.app.lab.presets import presets_root

    return presets_root() / "texts" / "quality-passages.txt"


def load_passages(path: Path | None = None) -> list[str]:
    """The passages, each one paragraph of plain prose (its lines joined by spaces)."""
    path = path or passages_path()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"quality passages {path}: cannot read: {exc}") from None
    blocks, current = [], []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if line.strip() == PASSAGE_SEPARATOR:
            blocks.append(current)
            current = []
        else:
            current.append(line.strip())
    blocks.append(current)
    passages = [" ".join(w for w in block if w) for block in blocks]
    passages = [p for p in passages if p]
    if not passages:
        raise ConfigError(f"quality passages {path}: no passage found")
    return passages


def passage_token_ids(loaded: LoadedModel, count: int | None = None) -> list[list[int]]:
    if loaded.tokenizer is None:
        raise ConfigError(f"{loaded.config.name} has no tokenizer: its quality cannot be measured on text")
    passages = load_passages()[:count]
    return [loaded.tokenizer.encode(p, add_special_tokens=False) for p in passages]


@dataclass(frozen=True)
class PassageScores:
    """Per scored position (each passage's tokens but its first): the model's most likely next
    token and the negative log-likelihood of the passage's actual next token."""

    top1: torch.Tensor  # long [N]
    nll: torch.Tensor  # float64 [N]

    @property
    def perplexity(self) -> float:
        return math.exp(float(self.nll.mean()))


def next_token_scores(logits: torch.Tensor, token_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(argmax, negative log-likelihood of the next token) at each position of one passage but its
    last: logits [len(token_ids), vocab], the logits at position i predicting token i + 1."""
    logits = logits[:-1].double()
    targets = torch.as_tensor(token_ids[1:], dtype=torch.long)
    nll = -torch.log_softmax(logits, dim=-1).gather(1, targets[:, None])[:, 0]
    return logits.argmax(-1), nll


def perplexity(nll: torch.Tensor) -> float:
    return math.exp(float(nll.double().mean()))


def score_full_precision(loaded: LoadedModel, passages: list[list[int]]) -> PassageScores:
    """The reference: transformers' own forward, no KV cache, one passage at a time."""
    model = loaded.hf_model
    previous = model.config._attn_implementation
    model.set_attn_implementation("sdpa")
    top1, nll = [], []
    try:
        with torch.inference_mode():
            for ids in passages:
                logits = model(input_ids=torch.tensor([ids], device=loaded.device), use_cache=False).logits[0]
                a, b = next_token_scores(logits.float().cpu(), ids)
                top1.append(a)
                nll.append(b)
    finally:
        model.set_attn_implementation(previous)
    return PassageScores(torch.cat(top1), torch.cat(nll))


def score_through_engine(loaded: LoadedModel, kv_cache_dtype: str, passages: list[list[int]]) -> PassageScores:
    """Every passage a prompt through kvscope's paged engine, at this KV precision."""
    from kvscope.app.lab.real_backend import create_real_engine

    longest = max(len(p) for p in passages) + 1
    blocks = sum(-(-(len(p) + 1) // BLOCK_SIZE) for p in passages)
    args = EngineArgs(kv_cache_dtype=kv_cache_dtype, block_size=BLOCK_SIZE, max_model_len=longest,
                      max_num_batched_tokens=SCORING_CHUNK_TOKENS, num_gpu_blocks_override=blocks + 1,
                      max_num_seqs=len(passages), enable_prefix_caching=False)
    engine = create_real_engine(loaded, args)
    request_of = {engine.add_request(p, 1): i for i, p in enumerate(passages)}
    hidden: list[torch.Tensor] = []
    decoder = loaded.hf_model.get_decoder()
    hook = decoder.register_forward_hook(lambda module, inputs, output: hidden.append(output.last_hidden_state[0]))
    rows: list[list[torch.Tensor]] = [[] for _ in passages]
    try:
        while (step := engine.step()) is not None:
            if not step.request_ids:
                continue
            states = hidden.pop()
            start = 0
            for rid, n in zip(step.request_ids, step.num_new_tokens):
                rows[request_of[rid]].append(states[start:start + n])
                start += n
            hidden.clear()
    finally:
        hook.remove()
    if engine.summary()["preemptions"]:  # a recomputed prompt would give some positions twice
        raise RuntimeError("scoring expects every passage to fit the pool at once")
    top1, nll = [], []
    output_layer = loaded.hf_model.get_output_embeddings()
    with torch.inference_mode():
        for ids, parts in zip(passages, rows):
            states = torch.cat(parts)[: len(ids)]
            logits = output_layer(states).float().cpu()
            a, b = next_token_scores(logits, ids)
            top1.append(a)
            nll.append(b)
    return PassageScores(torch.cat(top1), torch.cat(nll))


@dataclass(frozen=True)
class QualityResult:
    """One configuration's cost against full precision on the same passages."""

    weights: str  # fp32, bf16, int8, nf4 ...
    kv_cache_dtype: str
    passages: int
    tokens: int  # positions scored
    top1_agreement: float
    perplexity: float
    full_precision_perplexity: float

    @property
    def perplexity_increase(self) -> float:
        return self.perplexity / self.full_precision_perplexity - 1

    def to_dict(self) -> dict:
        return {**asdict(self), "perplexity_increase": self.perplexity_increase}


def measure_quality(loaded: LoadedModel, kv_cache_dtype: str, reference: PassageScores,
                    passages: list[list[int]]) -> QualityResult:
    """This model (its weights as loaded) with this KV precision, against `reference`: the
    full-precision model's scores on the same passages (score_full_precision)."""
    scores = score_through_engine(loaded, kv_cache_dtype, passages)
    return QualityResult(
        weights=loaded.quantization or loaded.config.weight_dtype, kv_cache_dtype=kv_cache_dtype,
        passages=len(passages), tokens=int(scores.top1.numel()),
        top1_agreement=float((scores.top1 == reference.top1).double().mean()),
        perplexity=scores.perplexity, full_precision_perplexity=reference.perplexity,
    )
