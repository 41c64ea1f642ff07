"""What a shape sweep reports (sweep_peers.py, bench_decode_lengths.py --sweep): the table worst
first, the geomean and minimum of the speed-ups, the slowest shapes, and a plot of the speed-up
per shape (PNG through matplotlib where it is installed, else SVG written by hand).

Rows are dicts with "problem", "us", "peer_us" and "speedup" (peer time / ours: above 1 is faster
than the peer)."""
import math
import os
from xml.sax.saxutils import escape


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def summary(rows, peer_name, slowest=5):
    """{geomean, min, max, below_peer, slowest: [problems]} of the rows."""
    speedups = [r["speedup"] for r in rows]
    ordered = sorted(rows, key=lambda r: r["speedup"])
    return {"peer": peer_name, "problems": len(rows), "geomean": geomean(speedups), "min": min(speedups, default=None),
            "max": max(speedups, default=None), "below_peer": sum(s < 1.0 for s in speedups),
            "slowest": [{"problem": r["problem"], "speedup": r["speedup"]} for r in ordered[:slowest]]}


def print_summary(stats, unit="x"):
    print(f"\n{stats['problems']} problems against {stats['peer']}: geomean {stats['geomean']:.3f}{unit}, "
          f"min {stats['min']:.3f}{unit}, max {stats['max']:.3f}{unit}, {stats['below_peer']} below 1")
    print("slowest: " + "; ".join(f"{s['problem']} {s['speedup']:.2f}{unit}" for s in stats["slowest"]))


def plot(rows, path, title, ylabel, target=None):
    """The speed-up of every shape, sorted, on a log axis with the peer's line at 1 (and the
    target's, if given). Writes PNG where matplotlib is installed, else SVG beside `path`; returns
    the path written."""
    values = sorted(r["speedup"] for r in rows)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        path = os.path.splitext(path)[0] + ".svg"
        with open(path, "w") as f:
            f.write(_svg(values, title, ylabel, target))
        return path
    fig, ax = plt.subplots(figsize=(8, 3.6), dpi=120)
    colors = ["#c53030" if v < (target or 1.0) else "#2b6cb0" for v in values]
    ax.bar(range(len(values)), values, width=1.0, color=colors)
    ax.axhline(1.0, color="black", linewidth=0.8)
    if target:
        ax.axhline(target, color="#c53030", linewidth=0.8, linestyle="--", label=f"target {target:g}")
        ax.legend(loc="upper left", fontsize=8)
    ax.set_yscale("log")
    from matplotlib.ticker import FuncFormatter, NullFormatter
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_yticks([t for t in (0.01, 0.03, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8) if values[0] / 1.2 <= t <= values[-1] * 1.2])
    ax.set_xlim(-0.5, len(values) - 0.5)
    ax.set_xlabel(f"{len(values)} shapes, slowest first")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.text(0.99, 0.03, f"geomean {geomean(values):.2f}, min {values[0]:.2f}", transform=ax.transAxes, ha="right",
            fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _svg(values, title, ylabel, target):
    width, height, left, bottom, top = 720, 320, 60, 40, 30
    low, high = math.log(min(min(values), 0.5)), math.log(max(max(values), 2.0))
    plot_h, bar_w = height - bottom - top, (width - left - 10) / len(values)

    def y(v):
        return top + plot_h * (high - math.log(v)) / (high - low)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             f'font-size="11"><rect width="100%" height="100%" fill="white"/>',
             f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="13">{escape(title)}</text>']
    for i, v in enumerate(values):
        color = "#c53030" if v < (target or 1.0) else "#2b6cb0"
        y0, y1 = sorted((y(1.0), y(v)))
        parts.append(f'<rect x="{left + i * bar_w:.1f}" y="{y0:.1f}" width="{max(bar_w, 1):.1f}" '
                     f'height="{max(y1 - y0, 0.5):.1f}" fill="{color}"/>')
    for tick in (0.25, 0.5, 1, 2, 4, 8):
        if low <= math.log(tick) <= high:
            parts.append(f'<line x1="{left}" x2="{width - 10}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
                         f'stroke="{"black" if tick == 1 else "#ddd"}" stroke-width="0.8"/>'
                         f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:g}</text>')
    if target:
        parts.append(f'<line x1="{left}" x2="{width - 10}" y1="{y(target):.1f}" y2="{y(target):.1f}" '
                     f'stroke="#c53030" stroke-dasharray="4 3"/>')
    parts.append(f'<text x="14" y="{top + plot_h / 2}" transform="rotate(-90 14 {top + plot_h / 2})" '
                 f'text-anchor="middle">{escape(ylabel)}</text>')
    parts.append(f'<text x="{width / 2}" y="{height - 12}" text-anchor="middle">{len(values)} shapes, slowest first; '
                 f'geomean {geomean(values):.2f}, min {values[0]:.2f}</text></svg>')
    return "\n".join(parts)
