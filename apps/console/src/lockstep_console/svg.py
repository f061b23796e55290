"""Plots drawn on the server as SVG text: no charting library, no script, and what is drawn is
exactly the numbers given (the services' answers), scaled and nothing else.

Every plot is an ``<svg role="img">`` with a ``<title>`` and an ``aria-label`` that say in words
what it shows (WAI-ARIA 1.2, "img" role; WCAG 2.2 SC 1.1.1 non-text content), and its colours
keep a contrast of at least 3:1 against white (SC 1.4.11 non-text contrast). Every number put
into the markup is formatted here; every text is escaped (``markupsafe``).
"""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

CANARY = "#b0480a"  # 5.1:1 on white
CONTROL = "#1f5fa8"  # 6.5:1 on white
FLOOR = "#6b2fa3"  # 7.6:1 on white
INK = "#1a1a1a"
GOOD = "#1d7a35"  # 5.4:1 on white
BAD = "#b3261e"  # 6.4:1 on white
GREY = "#6b6b6b"  # 5.3:1 on white
WIDTH = 480


def _n(x: float) -> str:
    return f"{x:.4g}"


def _svg(width: int, height: int, label: str, body: str) -> Markup:
    text = escape(label)
    # Safe: ``body`` holds only numbers formatted here and fixed words; the label is escaped.
    return Markup(  # noqa: S704
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" aria-label="{text}"><title>{text}</title>{body}</svg>'
    )


class _Scale:
    """Values onto pixels, left to right, with some room at both ends."""

    def __init__(self, values: Sequence[float], left: float, right: float) -> None:
        lo, hi = min(values), max(values)
        pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
        self.lo, self.hi = lo - pad, hi + pad
        self.left, self.right = left, right

    def __call__(self, x: float) -> float:
        return self.left + (x - self.lo) / (self.hi - self.lo) * (self.right - self.left)


def distributions(
    canary: Sequence[float], control: Sequence[float], *, metric: str, stratum: str
) -> Markup:
    """Canary against control, each a distribution given as its deciles (0th..100th
    percentile): a line from the least to the greatest node, a box over the 10th..90th
    percentiles, a tick at each decile and a thick mark at the median."""
    if len(canary) != 11 or len(control) != 11:
        return Markup("")
    scale = _Scale([*canary, *control], 90, WIDTH - 20)
    rows = []
    for i, (name, deciles, colour) in enumerate(
        (("canary", canary, CANARY), ("control", control, CONTROL))
    ):
        y = 22 + i * 34
        xs = [scale(d) for d in deciles]
        ticks = "".join(
            f'<line x1="{x:.1f}" y1="{y - 6}" x2="{x:.1f}" y2="{y + 6}" stroke="{colour}"/>'
            for x in xs[1:-1]
        )
        rows.append(
            f'<text x="4" y="{y + 4}" fill="{INK}" font-size="12">{name}</text>'
            f'<line x1="{xs[0]:.1f}" y1="{y}" x2="{xs[-1]:.1f}" y2="{y}" stroke="{colour}"/>'
            f'<rect x="{xs[1]:.1f}" y="{y - 8}" width="{max(xs[9] - xs[1], 1):.1f}" height="16" '
            f'fill="none" stroke="{colour}" stroke-width="1.5"/>{ticks}'
            f'<line x1="{xs[5]:.1f}" y1="{y - 10}" x2="{xs[5]:.1f}" y2="{y + 10}" '
            f'stroke="{colour}" stroke-width="4"/>'
        )
    axis = (
        f'<text x="90" y="92" fill="{INK}" font-size="11">{_n(scale.lo)}</text>'
        f'<text x="{WIDTH - 20}" y="92" fill="{INK}" font-size="11" '
        f'text-anchor="end">{_n(scale.hi)}</text>'
    )
    label = (
        f"{metric} in {stratum}: canary median {_n(canary[5])} "
        f"(range {_n(canary[0])} to {_n(canary[10])}), control median {_n(control[5])} "
        f"(range {_n(control[0])} to {_n(control[10])}), one value per node"
    )
    return _svg(WIDTH, 100, label, "".join(rows) + axis)


def effect(shift: float, low: float, high: float, floor: float, *, metric: str) -> Markup:
    """The shift (canary - control) with its interval, against the policy's floor on both
    sides of zero: the metric is worse only when the whole interval lies beyond the floor on
    its harmful side."""
    scale = _Scale([low, high, shift, -floor, floor, 0.0], 20, WIDTH - 20)
    zero, lo_f, hi_f = scale(0.0), scale(-floor), scale(floor)
    body = (
        f'<rect x="{lo_f:.1f}" y="8" width="{hi_f - lo_f:.1f}" height="34" fill="#efe7f7"/>'
        f'<line x1="{lo_f:.1f}" y1="6" x2="{lo_f:.1f}" y2="44" stroke="{FLOOR}" '
        f'stroke-dasharray="4 3"/>'
        f'<line x1="{hi_f:.1f}" y1="6" x2="{hi_f:.1f}" y2="44" stroke="{FLOOR}" '
        f'stroke-dasharray="4 3"/>'
        f'<line x1="{zero:.1f}" y1="4" x2="{zero:.1f}" y2="46" stroke="{GREY}"/>'
        f'<line x1="{scale(low):.1f}" y1="25" x2="{scale(high):.1f}" y2="25" stroke="{INK}" '
        f'stroke-width="3"/>'
        f'<circle cx="{scale(shift):.1f}" cy="25" r="5" fill="{INK}"/>'
        f'<text x="{lo_f:.1f}" y="58" fill="{FLOOR}" font-size="11" '
        f'text-anchor="middle">-{_n(floor)}</text>'
        f'<text x="{hi_f:.1f}" y="58" fill="{FLOOR}" font-size="11" '
        f'text-anchor="middle">+{_n(floor)}</text>'
        f'<text x="{zero:.1f}" y="58" fill="{INK}" font-size="11" text-anchor="middle">0</text>'
    )
    label = (
        f"{metric}: shift {_n(shift)}, interval {_n(low)} to {_n(high)}, "
        f"against a floor of plus or minus {_n(floor)}"
    )
    return _svg(WIDTH, 62, label, body)


def share_bar(parts: Sequence[tuple[str, int, str]], *, what: str, width: int = 240) -> Markup:
    """A horizontal bar split by ``(name, count, colour)``, e.g. a wave's nodes done, failed
    and waiting, or a group's conforming and drifted nodes."""
    total = sum(n for _, n, _ in parts)
    x = 0.0
    body = []
    for _name, count, colour in parts:
        w = width * count / total if total else 0.0
        if w > 0:
            body.append(f'<rect x="{x:.1f}" y="2" width="{w:.1f}" height="14" fill="{colour}"/>')
        x += w
    body.append(
        f'<rect x="0.5" y="1.5" width="{width - 1}" height="15" fill="none" stroke="{GREY}"/>'
    )
    label = f"{what}: " + ", ".join(f"{n} {name}" for name, n, _ in parts) + f" of {total}"
    return _svg(width, 18, label, "".join(body))
