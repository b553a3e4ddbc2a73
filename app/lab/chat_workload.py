"""A workload of real chat text: conversations behind one shared system prompt.

Every turn of a conversation is one request whose prompt is the whole conversation so far (the
system prompt, the earlier questions and their written answers, the new question), as a chat
client sends it. So the turns of one conversation share ever longer prefixes, and every request
shares the system prompt: prefix caching works on real text. The answer to each turn is the
model's own, and ends where the model ends it (its end-of-sequence token) or at max_tokens.

A few people chat at once (concurrent_conversations): the requests take their turns in rotation,
and when a conversation ends the next one in the file takes its place. Arrival times are Poisson
at the workload's rate. Asked for more requests than the conversations hold, the workload starts
again from the first conversation.

With a model that has no tokenizer (random weights, the simulated backend) the same text is cut
into words, each word a token id from a hash: the lengths and the shared prefixes keep their
shape, no text comes back.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from kvscope.app.lab.table_checks import require_text, unknown_fields
from kvscope.engine.checks import whole_number
from kvscope.engine.config import ConfigError
from kvscope.engine.request import RequestSpec

MAX_CONVERSATIONS = 10_000
MAX_TURNS = 100
MAX_TEXT_CHARS = 100_000  # one message: a long pasted document, not a book
MAX_CONCURRENT = 1_000
# Each turn resends its conversation so far: what all requests carry grows with the square of a
# conversation's length, and it is tokenized and held up front. 33,554,432 characters is ~8M tokens.
MAX_SENT_CHARS = 1 << 25
_CHAT_KEYS = {"system_prompt", "conversations", "concurrent_conversations"}
_TURN_KEYS = {"user", "assistant"}
_ARRIVAL_CHUNK = 1024


@dataclass(frozen=True)
class ChatTurn:
    user: str
    assistant: str | None = None  # the written answer a later turn resends; the last turn has none


@dataclass(frozen=True)
class ChatScript:
    system_prompt: str
    conversations: tuple  # of tuples of ChatTurn
    concurrent_conversations: int = 4

    @property
    def num_turns(self) -> int:
        return sum(len(c) for c in self.conversations)


def chat_script_from_dict(data, label: str) -> ChatScript:
    """A ChatScript from a workload TOML's [chat] table; every mistake named with where it is."""
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: expected a table with system_prompt and [[chat.conversations]], got {data!r:.60}")
    said = unknown_fields(data, _CHAT_KEYS)
    if said:
        raise ConfigError(f"{label}: {said}")
    system = _message(data.get("system_prompt"), f"{label}: system_prompt")
    concurrent = whole_number(data.get("concurrent_conversations", 4), f"{label}: concurrent_conversations", 1,
                              MAX_CONCURRENT)
    conversations = data.get("conversations")
    if not isinstance(conversations, list) or not conversations:
        raise ConfigError(f"{label}: conversations must be a list of at least one [[chat.conversations]] table")
    if len(conversations) > MAX_CONVERSATIONS:
        raise ConfigError(f"{label}: at most {MAX_CONVERSATIONS:,} conversations, got {len(conversations):,}")
    script = ChatScript(system, tuple(_conversation(c, f"{label}: conversations[{i}]")
                                      for i, c in enumerate(conversations)), concurrent)
    sent = _characters_sent(script)
    if sent > MAX_SENT_CHARS:
        raise ConfigError(f"{label}: its turns would send {sent:,} characters in all (each turn resends the "
                          f"conversation so far), more than {MAX_SENT_CHARS:,}: shorten the messages or the conversations")
    return script


def _characters_sent(script: ChatScript) -> int:
    total = 0
    for turns in script.conversations:
        so_far = len(script.system_prompt)
        for turn in turns:
            so_far += len(turn.user)
            total += so_far
            so_far += len(turn.assistant or "")
    return total


def _conversation(data, label: str) -> tuple:
    if not isinstance(data, dict) or set(data) != {"turns"}:
        raise ConfigError(f"{label}: expected a table with one field, turns = [{{ user = \"...\" }}, ...]")
    turns = data["turns"]
    if not isinstance(turns, list) or not 1 <= len(turns) <= MAX_TURNS:
        raise ConfigError(f"{label}: turns must be a list of 1 to {MAX_TURNS} {{ user, assistant }} tables")
    result = []
    for j, turn in enumerate(turns):
        where = f"{label}.turns[{j}]"
        if not isinstance(turn, dict) or "user" not in turn or set(turn) - _TURN_KEYS:
            raise ConfigError(f"{where}: expected {{ user = \"...\", assistant = \"...\" }} (assistant only before "
                              f"the last turn), got {turn!r:.80}")
        last = j == len(turns) - 1
        if last and "assistant" in turn:
            raise ConfigError(f"{where}: the last turn's answer is the model's to write; leave assistant out")
        if not last and "assistant" not in turn:
            raise ConfigError(f"{where}: a turn before the last needs the assistant's answer, which the next turn "
                              "resends")
        answer = None if last else _message(turn["assistant"], f"{where}: assistant")
        result.append(ChatTurn(_message(turn["user"], f"{where}: user"), answer))
    return tuple(result)


def _message(value, what: str) -> str:
    text = require_text(value, what)
    if len(text) > MAX_TEXT_CHARS:
        raise ConfigError(f"{what}: at most {MAX_TEXT_CHARS:,} characters, got {len(text):,}")
    return text


def turn_order(script: ChatScript) -> list[tuple[int, int]]:
    """(conversation, turn) of every request, in the order they are sent: the open conversations
    take turns, and a finished one hands its place to the next in the file."""
    waiting = list(range(len(script.conversations)))[::-1]
    open_ = [[waiting.pop(), 0] for _ in range(min(script.concurrent_conversations, len(waiting)))]
    order = []
    while open_:
        still_open = []
        for conversation, turn in open_:
            order.append((conversation, turn))
            if turn + 1 < len(script.conversations[conversation]):
                still_open.append([conversation, turn + 1])
            elif waiting:
                still_open.append([waiting.pop(), 0])
        open_ = still_open
    return order


def messages_for(script: ChatScript, conversation: int, turn: int) -> list[dict]:
    """The conversation up to this turn's question, as a chat client sends it."""
    messages = [{"role": "system", "content": script.system_prompt}]
    for earlier in script.conversations[conversation][:turn]:
        messages += [{"role": "user", "content": earlier.user}, {"role": "assistant", "content": earlier.assistant}]
    messages.append({"role": "user", "content": script.conversations[conversation][turn].user})
    return messages


_WORDS = re.compile(r"\w+|[^\w\s]")


def hashed_token_ids(messages: list[dict], vocab_size: int) -> list[int]:
    """Token ids for a model without a tokenizer: one per word or punctuation mark, by a stable hash,
    so equal text gives equal ids (the shared prefixes stay shared)."""
    ids = []
    for message in messages:
        for word in [message["role"], ":", *_WORDS.findall(message["content"])]:
            ids.append(zlib.crc32(word.encode("utf-8")) % vocab_size)
    return ids


def chat_requests(spec, script: ChatScript, vocab_size: int, seed: int = 0, tokenizer=None) -> Iterator[RequestSpec]:
    """The workload's requests in arrival order. With a ChatTokenizer they carry the prompt's text
    and the model's stop tokens; without one, hashed ids and the full max_tokens."""
    order = turn_order(script)
    rng = np.random.default_rng(seed)
    prompts: dict[tuple[int, int], tuple[list[int], str | None]] = {}
    stops = tokenizer.stop_token_ids if tokenizer is not None else frozenset()
    clock = 0.0
    for start in range(0, spec.num_requests, _ARRIVAL_CHUNK):
        count = min(_ARRIVAL_CHUNK, spec.num_requests - start)
        if spec.arrival_rate_per_s > 0:
            gaps = rng.exponential(1.0 / spec.arrival_rate_per_s, size=count)
            if start == 0:
                gaps[0] = 0.0  # the first request opens the run
            arrivals = clock + np.cumsum(gaps)
            clock = float(arrivals[-1])
        else:
            arrivals = np.zeros(count)
        max_tokens = spec.output_tokens.sample(rng, count)
        for k in range(count):
            index = start + k
            key = order[index % len(order)]
            if key not in prompts:
                messages = messages_for(script, *key)
                prompts[key] = (tokenizer.chat_prompt(messages) if tokenizer is not None
                                else (hashed_token_ids(messages, vocab_size), None))
            ids, text = prompts[key]
            yield RequestSpec(index, float(arrivals[k]), ids, int(max_tokens[k]), stop_token_ids=stops,
                              prompt_text=text)
