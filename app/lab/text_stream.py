"""One request's output, decoded to text as its tokens arrive.

A token is not always a whole character: byte-level tokenizers split an accented letter or an
emoji over several tokens, and a word's leading space belongs to the token after it. Decoding
each token on its own would print broken characters; decoding everything again each time costs
O(length) per token. The tokenizers library's DecodeStream keeps the few tokens of context it
needs and hands back only the new text, which is what vLLM's incremental detokenizer does too.
"""

from __future__ import annotations


class TextStream:
    """The text of one output so far; feed() it the output's token ids as they grow."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self._backend = getattr(tokenizer, "backend_tokenizer", None)  # a "fast" (Rust) tokenizer
        self._stream = None
        if self._backend is not None:
            from tokenizers.decoders import DecodeStream

            self._stream = DecodeStream(skip_special_tokens=True)
        self._ids: list[int] = []
        self.text = ""

    @property
    def num_tokens(self) -> int:
        return len(self._ids)

    def feed(self, token_ids) -> str:
        """Take the output's tokens after those already fed; returns the text they added."""
        new = list(token_ids)
        if not new:
            return ""
        self._ids.extend(new)
        if self._stream is None:  # a slow (pure Python) tokenizer: decode the whole output again
            before, self.text = self.text, self._tokenizer.decode(self._ids, skip_special_tokens=True)
            return self.text[len(before):]
        added = "".join(piece for token in new if (piece := self._stream.step(self._backend, token)))
        self.text += added
        return added
