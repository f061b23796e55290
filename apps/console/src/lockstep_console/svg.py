"""Plots drawn on the server as SVG text: no charting library, no script, and what is drawn is
exactly the numbers given (the services' answers), scaled and nothing else.

Every plot is an ``<svg role="img">`` with a ``<title>`` and an ``aria-label`` that say in words
what it shows (WAI-ARIA 1.2, "img" role; WCAG 2.2 SC 1.1.1 non-text content), and its colours
keep a contrast of at least 3:1 against white (SC 1.4.11 non-text contrast). Every number put
into the markup is formatted here; every text is escaped (``markupsafe``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

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


RULE_COLOURS = (BAD, CANARY, FLOOR, CONTROL, GOOD, INK)  # one per hard rule, each >= 3:1
TIMELINE_ROWS = 20  # nodes drawn; the table below the plot lists every hit


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S")


def timeline(
    hits: Sequence[tuple[str, str, float]], start: float, end: float, *, rules: Sequence[str]
) -> Markup:
    """Hard-rule hits ``(node, rule, at)`` on a time axis from ``start`` to ``end`` (seconds
    since the epoch, UTC): a row per node, its name on the left, a mark per hit at the time of
    the reading that broke the rule, coloured and shaped by rule (``rules`` gives the legend's
    order). The first ``TIMELINE_ROWS`` nodes in time order are drawn; the label says how many
    more there are."""
    if not hits:
        return Markup("")
    nodes: list[str] = []
    for node, _, _ in sorted(hits, key=lambda h: (h[2], h[0])):
        if node not in nodes:
            nodes.append(node)
    drawn = nodes[:TIMELINE_ROWS]
    lo, hi = min(start, *(h[2] for h in hits)), max(end, *(h[2] for h in hits))
    scale = _Scale([lo, hi], 150, WIDTH - 20)
    colour = {r: RULE_COLOURS[i % len(RULE_COLOURS)] for i, r in enumerate(rules)}
    body = []
    for row, node in enumerate(drawn):
        y = 16 + row * 18
        body.append(
            f'<text x="4" y="{y + 4}" fill="{INK}" font-size="12">{escape(node[:22])}</text>'
            f'<line x1="150" y1="{y}" x2="{WIDTH - 20}" y2="{y}" stroke="#d0d0d0"/>'
        )
        for n, rule, at in hits:
            if n == node:
                x, c, k = scale(at), colour.get(rule, INK), rules.index(rule)
                # Rules broken by one reading share a time: each rule a little higher or lower,
                # so that both marks show.
                m = y + (k - (len(rules) - 1) / 2) * 4.0
                # Shape and colour both: the rule is not told by colour alone (WCAG 1.4.1).
                body.append(
                    f'<rect x="{x - 4:.1f}" y="{m - 4:.1f}" width="8" height="8" fill="{c}" '
                    f'transform="rotate(45 {x:.1f} {m:.1f})"/>'
                    if k % 2
                    else f'<circle cx="{x:.1f}" cy="{m:.1f}" r="4.5" fill="{c}"/>'
                )
    axis_y = 16 + len(drawn) * 18
    body.append(
        f'<line x1="150" y1="{axis_y}" x2="{WIDTH - 20}" y2="{axis_y}" stroke="{GREY}"/>'
        f'<text x="150" y="{axis_y + 14}" fill="{INK}" font-size="11">{_clock(scale.lo)}</text>'
        f'<text x="{WIDTH - 20}" y="{axis_y + 14}" fill="{INK}" font-size="11" '
        f'text-anchor="end">{_clock(scale.hi)} UTC</text>'
    )
    for i, rule in enumerate(rules):
        y = axis_y + 32 + i * 16
        mark = (
            f'<rect x="145" y="{y - 9}" width="9" height="9" fill="{colour[rule]}" '
            f'transform="rotate(45 149.5 {y - 4.5})"/>'
            if i % 2
            else f'<circle cx="150" cy="{y - 4}" r="5" fill="{colour[rule]}"/>'
        )
        body.append(
            f'{mark}<text x="162" y="{y}" fill="{INK}" font-size="12">{escape(rule)}</text>'
        )
    height = axis_y + 24 + len(rules) * 16
    shown = "; ".join(f"{n} {r} at {_clock(at)}" for n, r, at in hits[:10])
    label = (
        f"hard-rule hits from {_clock(start)} to {_clock(end)} UTC, {len(hits)} on "
        f"{len(nodes)} node(s): {shown}"
        + (f"; {len(hits) - 10} more" if len(hits) > 10 else "")
        + (f" ({len(nodes) - len(drawn)} node(s) not drawn)" if len(nodes) > len(drawn) else "")
    )
    return _svg(WIDTH, height, label, "".join(body))
