"""The course lessons the presets and scenarios cite, by their titles: the course numbers them
("seed 001"), and a number tells a reader nothing."""

from __future__ import annotations

import re

LESSON_TITLES = {
    "000": "The KV Cache Is the Real Batch-Size Ceiling",
    "001": "Continuous Batching and KV Caching",
    "002": "KV cache & continuous batching",
    "004": "Inference Engineering Lesson 10: KV Cache & Memory Math",
}
_SEED_WITH_TITLE = re.compile(r"seed (\d{3}) \(([^)]*)\)")
_SEED_ALONE = re.compile(r"seed (\d{3})")


def readable_lesson(text: str) -> str:
    """A scenario's source as a reader can follow it: "seed 001 (Continuous Batching and KV
    Caching), ...; seed 002" names the lessons by their titles, not by the course's file numbers."""
    titles = dict(LESSON_TITLES)
    titles.update(_SEED_WITH_TITLE.findall(text))
    text = _SEED_WITH_TITLE.sub(lambda m: f"the lesson \"{m.group(2)}\"", text)
    text = _SEED_ALONE.sub(lambda m: f"the lesson \"{titles[m.group(1)]}\"" if m.group(1) in titles
                           else "another lesson of the course", text)
    return text.replace("the seeds'", "the lessons'")


# the lesson whose formula `--accounting lesson` follows
MEMORY_LESSON = readable_lesson("seed 004")
