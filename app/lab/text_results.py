"""What a headless run's text requests said: each one's prompt and answer, as a report holds them."""

from __future__ import annotations

import re


def text_results(engine, tokenizer) -> list[dict]:
    """The finished text requests in request order: prompt and answer text, token counts, why each ended."""
    rows = []
    for req in sorted(engine.finished_text_requests, key=lambda r: r.request_id):
        output_ids = req.token_ids[req.num_prompt_tokens:]
        rows.append({
            "request_id": req.request_id,
            "prompt": req.prompt_text,
            "output": tokenizer.decode(output_ids),
            "finish_reason": req.finish_reason,
            "prompt_tokens": req.num_prompt_tokens,
            "cached_prompt_tokens": req.num_cached_prompt_tokens,
            "output_tokens": len(output_ids),
        })
    return rows


def question_of(row: dict, tokenizer, width: int = 70) -> str:
    """What the prompt's last user turn asks, as a person reads it: the chat template's special
    tokens and role name left out (with a template whose turns cannot be told apart, the end of
    the whole prompt); a long question keeps its end, where the question usually is."""
    words = ""
    markers = sorted(getattr(getattr(tokenizer, "tokenizer", None), "all_special_tokens", None) or [],
                     key=len, reverse=True)
    if markers:
        turns = [t.strip() for t in re.split("|".join(map(re.escape, markers)), row["prompt"]) if t.strip()]
        asked = []
        for i, turn in enumerate(turns):
            role, _, text = turn.partition("\n") if "\n" in turn else turn.partition(" ")
            if role.strip() == "user":  # ChatML: "user\nWhat ..."; Llama 3: "user" between markers, then the text
                asked.append(text.strip() or (turns[i + 1] if i + 1 < len(turns) else ""))
        words = " ".join(asked[-1].split()) if asked else ""
    if not words:
        words = " ".join(tokenizer.decode(tokenizer.encode(row["prompt"])).split())
        words = words.removesuffix("assistant").rstrip()  # the template's last word announces the answer
    return words if len(words) <= width else "..." + words[-(width - 3):]


def shorten(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."
