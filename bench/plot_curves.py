#!/usr/bin/env python3
"""Validation-loss curves of several runs as one SVG (no plotting library needed), and a table:
final validation loss, its ratio to the first run's, and mean step time relative to the first.
   plot_curves.py OUT.svg RUN_DIR [RUN_DIR...]   (the first run is the baseline)"""
import json
import os
import sys


def read(run_dir):
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    val = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
    step_ms = [r["step_ms"] for r in rows[2:]] or [r["step_ms"] for r in rows]
    return val, sum(step_ms) / len(step_ms), rows[-1]


def svg(path, curves):
    w, h, left, bottom, top, right = 720, 420, 60, 40, 20, 110
    xs = [s for _, pts in curves for s, _ in pts]
    ys = [v for _, pts in curves for _, v in pts]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    y0, y1 = y0 - 0.05 * (y1 - y0), y1 + 0.05 * (y1 - y0)
    px = lambda x: left + (x - x0) / (x1 - x0 or 1) * (w - left - right)
    py = lambda y: h - bottom - (y - y0) / (y1 - y0 or 1) * (h - top - bottom)
    colors = ["#222222", "#d62728", "#1f77b4", "#2ca02c", "#9467bd"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<line x1="{left}" y1="{h-bottom}" x2="{w-right}" y2="{h-bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h-bottom}" stroke="black"/>',
           f'<text x="{(w-right+left)/2}" y="{h-8}" text-anchor="middle">step</text>',
           f'<text x="14" y="{(h-bottom+top)/2}" transform="rotate(-90 14 {(h-bottom+top)/2})" text-anchor="middle">validation loss (nats/byte)</text>']
    for i in range(6):
        y = y0 + (y1 - y0) * i / 5
        out.append(f'<text x="{left-6}" y="{py(y)+4:.1f}" text-anchor="end">{y:.2f}</text>')
        out.append(f'<line x1="{left}" y1="{py(y):.1f}" x2="{w-right}" y2="{py(y):.1f}" stroke="#eee"/>')
    for i in range(6):
        x = x0 + (x1 - x0) * i / 5
        out.append(f'<text x="{px(x):.1f}" y="{h-bottom+16}" text-anchor="middle">{x:.0f}</text>')
    for k, (name, pts) in enumerate(curves):
        c = colors[k % len(colors)]
        d = " ".join(f"{px(s):.1f},{py(v):.1f}" for s, v in pts)
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.6" points="{d}"/>')
        out.append(f'<text x="{w-right+10}" y="{top+16+18*k}" fill="{c}">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    path, runs = sys.argv[1], sys.argv[2:]
    data = [(os.path.basename(r.rstrip("/")), *read(r)) for r in runs]
    base_val, base_ms = data[0][1][-1][1], data[0][2]
    print(f"{'run':8} {'final val loss':>15} {'vs ' + data[0][0]:>10} {'step ms':>9} {'time vs ' + data[0][0]:>12} {'skipped':>8}")
    for name, val, ms, last in data:
        print(f"{name:8} {val[-1][1]:15.4f} {val[-1][1] / base_val:10.4f} {ms:9.1f} {ms / base_ms:12.2f} "
              f"{int(last.get('skipped_steps', 0)):8d}")
    svg(path, [(name, val) for name, val, _, _ in data])
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
