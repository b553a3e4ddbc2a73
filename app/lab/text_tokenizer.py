"""A model's tokenizer as text requests use it: chat messages in, token ids out, the tokens that
end an answer, and a TextStream per answer. The engine never sees any of this: it gets token ids
and a set of stop ids. The chat template is rendered by chat_template.py, bounded."""

from __future__ import annotations

from kvscope.app.lab.chat_template import PROBES, ChatTemplate, template_source
from kvscope.app.lab.text_stream import TextStream
from kvscope.engine.config import ConfigError

SIMULATED_HAS_NO_TEXT = ("the simulated backend has no model to answer with: it prices steps and samples "
                         "placeholder tokens; choose the real backend with a trained model to send text")

class ChatTokenizer:
    def __init__(self, tokenizer, stop_token_ids, model_name: str = "the model", template=None):
        self.tokenizer = tokenizer
        self.stop_token_ids = frozenset(stop_token_ids)
        self.model_name = model_name
        # None: the tokenizer's own apply_chat_template (a stand-in tokenizer of a test)
        self.template = template

    def render(self, messages: list[dict]) -> str:
        """The prompt as the model reads it: the chat template applied, ready for the answer."""
        if self.template is not None:
            return self.template.render(messages)
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def encode(self, text: str) -> list[int]:
        # The template already wrote the special tokens the model expects; adding a BOS again would double it.
        # verbose=False: transformers warned on stderr of a prompt past the model's length, which the
        # engine refuses (or the prompt box explains) in its own words.
        return list(self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

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
    names (chat models often end a turn on a token of their own, such as <|im_end|> or <|eot_id|>).
    The template is compiled and tried on a short conversation here, once: a template that cannot
    render one is a ConfigError naming it, before any request is made."""
    tokenizer = getattr(loaded, "tokenizer", None)
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return None
    stops = _as_ids(getattr(tokenizer, "eos_token_id", None))
    generation = getattr(loaded.hf_model, "generation_config", None)
    stops |= _as_ids(getattr(generation, "eos_token_id", None))
    if not stops:
        return None  # nothing could end an answer but its length: not a chat model kvscope can show
    source = template_source(getattr(loaded, "path", None))
    text = tokenizer.chat_template
    if isinstance(text, dict):  # named templates: the one apply_chat_template uses without tools
        if "default" not in text:  # was "must be the template's text, got NoneType"
            names = ", ".join(repr(str(name)[:40]) for name in list(text)[:10])
            raise ConfigError(f"{source} names its templates ({names}) but none 'default', the one a conversation "
                              "without tools is rendered with; name one of them default")
        text = text["default"]
    if not isinstance(text, str):
        raise ConfigError(f"{source} must be the template's text, got {type(text).__name__}")
    template = ChatTemplate(text, source, getattr(tokenizer, "special_tokens_map", {}) or {})
    failures = []
    for probe in PROBES:
        try:
            template.render(probe, f"a conversation of {len(probe)} message(s) it is tried on")
            break
        except ConfigError as exc:
            failures.append(exc)
    else:
        raise failures[0]
    return ChatTokenizer(tokenizer, stops, loaded.config.name, template)


def why_no_text(backend: str, loaded=None) -> str:
    """Why this engine cannot answer typed text, in one sentence."""
    if backend != "real":
        return SIMULATED_HAS_NO_TEXT
    if loaded is not None and getattr(loaded, "random_weights", False):
        return (f"{loaded.config.name} has random weights and no tokenizer, so it cannot read or write text; "
                "choose the trained model smollm2-135m-instruct")
    return "this model has no tokenizer with a chat template, so it cannot read or write text"
