"""Colours every view shares: one stable colour per request, and the light, dark and
high-contrast (demo mode) themes.

A request keeps its colour in every panel (block map, batch timeline, requests table), so the
eye can follow it: the colour is a function of the request id alone.
"""

from __future__ import annotations

import colorsys
from dataclasses import dataclass

import numpy as np

# 47, not 48: the golden-ratio walk then ends far from where it starts, so request 47 and request
# 47 + 1 (back to colour 0) differ as clearly as any other neighbours (with 48 they were near twins).
NUM_REQUEST_COLORS = 47


def _request_palette(n: int) -> np.ndarray:
    """n distinct, saturated colours: hues stepped by the golden ratio, lightness alternated."""
    colors = np.zeros((n, 3), dtype=np.uint8)
    golden = 0.618033988749895
    for i in range(n):
        hue = (i * golden) % 1.0
        lightness = (0.50, 0.62, 0.42)[i % 3]
        r, g, b = colorsys.hls_to_rgb(hue, lightness, 0.72)
        colors[i] = (round(r * 255), round(g * 255), round(b * 255))
    return colors


REQUEST_COLORS = _request_palette(NUM_REQUEST_COLORS)  # [N, 3] uint8


def hex_color(rgb) -> str:
    """'#rrggbb' of an (r, g, b[, a]) colour, for style sheets and rich text."""
    return "#%02x%02x%02x" % tuple(int(c) for c in rgb[:3])


def request_color(request_id: int) -> tuple[int, int, int]:
    r, g, b = REQUEST_COLORS[int(request_id) % NUM_REQUEST_COLORS]
    return int(r), int(g), int(b)


def request_color_index(request_ids: np.ndarray) -> np.ndarray:
    """Palette index of each request id (vectorised; ids < 0 map to 0 and must be masked by the caller)."""
    return np.mod(np.maximum(request_ids, 0), NUM_REQUEST_COLORS)


@dataclass(frozen=True)
class Theme:
    name: str
    background: tuple  # panel and plot background
    foreground: tuple  # text, axes
    grid: tuple  # faint lines
    free_block: tuple  # an empty KV block
    prefill: tuple  # prompt-chunk work in the batch timeline
    decode: tuple  # decode work
    accent: tuple  # selection, the KV wall line
    warning: tuple  # preemption, eviction
    good: tuple  # admission / refill
    flash: tuple  # a block that changed this frame

    @property
    def is_dark(self) -> bool:
        return sum(self.background) < 3 * 128


DARK = Theme(
    name="dark", background=(24, 27, 33), foreground=(220, 223, 228), grid=(60, 64, 72),
    free_block=(44, 48, 56), prefill=(232, 145, 58), decode=(86, 156, 214), accent=(255, 214, 10),
    warning=(240, 82, 82), good=(98, 201, 120), flash=(255, 255, 255),
)
LIGHT = Theme(
    name="light", background=(250, 250, 250), foreground=(30, 32, 36), grid=(214, 216, 220),
    free_block=(226, 229, 234), prefill=(214, 120, 30), decode=(40, 110, 190), accent=(200, 150, 0),
    warning=(200, 40, 40), good=(40, 150, 70), flash=(20, 20, 20),
)
# For a projector in a lit room: pure black and white, every colour at full saturation and
# well apart in lightness, so the washed-out image still separates free, prefill and decode.
HIGH_CONTRAST = Theme(
    name="contrast", background=(0, 0, 0), foreground=(255, 255, 255), grid=(110, 110, 110),
    free_block=(58, 58, 58), prefill=(255, 150, 0), decode=(0, 170, 255), accent=(255, 235, 0),
    warning=(255, 60, 60), good=(0, 230, 90), flash=(255, 255, 255),
)
THEMES = {"dark": DARK, "light": LIGHT, "contrast": HIGH_CONTRAST}
