"""`.streamlit/config.toml`: the upload limit is the pages' largest cap, usage statistics are off,
the legacy pages/ sidebar navigation is hidden, and both themes pass WCAG 2.1 AA contrast for
every text/background pair Streamlit draws.

Contrast follows WCAG 2.1 §1.4.3 / §1.4.11: relative luminance of sRGB colours
(https://www.w3.org/TR/WCAG21/#dfn-relative-luminance), ratio (L1 + 0.05) / (L2 + 0.05);
text needs 4.5:1, user-interface parts (slider thumbs, toggles, chart marks) 3:1.
"""

from __future__ import annotations

import math
import tomllib

import pytest

from kernels.bench.records import MAX_BENCH_JSON_BYTES
from simulation.traces import DEFAULT_MAX_BYTES as TRACE_CAP_BYTES
from sizing.engine.vllm_log import MAX_LOG_BYTES
from sizing.hf_config import MAX_CONFIG_BYTES
from support.paths import ROOT

CONFIG = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
TEXT_AA, UI_AA = 4.5, 3.0
WHITE = "#ffffff"
# Streamlit draws captions, help text and placeholders in its "fadedText60": the body text at 60 %
# opacity (streamlit/frontend theme utils: transparentize(bodyText, 0.4)).
CAPTION_OPACITY = 0.6
HUES = ("red", "orange", "yellow", "green", "blue", "violet", "gray")


def _rgb(colour: str) -> tuple[float, float, float]:
    text = colour.lstrip("#")
    assert len(text) == 6, f"{colour}: write theme colours as #rrggbb"
    return tuple(int(text[i:i + 2], 16) / 255 for i in (0, 2, 4))


def luminance(colour: str | tuple[float, float, float]) -> float:
    channels = _rgb(colour) if isinstance(colour, str) else colour
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a, b) -> float:
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def blend(colour: str, over: str, opacity: float) -> tuple[float, float, float]:
    """``colour`` drawn at ``opacity`` over ``over`` (alpha compositing in sRGB, as browsers do)."""
    return tuple(opacity * c + (1 - opacity) * b for c, b in zip(_rgb(colour), _rgb(over)))


def test_contrast_matches_published_figures():
    # WCAG's own anchors: black on white is 21:1; #767676 on white is the lightest grey at 4.5:1.
    assert contrast("#000000", WHITE) == pytest.approx(21.0)
    assert contrast("#767676", WHITE) == pytest.approx(4.54, abs=0.01)
    assert contrast("#777777", WHITE) < TEXT_AA
    # 50 % black over white is 127.5 / 255 grey: between #7f7f7f and #808080.
    assert contrast("#808080", WHITE) < contrast(blend("#000000", WHITE, 0.5), WHITE) < contrast("#7f7f7f", WHITE)


def pairs(theme: dict) -> list[tuple[str, object, object, float]]:
    """(what, foreground, background, required ratio) for one theme section."""
    bg, bg2, text = theme["backgroundColor"], theme["secondaryBackgroundColor"], theme["textColor"]
    found = [
        ("body text", text, bg, TEXT_AA),
        ("sidebar and input text", text, bg2, TEXT_AA),
        ("captions", blend(text, bg, CAPTION_OPACITY), bg, TEXT_AA),
        ("sidebar captions", blend(text, bg2, CAPTION_OPACITY), bg2, TEXT_AA),
        ("links", theme["linkColor"], bg, TEXT_AA),
        ("inline code", theme["codeTextColor"], theme["codeBackgroundColor"], TEXT_AA),
        ("table headers", theme["dataframeHeaderTextColor"], theme["dataframeHeaderBackgroundColor"], TEXT_AA),
        ("primary button label (always white)", WHITE, theme["primaryColor"], TEXT_AA),
        ("slider, toggle and focus ring", theme["primaryColor"], bg, UI_AA),
    ]
    for hue in HUES:
        found += [
            (f"{hue} alert text", theme[f"{hue}TextColor"], theme[f"{hue}BackgroundColor"], TEXT_AA),
            (f"{hue} text", theme[f"{hue}TextColor"], bg, TEXT_AA),
            (f"{hue} marks", theme[f"{hue}Color"], bg, UI_AA),
        ]
    return found


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_theme_passes_wcag_aa(mode):
    theme = CONFIG["theme"][mode]
    failing = [f"{what}: {contrast(fg, bg):.2f} < {need}" for what, fg, bg, need in pairs(theme)
               if contrast(fg, bg) < need]
    assert not failing, failing


def test_both_modes_define_the_same_colours():
    light, dark = CONFIG["theme"]["light"], CONFIG["theme"]["dark"]
    assert set(light) == set(dark)
    assert luminance(light["backgroundColor"]) > 0.9 and luminance(dark["backgroundColor"]) < 0.02


def test_upload_limit_is_the_largest_page_cap_and_statistics_are_off():
    caps = {"config.json": MAX_CONFIG_BYTES, "vLLM log": MAX_LOG_BYTES, "trace CSV": TRACE_CAP_BYTES,
            "harness JSON": MAX_BENCH_JSON_BYTES}
    # Streamlit's server counts maxUploadSize in MiB (size × 1024 × 1024).
    assert CONFIG["server"]["maxUploadSize"] == math.ceil(max(caps.values()) / 2**20)
    assert CONFIG["browser"]["gatherUsageStats"] is False


def test_legacy_pages_navigation_is_hidden():
    # A fresh server's first run of a deep link is a legacy pages/ run (ui/router.py): with this
    # option its navigation is drawn hidden instead of as a sidebar of file names.
    # tests/browser/test_cold_link_browser.py watches a cold /kernels for that sidebar.
    assert CONFIG["client"]["showSidebarNavigation"] is False
