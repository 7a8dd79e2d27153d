"""Geometry of the dashboard's figures, for server-rendered SVG.

Pure functions: data in, coordinates in a fixed view box out; the templates draw them (and
escape every label). A chart is ``WIDTH × HEIGHT`` user units, scaled to its container.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

WIDTH, HEIGHT = 560, 240
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 48, 14, 14, 34
# Tableau 10 with navy for its grey (grey means "no label") and two more, for 12 classes.
PALETTE = (
    "#4e79a7", "#f28e2b", "#e15759", "#59a14f", "#b07aa1", "#edc948",
    "#76b7b2", "#ff9da7", "#9c755f", "#1f3a93", "#8cd17d", "#d37295",
)  # fmt: skip
NO_LABEL = "#b8c0cc"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high] (Heckbert's "nice numbers")."""
    if not math.isfinite(low) or not math.isfinite(high):
        return [0.0]
    if high <= low:
        high = low + 1
    raw = (high - low) / max(1, count - 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    start = math.floor(low / step) * step
    ticks, value = [], start
    while value <= high + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    if ticks[-1] < high:
        ticks.append(round(value, 10))
    return ticks


def _answers(n: int) -> str:
    return f"{n} answer" if n == 1 else f"{n} answers"


def _fmt(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


class _Scale:
    def __init__(self, low: float, high: float, start: float, end: float) -> None:
        self.low, self.high, self.start, self.end = low, high, start, end

    def __call__(self, value: float) -> float:
        span = self.high - self.low or 1.0
        return round(self.start + (value - self.low) / span * (self.end - self.start), 2)


def _frame(
    x_ticks: list[dict], y_ticks: list[dict], width: int = WIDTH, height: int = HEIGHT
) -> dict[str, Any]:
    return {
        "width": width,
        "height": height,
        "left": PAD_LEFT,
        "right": width - PAD_RIGHT,
        "top": PAD_TOP,
        "bottom": height - PAD_BOTTOM,
        "x_ticks": x_ticks,
        "y_ticks": y_ticks,
    }


def timeline(points: Sequence[tuple[datetime, int]]) -> dict[str, Any] | None:
    """Answers per minute: bars (one per minute) with hour:minute ticks, twice as wide as
    the other charts (it spans the card)."""
    if not points:
        return None
    width, height = 2 * WIDTH, HEIGHT
    top = max(1, max(n for _, n in points))
    y_values = nice_ticks(0, top, 4)
    y = _Scale(0, y_values[-1], height - PAD_BOTTOM, PAD_TOP)
    n = len(points)
    slot = (width - PAD_LEFT - PAD_RIGHT) / n
    bars = []
    for i, (when, count) in enumerate(points):
        if count:
            bars.append(
                {
                    "x": round(PAD_LEFT + i * slot, 2),
                    "y": y(count),
                    "w": round(max(slot * 0.8, 0.8), 2),
                    "h": round(y(0) - y(count), 2),
                    "title": f"{when:%H:%M} UTC: {_answers(count)}",
                }
            )
    every = max(1, math.ceil(n / 10))
    x_ticks = [
        {"at": round(PAD_LEFT + (i + 0.5) * slot, 2), "label": f"{points[i][0]:%H:%M}"}
        for i in range(0, n, every)
    ]
    y_ticks = [{"at": y(v), "label": _fmt(v)} for v in y_values]
    frame = _frame(x_ticks, y_ticks, width, height)
    return {**frame, "bars": bars, "total": sum(c for _, c in points)}


def histogram(bins: Sequence[dict], unit: str = "ms") -> dict[str, Any] | None:
    """Equal-width bars for bins ``{"low", "high", "count"}`` (the last one open-ended)."""
    total = sum(b["count"] for b in bins)
    if not total:
        return None
    top = max(b["count"] for b in bins)
    y_values = nice_ticks(0, top, 4)
    y = _Scale(0, y_values[-1], HEIGHT - PAD_BOTTOM, PAD_TOP)
    slot = (WIDTH - PAD_LEFT - PAD_RIGHT) / len(bins)
    bars, x_ticks = [], []
    for i, b in enumerate(bins):
        label = (
            f"{_fmt(b['low'])}–{_fmt(b['high'])}" if b["high"] is not None else f"≥{_fmt(b['low'])}"
        )
        bars.append(
            {
                "x": round(PAD_LEFT + i * slot + slot * 0.08, 2),
                "y": y(b["count"]),
                "w": round(slot * 0.84, 2),
                "h": round(y(0) - y(b["count"]), 2),
                "title": f"{label} {unit}: {_answers(b['count'])} ({b['count'] / total:.0%})",
            }
        )
        if i % 2 == 0 or len(bins) <= 6:
            x_ticks.append({"at": round(PAD_LEFT + (i + 0.5) * slot, 2), "label": _fmt(b["low"])})
    y_ticks = [{"at": y(v), "label": _fmt(v)} for v in y_values]
    return {**_frame(x_ticks, y_ticks), "bars": bars, "total": total, "unit": unit}


def lines(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]], advice: dict | None = None
) -> dict[str, Any] | None:
    """Learning curves: one polyline with dots per named series; y in [0, 1].

    With ``advice`` (the budget adviser's answer, ``AdvicePublic`` as a dict) the chart
    also holds its fitted curve with the 90% band, the target, the answers now, the
    answers the fit needs to reach the target, and a reference sample size. The x axis
    runs to 1.5 times the answers seen, widened for a mark up to ``ADVICE_SPAN`` times
    them; a mark farther out is listed in ``advice.off_chart`` instead (an extrapolation
    to millions of answers would squash the measured points against the y axis).
    """
    series = [(name, sorted(points)) for name, points in series if points]
    if not series:
        return None
    xs = [x for _, points in series for x, _ in points]
    curve: list[dict] = []
    if advice:
        seen = max(max(xs), advice["n_answers"])
        xs.append(seen * 1.5)
        for n in _advice_marks_n(advice):
            if n <= seen * ADVICE_SPAN:
                xs.append(n * 1.1)
        curve = [p for p in advice.get("curve") or [] if p["n_answers"] <= max(xs)]
    x_values = nice_ticks(0, max(xs), 5)
    x = _Scale(0, x_values[-1], PAD_LEFT, WIDTH - PAD_RIGHT)
    y = _Scale(0, 1, HEIGHT - PAD_BOTTOM, PAD_TOP)
    drawn = []
    for i, (name, points) in enumerate(series):
        dots = [
            {"x": x(a), "y": y(b), "title": f"{name}: {b:.3f} after {a:g} answers"}
            for a, b in points
        ]
        drawn.append(
            {
                "name": name,
                "color": PALETTE[i % len(PALETTE)],
                "points": " ".join(f"{d['x']},{d['y']}" for d in dots),
                "dots": dots,
            }
        )
    x_ticks = [{"at": x(v), "label": _fmt(v)} for v in x_values]
    y_ticks = [{"at": y(v), "label": f"{v:g}"} for v in (0, 0.25, 0.5, 0.75, 1.0)]
    chart = {**_frame(x_ticks, y_ticks), "series": drawn, "advice": None}
    if advice:
        chart["advice"] = _advice_overlay(advice, curve, drawn, x, y, x_values[-1])
    return chart


# How far beyond the answers seen the learning-curve chart widens to show an advice mark.
ADVICE_SPAN = 5


def _advice_marks_n(advice: dict) -> list[int]:
    found = []
    if advice["status"] == "reachable" and advice.get("answers_needed") is not None:
        found.append(advice["answers_needed"])
    if advice.get("reference"):
        found.append(advice["reference"]["n_answers"])
    return found


def _advice_overlay(
    advice: dict, curve: list[dict], drawn: list[dict], x: _Scale, y: _Scale, x_max: float
) -> dict[str, Any]:
    """The adviser's marks in the learning curve's coordinates."""
    color = next((s["color"] for s in drawn if s["name"] == advice["metric"]), PALETTE[0])

    def clamp(value: float) -> float:
        return min(1.0, max(0.0, value))

    upper = [f"{x(p['n_answers'])},{y(clamp(p['high']))}" for p in curve]
    lower = [f"{x(p['n_answers'])},{y(clamp(p['low']))}" for p in reversed(curve)]
    marks = []
    for key, label, css in (
        ("n_answers", "now", "now"),
        ("answers_needed", "target reached", "needed"),
    ):
        at = advice.get(key)
        if at is not None and (key == "n_answers" or advice["status"] == "reachable"):
            marks.append({"label": label, "n": at, "css": css})
    reference = advice.get("reference")
    if reference:
        marks.append({"label": "n√n", "n": reference["n_answers"], "css": "reference"})
    shown = []
    middle = (x.start + x.end) / 2
    for mark in marks:
        mark["off_chart"] = mark["n"] > x_max
        if not mark["off_chart"]:
            at = x(mark["n"])
            shown.append(
                {
                    **mark,
                    "x": at,
                    "label_x": at - 4 if at > middle else at + 4,
                    "anchor": "end" if at > middle else "start",
                    "title": f"{mark['label']}: {mark['n']:,}",
                }
            )
    return {
        "color": color,
        "band": " ".join(upper + lower),
        "fit": " ".join(f"{x(p['n_answers'])},{y(clamp(p['value']))}" for p in curve),
        "target_y": y(advice["target"]),
        "target_label": f"target {advice['target']:g}",
        "marks": shown,
        "off_chart": [m for m in marks if m["off_chart"]],
    }


def scatter(points: Sequence[dict], with_images: bool) -> dict[str, Any] | None:
    """A square scatter plot of ``{"x", "y", "object"}``, coloured by the object's label."""
    if not points:
        return None
    size, pad = 520, 24
    xs = [p["x"] for p in points]
    ys = [p["y"] for p in points]
    span = max(max(xs) - min(xs), max(ys) - min(ys)) or 1.0
    cx, cy = (max(xs) + min(xs)) / 2, (max(ys) + min(ys)) / 2
    x = _Scale(cx - span / 2, cx + span / 2, pad, size - pad)
    y = _Scale(cy - span / 2, cy + span / 2, size - pad, pad)
    labels = sorted({str(p["object"].label) for p in points if p["object"].label is not None})
    colors = {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(labels)}
    thumb = 22 if len(points) <= 150 else 14
    drawn = []
    for p in points:
        obj = p["object"]
        label = None if obj.label is None else str(obj.label)
        drawn.append(
            {
                "x": x(p["x"]),
                "y": y(p["y"]),
                "name": obj.name,
                "label": label,
                "color": colors.get(label, NO_LABEL),
                "image": obj.image_url if with_images else None,
                "title": obj.name + (f" — label {label}" if label is not None else ""),
            }
        )
    legend = [{"label": label, "color": color} for label, color in colors.items()]
    return {"size": size, "points": drawn, "legend": legend, "thumb": thumb, "no_label": NO_LABEL}


def sparkline(counts: Sequence[int], width: int = 120, height: int = 28) -> dict[str, Any]:
    """A small area chart of recent counts (e.g. answers per minute over the last hour)."""
    top = max(counts, default=0) or 1
    step = width / max(1, len(counts) - 1)
    points = [
        (round(i * step, 1), round(height - 2 - (c / top) * (height - 4), 1))
        for i, c in enumerate(counts)
    ]
    line = " ".join(f"{x},{y}" for x, y in points)
    area = f"0,{height} {line} {width},{height}"
    return {"width": width, "height": height, "line": line, "area": area, "total": sum(counts)}
