"""The run's answers table quotes what each prompt asks: the last user turn, not the chat template's
system prompt and role names run together ("...patient. user What is the capital of France?")."""

from __future__ import annotations

from types import SimpleNamespace

from kvscope.app.lab.text_results import question_of

CHATML = ("<|im_start|>system\nYou are a helpful assistant. Be friendly and patient.<|im_end|>\n"
          "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
          "<|im_start|>user\nWhat is the capital\nof France?<|im_end|>\n<|im_start|>assistant\n")


class Tokenizer:
    """What question_of reads of a ChatTokenizer: its HF tokenizer's special tokens, encode, decode."""

    def __init__(self, special):
        self.tokenizer = SimpleNamespace(all_special_tokens=special)

    def encode(self, text):
        return list(text)

    def decode(self, ids):
        text = "".join(ids)
        for marker in self.tokenizer.all_special_tokens:
            text = text.replace(marker, " ")
        return text


def test_the_last_user_turn_is_the_question():
    tokenizer = Tokenizer(["<|im_start|>", "<|im_end|>"])
    assert question_of({"prompt": CHATML}, tokenizer) == "What is the capital of France?"


def test_a_long_question_keeps_its_end():
    prompt = CHATML.replace("What is", "Tell me, after a long preamble about travel and maps, what is")
    asked = question_of({"prompt": prompt}, Tokenizer(["<|im_start|>", "<|im_end|>"]), width=40)
    assert len(asked) == 40 and asked.startswith("...") and asked.endswith("capital of France?")


def test_without_turns_to_tell_apart_the_end_of_the_prompt_is_quoted():
    asked = question_of({"prompt": "plain text, no template: what is two and two?"}, Tokenizer([]))
    assert asked == "plain text, no template: what is two and two?"


def test_a_llama_3_template_names_the_role_between_its_own_markers():
    prompt = ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are helpful. Be patient.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nWhat is the capital of France?<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n")
    tokenizer = Tokenizer(["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"])
    assert question_of({"prompt": prompt}, tokenizer) == "What is the capital of France?"
