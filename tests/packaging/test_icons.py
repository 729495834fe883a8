"""Icons: SVGs render with QtSvg, committed PNG renders are current, tray icons read at 16 px on
light and dark panels and stay distinguishable without colour."""

from __future__ import annotations

import itertools
import struct
import sys
from pathlib import Path

import pytest

from tuner import desktop

pytest.importorskip("PySide6.QtSvg")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "packaging"))
import render_icons  # noqa: E402  (packaging/render_icons.py)
from PySide6.QtGui import QColor, QImage  # noqa: E402

STATES = render_icons.TRAY_STATES


def luminance(c: QColor) -> float:
    """WCAG relative luminance of an opaque colour, 0..1."""
    def lin(v: float) -> float:
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4
    return 0.2126 * lin(c.redF()) + 0.7152 * lin(c.greenF()) + 0.0722 * lin(c.blueF())


def contrast(a: QColor, b: QColor) -> float:
    """WCAG contrast ratio between two opaque colours, 1..21."""
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def pixels(img: QImage):
    for y in range(img.height()):
        for x in range(img.width()):
            yield x, y, img.pixelColor(x, y)


def grey(img: QImage) -> list[float]:
    return [luminance(c) for _, _, c in pixels(img)]


@pytest.fixture(scope="module")
def tray16(qapp) -> dict[str, QImage]:
    return {s: render_icons.render_svg(REPO / "resources" / "icons" / f"tray-{s}.svg", 16) for s in STATES}


def test_every_svg_is_valid_and_draws_something(qapp):
    svgs = [REPO / "resources" / "icons" / n for n in ("draftwise.svg", "draftwise-small.svg")] + [desktop.tray_icon_svg(s) for s in STATES]
    for svg in svgs:
        img = render_icons.render_svg(svg, 32)
        opaque = sum(1 for _, _, c in pixels(img) if c.alpha() > 200)
        assert opaque > 0.5 * 32 * 32, f"{svg} renders mostly transparent ({opaque} opaque pixels)"


def test_committed_renders_match_the_svgs(qapp):
    """Every committed PNG / ICO / ICNS exists, and PNGs match a fresh render (small tolerance for Qt versions)."""
    for path, fresh in render_icons.planned_outputs().items():
        assert path.is_file(), f"{path} missing: run python packaging/render_icons.py"
        if path.suffix != ".png":
            continue
        old, new = QImage(str(path)), QImage.fromData(fresh)
        assert (old.width(), old.height()) == (new.width(), new.height()), path
        step = max(1, old.width() // 64)  # sample big icons on a grid
        diffs = [
            max(abs(a - b) for a, b in zip(old.pixelColor(x, y).getRgb(), new.pixelColor(x, y).getRgb()))
            for y in range(0, old.height(), step) for x in range(0, old.width(), step)
        ]
        assert sum(diffs) / len(diffs) < 3, f"{path} is stale: run python packaging/render_icons.py"


def test_app_icon_pngs_have_their_sizes():
    for size in desktop.ICON_SIZES_PX:
        head = desktop.app_icon_png(size).read_bytes()[:24]
        assert head[:8] == b"\x89PNG\r\n\x1a\n"
        assert struct.unpack(">II", head[16:24]) == (size, size)


def test_ico_and_icns_containers_are_well_formed():
    ico = (REPO / "resources" / "icons" / "draftwise.ico").read_bytes()
    reserved, kind, count = struct.unpack("<HHH", ico[:6])
    assert (reserved, kind) == (0, 1) and count == len(render_icons.ICO_SIZES_PX)
    for i in range(count):
        w, h, _, _, planes, bpp, size, offset = struct.unpack("<BBBBHHII", ico[6 + 16 * i: 22 + 16 * i])
        assert ico[offset:offset + 8] == b"\x89PNG\r\n\x1a\n" and offset + size <= len(ico)
    icns = (REPO / "resources" / "icons" / "draftwise.icns").read_bytes()
    assert icns[:4] == b"icns" and struct.unpack(">I", icns[4:8])[0] == len(icns)
    pos, types = 8, []
    while pos < len(icns):
        ostype, length = icns[pos:pos + 4].decode(), struct.unpack(">I", icns[pos + 4:pos + 8])[0]
        assert icns[pos + 8:pos + 16] == b"\x89PNG\r\n\x1a\n"
        types.append(ostype)
        pos += length
    assert pos == len(icns) and "ic10" in types and "ic07" in types


@pytest.mark.parametrize("panel", [render_icons.LIGHT_PANEL, render_icons.DARK_PANEL])
def test_tray_icons_stand_out_on_light_and_dark_panels(tray16, panel):
    """At 16 px on the panel colour: a quarter of the square (outline, glyph, or the fill) has contrast
    ≥ 3:1 against the panel, and so has most of the tile's edge (dark outline on light panels, the fill
    next to it on dark panels)."""
    bg = QColor(panel)
    for state, img in tray16.items():
        shown = render_icons.composite_on(img, panel, pad_px=0)
        visible = sum(1 for _, _, c in pixels(shown) if contrast(c, bg) >= 3.0)
        assert visible >= 0.25 * 16 * 16, f"tray-{state} on {panel}: only {visible} pixels stand out"
        # the outline: the ring of pixels at the edge of the tile must stand out on light panels,
        # the fill just inside it on dark panels — either way, the edge is visible on both.
        ring = [c for x, y, c in pixels(shown)
                if min(x, y, 15 - x, 15 - y) <= 1 and (3 <= x <= 12 or 3 <= y <= 12)]  # rounded corners out
        edge_visible = sum(1 for c in ring if contrast(c, bg) >= 3.0)
        assert edge_visible >= 0.45 * len(ring), f"tray-{state} on {panel}: edge blends into the panel"


def test_tray_glyph_contrasts_with_its_tile(tray16):
    for state, img in tray16.items():
        fill = img.pixelColor(3, 3)  # inside the outline, away from the glyph
        inner = [img.pixelColor(x, y) for x in range(3, 13) for y in range(3, 13)]
        glyph = sum(1 for c in inner if contrast(c, fill) >= 3.0)
        assert glyph >= 12, f"tray-{state}: glyph has only {glyph} pixels contrasting with the tile"


def test_tray_states_differ_in_shape_not_only_colour(tray16):
    """Colour-blind users and monochrome panels: grey-level renders of any two states differ clearly."""
    greys = {s: grey(img) for s, img in tray16.items()}
    for a, b in itertools.combinations(STATES, 2):
        # compare shape: normalise each icon to its own mean so a pure hue change does not count
        ga, gb = greys[a], greys[b]
        ma, mb = sum(ga) / len(ga), sum(gb) / len(gb)
        da = [1 if v > ma else 0 for v in ga]
        db = [1 if v > mb else 0 for v in gb]
        differing = sum(x != y for x, y in zip(da, db))
        assert differing >= 12, f"tray-{a} and tray-{b} differ only in colour ({differing} pixels)"
