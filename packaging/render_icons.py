#!/usr/bin/env python3
"""Render Draftwise's hand-written SVG icons to the PNG / ICO / ICNS files that are committed.

Usage (from the repo root; needs only PySide6, runs offscreen):

    python packaging/render_icons.py                 # rewrite resources/icons/png/*, .ico, .icns
    python packaging/render_icons.py --check         # exit 1 if a committed render is stale
    python packaging/render_icons.py --preview DIR   # also write tray previews on light/dark panels

Sources: draftwise.svg (app icon), draftwise-small.svg (the app icon redrawn on a 16 px grid, for the
16 px render), tray-<state>.svg.

Outputs (all under resources/icons/):
- png/draftwise-<N>.png for N in tuner.desktop.ICON_SIZES_PX (the hicolor sizes we install);
- png/tray-<state>-<N>.png for N in TRAY_SIZES_PX (for platforms without Qt's SVG icon engine);
- draftwise.ico (Windows: PyInstaller ``icon=``, installer) with PNG-compressed entries;
- draftwise.icns (macOS: the spec's BUNDLE ``icon=``) with PNG entries (ic07..ic14).

Rendering uses QtSvg's QSvgRenderer into a transparent ARGB image with antialiasing.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QRectF, Qt  # noqa: E402
from PySide6.QtGui import QColor, QGuiApplication, QImage, QPainter  # noqa: E402
from PySide6.QtSvg import QSvgRenderer  # noqa: E402

from tuner.desktop import ICON_SIZES_PX  # noqa: E402

ICONS = REPO / "resources" / "icons"
TRAY_STATES = ("idle", "tuning", "serving", "error")
TRAY_SIZES_PX = (16, 22, 24, 32, 48, 64)
ICO_SIZES_PX = (16, 24, 32, 48, 64, 128, 256)
# ICNS element types holding PNG data (Apple "icns" format): type -> pixel size.
ICNS_TYPES = (("ic11", 32), ("ic12", 64), ("ic07", 128), ("ic13", 256), ("ic08", 256),
              ("ic14", 512), ("ic09", 512), ("ic10", 1024))
# Largest render drawn from draftwise-small.svg (hand-fitted to the 16 px grid).
SMALL_MAX_PX = 16
# Panel colours for the legibility preview (a light GNOME/KDE panel and a dark one).
LIGHT_PANEL = "#f2f2f2"
DARK_PANEL = "#1e1e1e"


def render_svg(svg: Path, size_px: int) -> QImage:
    """Render ``svg`` into a ``size_px`` × ``size_px`` transparent ARGB32 image.

    Raises:
        ValueError: the SVG does not parse (names the file).
    """
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise ValueError(f"{svg}: not a valid SVG for QtSvg")
    img = QImage(size_px, size_px, QImage.Format.Format_ARGB32_Premultiplied)
    img.fill(Qt.GlobalColor.transparent)
    painter = QPainter(img)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, True)
    renderer.render(painter, QRectF(0, 0, size_px, size_px))
    painter.end()
    return img.convertToFormat(QImage.Format.Format_ARGB32)


def png_bytes(img: QImage) -> bytes:
    """Encode ``img`` as PNG bytes."""
    data = QByteArray()
    buf = QBuffer(data)
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    if not img.save(buf, "PNG"):
        raise RuntimeError("Qt could not encode a PNG")
    buf.close()
    return bytes(data.data())


def ico_bytes(pngs: dict[int, bytes]) -> bytes:
    """An ICO container with one PNG-compressed image per size (Windows Vista+ reads these)."""
    sizes = sorted(pngs)
    header = struct.pack("<HHH", 0, 1, len(sizes))
    offset = 6 + 16 * len(sizes)
    entries, blobs = b"", b""
    for s in sizes:
        blob = pngs[s]
        dim = 0 if s >= 256 else s  # 0 means 256 in the ICO directory
        entries += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(blob), offset)
        offset += len(blob)
        blobs += blob
    return header + entries + blobs


def icns_bytes(pngs: dict[int, bytes]) -> bytes:
    """An ICNS container with PNG elements for the types in ``ICNS_TYPES``."""
    body = b""
    for ostype, size in ICNS_TYPES:
        blob = pngs[size]
        body += ostype.encode("ascii") + struct.pack(">I", 8 + len(blob)) + blob
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def app_icon_source(size_px: int) -> Path:
    """The SVG the app icon is rendered from at ``size_px``: the 16 px-grid variant up to
    ``SMALL_MAX_PX``, the full drawing above."""
    return ICONS / ("draftwise-small.svg" if size_px <= SMALL_MAX_PX else "draftwise.svg")


def planned_outputs() -> dict[Path, bytes]:
    """Every output file and its bytes, rendered now."""
    out: dict[Path, bytes] = {}
    app_png = {s: png_bytes(render_svg(app_icon_source(s), s))
               for s in sorted(set(ICON_SIZES_PX) | set(ICO_SIZES_PX) | {1024})}
    for s in ICON_SIZES_PX:
        out[ICONS / "png" / f"draftwise-{s}.png"] = app_png[s]
    for state in TRAY_STATES:
        for s in TRAY_SIZES_PX:
            out[ICONS / "png" / f"tray-{state}-{s}.png"] = png_bytes(render_svg(ICONS / f"tray-{state}.svg", s))
    out[ICONS / "draftwise.ico"] = ico_bytes({s: app_png[s] for s in ICO_SIZES_PX})
    out[ICONS / "draftwise.icns"] = icns_bytes(app_png)
    return out


def composite_on(img: QImage, panel: str, pad_px: int = 4) -> QImage:
    """``img`` drawn on a square of colour ``panel`` with ``pad_px`` margin (what a tray shows)."""
    w = img.width() + 2 * pad_px
    out = QImage(w, w, QImage.Format.Format_ARGB32)
    out.fill(QColor(panel))
    p = QPainter(out)
    p.drawImage(pad_px, pad_px, img)
    p.end()
    return out


def write_preview(folder: Path, zoom: int = 8) -> Path:
    """Write ``tray-preview.png``: each tray icon at 16 px (and the app icon at 16/22 px) on a light
    and a dark panel, magnified ``zoom``× with nearest-neighbour so single pixels can be judged."""
    folder.mkdir(parents=True, exist_ok=True)
    tiles = [render_svg(ICONS / f"tray-{s}.svg", 16) for s in TRAY_STATES]
    tiles.append(render_svg(app_icon_source(16), 16))
    tiles.append(render_svg(app_icon_source(22), 22))
    cell = 30
    sheet = QImage(cell * len(tiles), cell * 2, QImage.Format.Format_ARGB32)
    p = QPainter(sheet)
    for row, panel in enumerate((LIGHT_PANEL, DARK_PANEL)):
        p.fillRect(0, row * cell, sheet.width(), cell, QColor(panel))
        for col, img in enumerate(tiles):
            off = (cell - img.width()) // 2
            p.drawImage(col * cell + off, row * cell + off, img)
    p.end()
    big = sheet.scaled(sheet.width() * zoom, sheet.height() * zoom,
                       Qt.AspectRatioMode.IgnoreAspectRatio, Qt.TransformationMode.FastTransformation)
    path = folder / "tray-preview.png"
    big.save(str(path), "PNG")
    sheet.save(str(folder / "tray-preview-1x.png"), "PNG")
    return path


def main(argv: list[str] | None = None) -> int:
    """Render (default), or ``--check`` that committed renders are current; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed files; write nothing")
    ap.add_argument("--preview", type=Path, metavar="DIR", help="also write tray previews into DIR")
    args = ap.parse_args(argv)
    app = QGuiApplication.instance() or QGuiApplication([sys.argv[0]])  # noqa: F841 (keeps Qt alive)
    outputs = planned_outputs()
    stale = []
    for path, data in outputs.items():
        if args.check:
            if not path.is_file() or path.read_bytes() != data:
                stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.is_file() or path.read_bytes() != data:
                path.write_bytes(data)
                print(f"wrote {path.relative_to(REPO)}", file=sys.stderr)
    if args.preview:
        print(f"preview: {write_preview(args.preview)}", file=sys.stderr)
    if stale:
        for p in stale:
            print(f"stale render: {p.relative_to(REPO)} (run python packaging/render_icons.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
