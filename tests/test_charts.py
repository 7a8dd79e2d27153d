"""The dashboard's chart geometry (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from app.services import charts


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [(0, 1, [0, 0.25, 0.5, 0.75, 1]), (0, 800, [0, 200, 400, 600, 800]), (0, 7, [0, 2, 4, 6, 8])],
)
def test_nice_ticks_cover_the_range_with_round_steps(low, high, expected):
    assert charts.nice_ticks(low, high, 5) == expected


def test_timeline_bars_are_as_tall_as_their_counts():
    start = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    points = [(start + timedelta(minutes=i), n) for i, n in enumerate([0, 4, 0, 2])]
    chart = charts.timeline(points)
    assert chart["total"] == 6 and len(chart["bars"]) == 2  # empty minutes draw nothing
    tall, short = chart["bars"]
    assert tall["h"] == pytest.approx(2 * short["h"], rel=0.02)
    assert tall["x"] < short["x"] and "12:01 UTC: 4 answers" in tall["title"]
    assert charts.timeline([]) is None


def test_histogram_labels_the_open_last_bin_and_skips_empty_data():
    bins = [{"low": 0, "high": 10, "count": 3}, {"low": 10, "high": None, "count": 1}]
    chart = charts.histogram(bins)
    assert [b["title"] for b in chart["bars"]] == [
        "0–10 ms: 3 answers (75%)",
        "≥10 ms: 1 answer (25%)",
    ]
    assert charts.histogram([{"low": 0, "high": None, "count": 0}]) is None


def test_lines_put_y_in_the_unit_interval_and_sort_points():
    chart = charts.lines([("accuracy", [(200, 1.0), (100, 0.0)])])
    (series,) = chart["series"]
    first, second = series["dots"]
    assert first["x"] < second["x"]
    assert first["y"] == chart["bottom"] and second["y"] == chart["top"]
    assert charts.lines([("empty", [])]) is None


def advice(status="reachable", needed=900, reference=None, n_now=400):
    curve = [{"n_answers": n, "value": v, "low": v - 0.05, "high": v + 0.05}
             for n, v in ((100, 0.5), (400, 0.7), (1600, 0.8), (100_000, 0.95))]  # fmt: skip
    return {"metric": "accuracy", "target": 0.9, "status": status, "n_answers": n_now,
            "answers_needed": needed, "curve": curve, "reference": reference}  # fmt: skip


def test_lines_draw_the_advice_near_the_answers_seen():
    points = [("accuracy", [(100, 0.5), (200, 0.6), (400, 0.7)])]
    chart = charts.lines(points, advice(reference={"n_answers": 1000}))
    overlay = chart["advice"]
    # The axis covers the answers now ×1.5 and the marks within 5× of them, not the
    # extrapolation to 100,000 answers.
    assert chart["x_ticks"][-1]["label"] == "1.5k"  # n√n at 1,000 (+10%), on a round tick
    assert [m["label"] for m in overlay["marks"]] == ["now", "target reached", "n√n"]
    assert overlay["off_chart"] == []
    assert overlay["band"].count(",") == 2 * 2  # the curve's points at 100 and 400, up and down
    assert overlay["target_y"] == pytest.approx(chart["bottom"] - 0.9 * (chart["bottom"] - 14))
    far = charts.lines(points, advice(needed=50_000, reference={"n_answers": 1500}))
    assert [m["label"] for m in far["advice"]["off_chart"]] == ["target reached"]
    assert [m["label"] for m in far["advice"]["marks"]] == ["now", "n√n"]
    # Out of reach: no "reached" mark at all, wherever the estimate would be.
    lost = charts.lines(points, advice(status="not_reachable", needed=None))
    assert [m["label"] for m in lost["advice"]["marks"]] == ["now"]


def test_scatter_colours_by_label_and_keeps_names_for_hover():
    objects = [
        SimpleNamespace(name="a <b>", label="x", image_url="/media/a.png"),
        SimpleNamespace(name="b", label="y", image_url=None),
        SimpleNamespace(name="c", label=None, image_url=None),
    ]
    points = [{"x": float(i), "y": float(-i), "object": o} for i, o in enumerate(objects)]
    chart = charts.scatter(points, with_images=True)
    colours = [p["color"] for p in chart["points"]]
    assert len(set(colours)) == 3 and colours[2] == charts.NO_LABEL
    assert chart["points"][0]["title"] == "a <b> — label x"  # escaped by the template
    assert [entry["label"] for entry in chart["legend"]] == ["x", "y"]
    xs = [p["x"] for p in chart["points"]]
    assert min(xs) >= 0 and max(xs) <= chart["size"]


def test_sparkline_spans_its_box():
    spark = charts.sparkline([0, 5, 10])
    assert spark["total"] == 15
    assert spark["line"].split()[0].startswith("0.0,") and spark["line"].split()[-1].startswith(
        "120"
    )
