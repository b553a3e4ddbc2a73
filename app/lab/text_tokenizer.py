"""A model's tokenizer as text requests use it: chat messages in, token ids out, the tokens that
end an answer, and a TextStream per answer. The engine never sees any of this: it gets token ids
and a set of stop ids."""

from __future__ import annotations

from kvscope.app.lab.text_stream import TextStream

SIMULATED_HAS_NO_TEXT = ("the simulated backend has no model to answer with: it prices steps and samples "
                         "placeholder tokens; choose the real backend with a trained model to send text")


class ChatTokenizer:
    def __init__(self, tokenizer, stop_token_ids, model_name: str = "the model"):
        self.tokenizer = tokenizer
        self.stop_token_ids = frozenset(stop_token_ids)
        self.model_name = model_name

    def render(self, messages: list[dict]) -> str:
        """The prompt as the model reads it: the chat template applied, ready for the answer."""
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def encode(self, text: str) -> list[int]:
        # The template already wrote the special tokens the model expects; adding a BOS again would double it.
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def chat_prompt(self, messages: list[dict]) -> tuple[list[int], str]:
        text = self.render(messages)
        return self.encode(text), text

    def stream(self) -> TextStream:
        return TextStream(self.tokenizer)

    def decode(self, token_ids) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)


def _as_ids(value) -> set[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return {value}
    if isinstance(value, (list, tuple)):
        return {v for v in value if isinstance(v, int) and not isinstance(v, bool)}
    return set()


def chat_tokenizer_for(loaded) -> ChatTokenizer | None:
    """The loaded model's tokenizer if it can hold a conversation (it has a chat template), else None.
    Generation ends on the tokenizer's end-of-sequence token and on every one generation_config.json
    names (chat models often end a turn on a token of their own, such as <|im_end|> or <|eot_id|>)."""
    tokenizer = getattr(loaded, "tokenizer", None)
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return None
    stops = _as_ids(getattr(tokenizer, "eos_token_id", None))
    generation = getattr(loaded.hf_model, "generation_config", None)
    stops |= _as_ids(getattr(generation, "eos_token_id", None))
    if not stops:
        return None  # nothing could end an answer but its length: not a chat model kvscope can show
    return ChatTokenizer(tokenizer, stops, loaded.config.name)


def why_no_text(backend: str, loaded=None) -> str:
    """Why this engine cannot answer typed text, in one sentence."""
    if backend != "real":
        return SIMULATED_HAS_NO_TEXT
    if loaded is not None and getattr(loaded, "random_weights", False):
        return (f"{loaded.config.name} has random weights and no tokenizer, so it cannot read or write text; "
                "choose the trained model smollm2-135m-instruct")
    return "this model has no tokenizer with a chat template, so it cannot read or write text"
