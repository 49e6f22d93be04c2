"""Small server-rendered SVG charts (no JavaScript): lines with marked points, and stacked bars."""

import math

from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

WIDTH, HEIGHT = 720, 240
# A phone's chart: drawn for its width, so the axes and labels are read without scrolling or shrinking.
NARROW_WIDTH, NARROW_HEIGHT = 360, 220
LABEL_SPACE = 84  # horizontal room one x-axis label needs, in viewBox units
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 48, 16, 24, 36


def _nice_max(value):
    """A round axis maximum at or above `value`, split into four round steps."""
    if value <= 0:
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(value / 4))
    for step in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if 4 * step * magnitude >= value * (1 - 1e-9):
            return round(4 * step * magnitude, 10)
    return 40 * magnitude


def _count_max(value):
    """An axis maximum for whole counts: a multiple of 4, so the five ticks are whole numbers."""
    return float(max(4, -(-int(value) // 4) * 4))


def _fmt(value):
    if value is None:
        return "–"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}".rstrip("0").rstrip(".")


def _frame(title, body, y_max, label_every, labels, width, height):
    plot_w, plot_h = width - PAD_LEFT - PAD_RIGHT, height - PAD_TOP - PAD_BOTTOM
    grid = []
    for i in range(5):
        value = y_max * i / 4
        y = PAD_TOP + plot_h - plot_h * i / 4
        grid.append(
            format_html(
                '<line class="gridline" x1="{}" x2="{}" y1="{}" y2="{}"/><text class="tick" x="{}" y="{}" '
                'text-anchor="end">{}</text>',
                PAD_LEFT,
                PAD_LEFT + plot_w,
                f"{y:.1f}",
                f"{y:.1f}",
                PAD_LEFT - 6,
                f"{y + 4:.1f}",
                _fmt(value),
            )
        )
    xs = []
    n = max(1, len(labels))
    shown = list(range(0, n, label_every))
    if shown[-1] != n - 1:  # the newest is always labelled, in place of a neighbour it would overlap
        shown[-1 if n - 1 - shown[-1] < label_every else len(shown) :] = [n - 1]
    for i in shown[: len(labels)]:
        x = PAD_LEFT + plot_w * (i + 0.5) / n
        # A label that would run past the edge is set against it.
        anchor, x = ("end", width - 2) if x + LABEL_SPACE / 2 > width else ("middle", x)
        xs.append(
            format_html(
                '<text class="tick" x="{}" y="{}" text-anchor="{}">{}</text>',
                f"{x:.1f}",
                height - 12,
                anchor,
                labels[i],
            )
        )
    return format_html(
        '<div class="chart-wrap" tabindex="0"><svg class="chart" viewBox="0 0 {} {}" role="img" aria-label="{}" '
        'xmlns="http://www.w3.org/2000/svg"><title>{}</title>{}{}{}</svg></div>',
        width,
        height,
        title,
        title,
        mark_safe("".join(grid)),
        mark_safe("".join(xs)),
        body,
    )


def line_chart(points, title, *, reference=None, reference_label="", y_max=None, width=WIDTH, height=HEIGHT):
    """A line over `points` (objects with .label, .value, optional .spike); spikes get a red marker."""
    values = [p.value for p in points if p.value is not None]
    top = _nice_max(max([*values, reference or 0, y_max or 0], default=0))
    plot_w, plot_h = width - PAD_LEFT - PAD_RIGHT, height - PAD_TOP - PAD_BOTTOM
    n = max(1, len(points))

    def xy(i, v):
        return PAD_LEFT + plot_w * (i + 0.5) / n, PAD_TOP + plot_h - plot_h * (v / top)

    parts, segment = [], []
    segments = []
    for i, p in enumerate(points):
        if p.value is None:
            if segment:
                segments.append(segment)
            segment = []
            continue
        segment.append(xy(i, p.value))
    if segment:
        segments.append(segment)
    for seg in segments:
        parts.append(
            format_html('<polyline class="series" points="{}"/>', " ".join(f"{x:.1f},{y:.1f}" for x, y in seg))
        )
    if reference is not None:
        _, ry = xy(0, reference)
        parts.append(
            format_html(
                '<line class="reference" x1="{}" x2="{}" y1="{}" y2="{}"/><text class="reference-label" x="{}" '
                'y="{}" text-anchor="end">{}</text>',
                PAD_LEFT,
                PAD_LEFT + plot_w,
                f"{ry:.1f}",
                f"{ry:.1f}",
                PAD_LEFT + plot_w,
                f"{ry - 4:.1f}",
                reference_label,
            )
        )
    for i, p in enumerate(points):
        if p.value is None:
            continue
        x, y = xy(i, p.value)
        spike = getattr(p, "spike", False)
        parts.append(
            format_html(
                '<circle class="{}" cx="{}" cy="{}" r="{}" data-label="{}" data-value="{}">'
                "<title>{}: {}{}</title></circle>",
                "point spike" if spike else "point",
                f"{x:.1f}",
                f"{y:.1f}",
                6 if spike else 3.5,
                p.label,
                _fmt(p.value),
                p.label,
                _fmt(p.value),
                " (spike)" if spike else "",
            )
        )
        if spike:
            parts.append(
                format_html(
                    '<text class="spike-label" x="{}" y="{}" text-anchor="middle">spike</text>',
                    f"{x:.1f}",
                    f"{y - 10:.1f}",
                )
            )
    if not values:
        parts.append(
            format_html(
                '<text class="no-data" x="{}" y="{}" text-anchor="middle">No data in this period</text>',
                width / 2,
                height / 2,
            )
        )
    return _frame(
        title, mark_safe("".join(parts)), top, _label_step(n, width), [p.label for p in points], width, height
    )


def stacked_bars(rows, categories, title, *, width=WIDTH, height=HEIGHT):
    """Stacked bars: `rows` is [(label, {category: count})]; each category gets the CSS class bar-<category>."""
    totals = [sum(counts.get(c, 0) for c in categories) for _, counts in rows]
    top = _count_max(max(totals, default=0))
    plot_w, plot_h = width - PAD_LEFT - PAD_RIGHT, height - PAD_TOP - PAD_BOTTOM
    n = max(1, len(rows))
    slot = plot_w / n
    bar_w = max(2.0, slot * 0.7)
    parts = []
    for i, (label, counts) in enumerate(rows):
        base = 0
        x = PAD_LEFT + slot * i + (slot - bar_w) / 2
        for c in categories:
            count = counts.get(c, 0)
            if not count:
                continue
            h = plot_h * count / top
            y = PAD_TOP + plot_h - plot_h * (base + count) / top
            parts.append(
                format_html(
                    '<rect class="bar-{}" x="{}" y="{}" width="{}" height="{}" data-label="{}" '
                    'data-value="{}"><title>{} · {}: {}</title></rect>',
                    c,
                    f"{x:.1f}",
                    f"{y:.1f}",
                    f"{bar_w:.1f}",
                    f"{h:.1f}",
                    label,
                    count,
                    label,
                    c,
                    count,
                )
            )
            base += count
    if not any(totals):
        parts.append(
            format_html(
                '<text class="no-data" x="{}" y="{}" text-anchor="middle">No runs in this period</text>',
                width / 2,
                height / 2,
            )
        )
    return _frame(
        title, mark_safe("".join(parts)), top, _label_step(n, width), [label for label, _ in rows], width, height
    )


def legend(categories, names):
    """A legend list matching stacked_bars' CSS classes."""
    return format_html(
        '<ul class="legend">{}</ul>',
        format_html_join(
            "", '<li><span class="swatch bar-{}" aria-hidden="true"></span>{}</li>', ((c, names[c]) for c in categories)
        ),
    )


def _label_step(n, width):
    fits = max(2, (width - PAD_LEFT - PAD_RIGHT) // LABEL_SPACE)
    return max(1, -(-n // fits))


def responsive(draw, *args, **kwargs):
    """`draw(*args, **kwargs)` twice, for screens and for phones; the stylesheet shows the one that fits."""
    return format_html(
        '<div class="chart-wide">{}</div><div class="chart-narrow">{}</div>',
        draw(*args, **kwargs),
        draw(*args, width=NARROW_WIDTH, height=NARROW_HEIGHT, **kwargs),
    )
