#!/usr/bin/env python3
"""chart_canvas.py CHART... — the report's charts keep their labels and keys
inside their canvases (issue 33 item 5), without a browser:

SVG: every text of a gnuplot SVG chart inside its canvas, and no key
(legend) entry on a plot frame.

gnuplot's SVG terminal writes each text as
  <g transform="translate(X,Y) [rotate(A)]" ... font-size="S" text-anchor="start|middle|end"><text>T</text></g>
with (X, Y) its anchor on the baseline. The box of a text is estimated from
its font size: width len(T) x 0.6 S (wider than DejaVu Sans' average, so a
label that fits here fits in a browser), ascent 0.8 S, descent 0.25 S. A
box that leaves the canvas (viewBox) is a clipped label: the commit line of
a two-line x tic label under the canvas' bottom edge, a legend past its
right edge.

PNG: no ink on the canvas' outermost pixels (a label or key cut by the edge
leaves some; everything gnuplot draws inside has the white background
around it). The PNG is decoded here (8-bit RGB or RGBA, zlib), so the test
needs nothing but python3.

A key entry is a text right of the plot frame's right edge ("set key outside
right") or left of it; an entry whose box crosses a vertical edge of a frame
(the border path gnuplot draws first, "M x0,y0 L x0,y1 L x1,y1 L x1,y0 z")
overlaps it. Exit 1 and one line per problem; 0 and "ok N texts" otherwise.
"""
import re
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"
W_EM, ASC, DESC = 0.6, 0.8, 0.25


def boxes(root):
    for g in root.iter(NS + "g"):
        t = g.find(NS + "text")
        if t is None:
            continue
        text = "".join(t.itertext())
        m = re.match(r"translate\(([-\d.]+),([-\d.]+)\)(?:\s*rotate\(([-\d.]+)\))?", g.get("transform", ""))
        if not m or not text.strip():
            continue
        x, y, rot = float(m.group(1)), float(m.group(2)), float(m.group(3) or 0)
        size = float(g.get("font-size", "12"))
        w = len(text.rstrip()) * W_EM * size
        anchor = g.get("text-anchor", "start")
        a0 = {"start": 0, "middle": -w / 2, "end": -w}[anchor]
        # along the text: [a0, a0 + w]; across: [-ASC size, DESC size]
        if rot % 360 == 0:
            yield text, (x + a0, y - ASC * size, x + a0 + w, y + DESC * size)
        elif rot % 360 in (270, -90):       # bottom to top
            yield text, (x - ASC * size, y - a0 - w, x + DESC * size, y - a0)
        elif rot % 360 in (90, -270):
            yield text, (x - DESC * size, y + a0, x + ASC * size, y + a0 + w)
        else:                                # rotated tic labels: the corners of the rotated box
            import math
            c, s = math.cos(math.radians(rot)), math.sin(math.radians(rot))
            pts = [(u, v) for u in (a0, a0 + w) for v in (-ASC * size, DESC * size)]
            xs = [x + u * c - v * s for u, v in pts]
            ys = [y + u * s + v * c for u, v in pts]
            yield text, (min(xs), min(ys), max(xs), max(ys))


def frames(root):
    """The rectangles of the plot borders (closed 4-corner paths)."""
    out = []
    for p in root.iter(NS + "path"):
        d = p.get("d", "")
        m = re.fullmatch(r"\s*M([\d.]+),([\d.]+) L([\d.]+),([\d.]+) L([\d.]+),([\d.]+) L([\d.]+),([\d.]+) Z\s*", d, re.I)
        if m:
            v = [float(g) for g in m.groups()]
            xs, ys = v[0::2], v[1::2]
            if len(set(round(a) for a in xs)) == 2 and len(set(round(b) for b in ys)) == 2:
                out.append((min(xs), min(ys), max(xs), max(ys)))
    return out


def check(path):
    root = ET.parse(path).getroot()
    vb = [float(v) for v in root.get("viewBox").split()]
    W, H = vb[2], vb[3]
    bad, n = [], 0
    fr = frames(root)
    for text, (x0, y0, x1, y1) in boxes(root):
        n += 1
        if x0 < -0.5 or y0 < -0.5 or x1 > W + 0.5 or y1 > H + 0.5:
            bad.append("%s: \"%s\" at [%.0f..%.0f] x [%.0f..%.0f] leaves the %gx%g canvas" % (path, text, x0, x1, y0, y1, W, H))
            continue
        for (fx0, fy0, fx1, fy1) in fr:
            inside_y = y1 > fy0 and y0 < fy1
            for edge in (fx0, fx1):
                if inside_y and x0 < edge - 1 < x1 - 2 and x1 - x0 < (fx1 - fx0) * 0.9:
                    bad.append("%s: \"%s\" at [%.0f..%.0f] x [%.0f..%.0f] crosses a plot frame's edge x=%.0f" %
                               (path, text, x0, x1, y0, y1, edge))
    return n, bad


def png_rows(path):
    """The rows of an 8-bit, non-interlaced RGB(A) PNG as lists of pixels."""
    import struct, zlib
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, hdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR": hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT": idat += body
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = hdr
    assert depth == 8 and ctype in (2, 6) and not interlace, "unsupported PNG (depth %d, colour %d)" % (depth, ctype)
    bpp = 3 if ctype == 2 else 4
    raw, stride, prev, rows = zlib.decompress(idat), w * bpp, bytearray(w * bpp), []
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, bpp, rows


def check_png(path):
    w, h, bpp, rows = png_rows(path)
    def ink(x, y):
        px = rows[y][x * bpp:x * bpp + 3]
        return min(px) < 200
    edges = {"top": [(x, 0) for x in range(w)], "bottom": [(x, h - 1) for x in range(w)],
             "left": [(0, y) for y in range(h)], "right": [(w - 1, y) for y in range(h)]}
    bad = ["%s: ink on the %s edge of the %dx%d canvas (a label or key cut off)" % (path, e, w, h)
           for e, pts in edges.items() if any(ink(x, y) for x, y in pts)]
    return 1, bad


def main(paths):
    total, problems = 0, []
    for p in paths:
        n, bad = check_png(p) if p.endswith(".png") else check(p)
        total += n
        problems += bad
    for b in problems:
        print(b)
    if not problems:
        print("ok: %d chart(s), %d SVG texts inside their canvases" % (len(paths), total))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
