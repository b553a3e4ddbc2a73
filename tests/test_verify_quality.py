"""The quality cost on real text (app/lab/verify/quality.py): perplexity and top-1 agreement with
the full-precision model, measured through kvscope's engine."""

from __future__ import annotations

import math

import pytest
import torch

from kvscope.app.lab.models.loader import load_model_directory
from kvscope.app.lab.verify import quality
from kvscope.app.lab.verify.tiny_model import build_random_model
from kvscope.engine.config import ConfigError, ModelConfig

SHAPE = ModelConfig(name="test-quality", model_type="llama", num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, hidden_size=64, intermediate_size=128, vocab_size=512,
                    max_position_embeddings=1024, weight_dtype="fp32")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Models this small gain nothing from a second thread, and lose much when other processes
    share the cores."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return load_model_directory(build_random_model(SHAPE, tmp_path_factory.mktemp("quality") / "m"),
                                random_weights=True)


def test_perplexity_is_the_exponent_of_the_mean_negative_log_likelihood_by_hand():
    # three positions over a vocabulary of three; the passage is tokens 2, 0, 1, 1
    logits = torch.tensor([[1.0, 0.0, 2.0], [0.5, 0.5, 0.0], [0.0, 3.0, 1.0], [9.0, 9.0, 9.0]])
    top1, nll = quality.next_token_scores(logits, [2, 0, 1, 1])
    assert top1.tolist() == [2, 0, 1]  # argmax of each of the first three rows (ties: the first)
    # by hand: -log(e^x_target / sum e^x) for targets 0, 1, 1
    by_hand = [-(1.0 - math.log(math.e ** 1 + 1 + math.e ** 2)),
               -(0.5 - math.log(2 * math.e ** 0.5 + 1)),
               -(3.0 - math.log(1 + math.e ** 3 + math.e))]
    assert nll.tolist() == pytest.approx(by_hand, rel=1e-12)
    assert quality.perplexity(nll) == pytest.approx(math.exp(sum(by_hand) / 3), rel=1e-12)
    # a model sure of every next token has perplexity 1; a uniform one, the vocabulary size
    assert quality.perplexity(quality.next_token_scores(torch.tensor([[0.0, 50.0], [0.0, 0.0]]), [0, 1])[1]) \
        == pytest.approx(1.0)
    assert quality.perplexity(quality.next_token_scores(torch.zeros(5, 7), [1, 2, 3, 4, 5])[1]) == pytest.approx(7.0)


def test_passages_are_plain_prose_blocks():
    passages = quality.load_passages()
    assert len(passages) == 8
    assert all(len(p.split()) > 150 and "\n" not in p and not p.startswith("#") for p in passages)
    assert len(set(passages)) == len(passages)


def test_bad_passage_files_get_one_sentence(tmp_path):
    empty = tmp_path / "p.txt"
    empty.write_text("# only a comment\n---\n")
    with pytest.raises(ConfigError, match="no passage found"):
        quality.load_passages(empty)
    with pytest.raises(ConfigError, match="cannot read"):
        quality.load_passages(tmp_path / "missing.txt")


def test_fp32_kv_through_the_engine_scores_exactly_what_the_model_scores_alone(tiny):
    g = torch.Generator().manual_seed(0)
    passages = [torch.randint(0, 512, (n,), generator=g).tolist() for n in (300, 90, 211)]
    reference = quality.score_full_precision(tiny, passages)
    assert reference.top1.numel() == sum(len(p) - 1 for p in passages)
    fp32 = quality.measure_quality(tiny, "fp32", reference, passages)
    assert fp32.top1_agreement == 1.0 and fp32.tokens == reference.top1.numel()
    assert fp32.perplexity == pytest.approx(reference.perplexity, rel=1e-5)
    fp8 = quality.measure_quality(tiny, "fp8_e5m2", reference, passages)
    assert fp8.top1_agreement < 1.0 and fp8.perplexity != pytest.approx(reference.perplexity, rel=1e-5)
    assert fp8.to_dict()["perplexity_increase"] == pytest.approx(fp8.perplexity / reference.perplexity - 1)


def test_a_model_without_a_tokenizer_cannot_be_scored_on_text(tiny):
    with pytest.raises(ConfigError, match="no tokenizer"):
        quality.passage_token_ids(tiny)


def test_on_the_trained_model_fp8_kv_costs_a_little_and_fp32_kv_nothing():
    """The one test on SmolLM2-135M (converted once per test run, as tests/test_trained_model.py
    does): one English passage of about 270 tokens, the measurement README's figures come from."""
    from kvscope.app.lab.real_backend import load_for_real_backend
    from kvscope.app.lab.trained_model import ensure_trained_model, find_gguf

    try:
        find_gguf()
    except ConfigError as exc:
        pytest.skip(f"the trained model's package is not installed (`make test` installs it): {exc}")
    loaded = load_for_real_backend(model_path=str(ensure_trained_model()))
    passages = quality.passage_token_ids(loaded, 1)
    assert 250 < len(passages[0]) < 300
    reference = quality.score_full_precision(loaded, passages)
    assert 5 < reference.perplexity < 60  # a trained model reads English; random weights score ~49,152
    exact = quality.measure_quality(loaded, "fp32", reference, passages)
    assert exact.top1_agreement == 1.0 and exact.perplexity == pytest.approx(reference.perplexity, rel=1e-5)
    fp8 = quality.measure_quality(loaded, "fp8_e4m3", reference, passages)
    assert 0.9 < fp8.top1_agreement < 1.0
    assert 0 < abs(fp8.perplexity_increase) < 0.05
