"""The attention heatmap as a picture: an SVG drawn on the server from `attention_heatmap_read`.

Rows are soft clusters (hottest first, deserts last), columns are days, a cell's colour is how
often recall lit that cluster that day. Deserts (clusters recall never lit) are drawn in sand with
a dashed outline, so a blind spot reads as one at a glance.
"""

import math
from datetime import date
from xml.sax.saxutils import escape

LABEL_WIDTH = 300
CELL = 16
GAP = 2
TOTAL_WIDTH = 150
TOP = 74
ROW_LIMIT = 40
LABEL_CHARS = 34

EMPTY = "#eef2f6"
DESERT_FILL = "#f3ead7"
DESERT_STROKE = "#c9a66b"
INK = "#1f2a36"
MUTED = "#6b7785"
# Sequential blues, light to deep: a day with one recall is visible, the busiest day is darkest.
RAMP = ["#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c", "#08306b"]


def _colour(count: int, peak: int) -> str:
    if count <= 0:
        return EMPTY
    if peak <= 1:
        return RAMP[3]
    position = math.log1p(count) / math.log1p(peak)
    return RAMP[min(len(RAMP) - 1, int(position * (len(RAMP) - 1) + 0.5))]


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _label(row: dict) -> str:
    name = row["name"] or f"cluster {row['index']}"
    if len(name) > LABEL_CHARS:
        name = name[: LABEL_CHARS - 1] + "…"
    return f"#{row['index']} {name}"


def heatmap_svg(heatmap: dict, *, row_limit: int = ROW_LIMIT) -> str:
    """Draw `attention_heatmap_read(...)` as a standalone SVG document (a string)."""
    days = [date.fromisoformat(day) for day in heatmap["days"]]
    rows = sorted(heatmap["clusters"], key=lambda r: (r["heat"] == 0, -r["heat"], r["index"]))
    hidden = max(0, len(rows) - row_limit)
    rows = rows[:row_limit]
    peak = max((count for row in rows for count in row["by_day"]), default=0)
    top_heat = max((row["heat"] for row in rows), default=0)
    grid_width = len(days) * (CELL + GAP)
    width = LABEL_WIDTH + grid_width + TOTAL_WIDTH + 20
    legend_y = TOP + max(1, len(rows)) * (CELL + GAP) + 24
    height = legend_y + 46 + (18 if hidden else 0)
    deserts = len(heatmap["deserts"])
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" font-family="system-ui, -apple-system, '
        f"'Segoe UI', 'Noto Sans CJK SC', 'WenQuanYi Zen Hei', sans-serif\" font-size=\"12\">",
        f"<title>Attention heatmap: {_count(heatmap['events'], 'recall')} over {len(days)} "
        f"days, {_count(len(heatmap['lit']), 'cluster')} lit, {_count(deserts, 'desert')}</title>",
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="12" y="24" font-size="16" font-weight="600" fill="{INK}">'
        f"Attention · last {len(days)} days</text>",
        f'<text x="12" y="44" fill="{MUTED}">{_count(heatmap["events"], "recall")} · '
        f"{_count(len(heatmap['lit']), 'cluster')} lit · {_count(deserts, 'desert')} "
        f"(never lit)</text>",
    ]
    for position, day in enumerate(days):
        # Weekly ticks counted back from today, so the newest day always has its date.
        if (len(days) - 1 - position) % 7 == 0:
            x = LABEL_WIDTH + position * (CELL + GAP)
            parts.append(
                f'<text x="{x}" y="{TOP - 8}" fill="{MUTED}" font-size="10">'
                f"{day.strftime('%m-%d')}</text>"
            )
    parts.append(
        f'<text x="{LABEL_WIDTH + grid_width + 8}" y="{TOP - 24}" fill="{MUTED}" '
        f'font-size="10">recalls in window</text>'
    )
    if not rows:
        parts.append(
            f'<text x="12" y="{TOP + 12}" fill="{MUTED}">No soft clusters yet: run '
            f"manage.py dream --layer script.</text>"
        )
    for number, row in enumerate(rows):
        y = TOP + number * (CELL + GAP)
        desert = row["heat"] == 0
        label = escape(_label(row))
        full_name = escape(row["name"] or "")
        parts.append(
            f'<text x="{LABEL_WIDTH - 8}" y="{y + CELL - 4}" text-anchor="end" '
            f'fill="{DESERT_STROKE if desert else INK}">{label}<title>{full_name} · '
            f"{row['size']} memories</title></text>"
        )
        for position, count in enumerate(row["by_day"]):
            x = LABEL_WIDTH + position * (CELL + GAP)
            fill = DESERT_FILL if desert else _colour(count, peak)
            stroke = f' stroke="{DESERT_STROKE}" stroke-dasharray="2 2"' if desert else ""
            parts.append(
                f'<rect x="{x}" y="{y}" width="{CELL}" height="{CELL}" rx="2" fill="{fill}"'
                f"{stroke}><title>{label} · {days[position].isoformat()}: "
                f"{_count(count, 'recall')}"
                f"</title></rect>"
            )
        bar_x = LABEL_WIDTH + grid_width + 8
        if desert:
            parts.append(
                f'<text x="{bar_x}" y="{y + CELL - 4}" fill="{DESERT_STROKE}" '
                f'font-style="italic">desert</text>'
            )
        else:
            bar = max(2, int((TOTAL_WIDTH - 50) * row["heat"] / max(1, top_heat)))
            parts.append(
                f'<rect x="{bar_x}" y="{y + 3}" width="{bar}" height="{CELL - 6}" rx="2" '
                f'fill="{RAMP[4]}"/><text x="{bar_x + bar + 4}" y="{y + CELL - 4}" '
                f'fill="{INK}" font-size="11">{row["heat"]}</text>'
            )
    parts.append(f'<text x="12" y="{legend_y + 12}" fill="{MUTED}">fewer</text>')
    for step, colour in enumerate(RAMP):
        parts.append(
            f'<rect x="{52 + step * (CELL + GAP)}" y="{legend_y}" width="{CELL}" '
            f'height="{CELL}" rx="2" fill="{colour}"/>'
        )
    legend_end = 52 + len(RAMP) * (CELL + GAP)
    parts += [
        f'<text x="{legend_end + 4}" y="{legend_y + 12}" fill="{MUTED}">more recalls '
        f"(busiest day: {peak})</text>",
        f'<rect x="{legend_end + 190}" y="{legend_y}" width="{CELL}" height="{CELL}" rx="2" '
        f'fill="{EMPTY}"/><text x="{legend_end + 212}" y="{legend_y + 12}" fill="{MUTED}">'
        f"none that day</text>",
        f'<rect x="{legend_end + 310}" y="{legend_y}" width="{CELL}" height="{CELL}" rx="2" '
        f'fill="{DESERT_FILL}" stroke="{DESERT_STROKE}" stroke-dasharray="2 2"/>'
        f'<text x="{legend_end + 332}" y="{legend_y + 12}" fill="{MUTED}">desert: never lit '
        f"(a possible blind spot)</text>",
    ]
    if hidden:
        parts.append(
            f'<text x="12" y="{legend_y + 40}" fill="{MUTED}">{hidden} more clusters not '
            f"shown (the least recalled).</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
