"""The registry of model kinds: each kind is well formed, and the docs say what it holds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.api.predictions import router as predictions_router
from app.training.kinds import KINDS, get_kind, kind_names, kinds_serving
from app.training.kinds._common import ModelKindSpec, Params

# The researcher guide's page on models holds the kind table and the route table.
SECTION = (Path(__file__).resolve().parents[2] / "docs/guide/models.md").read_text()
COMMON_PARAMS = set(Params.model_fields)


def _table(header: str) -> list[list[str]]:
    """The rows (cells stripped) of the section's table whose header line starts ``header``."""
    lines = SECTION[SECTION.index(header) :].split("\n")
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def _route_names() -> set[str]:
    prefix = "/api/models/{model_id}/"
    return {
        route.path[len(prefix) :].split("/")[0]
        for route in predictions_router.routes
        if route.path.startswith(prefix)
    }


def test_kinds_are_discovered_from_their_modules():
    assert list(KINDS) == kind_names()
    assert {"tripletboost", "kernel", "embedding", "metricboost", "svmcompare"} <= set(KINDS)


@pytest.mark.parametrize("name", kind_names())
def test_each_kind_declares_what_it_is(name):
    spec = KINDS[name]
    assert isinstance(spec, ModelKindSpec) and spec.name == name
    assert issubclass(spec.params, Params) and spec.learns
    assert callable(spec.train) and callable(spec.requirements)
    assert set(spec.routes) <= _route_names(), "a kind answers only routes the API has"
    spec.params()  # every parameter has a default


def test_every_prediction_route_is_served_by_some_kind():
    assert all(kinds_serving(route) for route in _route_names())


def test_docs_kind_table_is_the_registry():
    rows = _table("| `kind` | learns |")
    assert [row[0] for row in rows] == [f"`{name}`" for name in KINDS]
    for name, learns, params in rows:
        spec = KINDS[name.strip("`")]
        assert learns == spec.learns
        documented = set(re.findall(r"`(\w+)` \(|`(\w+)`(?:,|$)", params))
        documented = {a or b for a, b in documented}
        own = set(spec.params.model_fields) - COMMON_PARAMS
        assert own <= documented, f"{spec.name}: parameters {own - documented} undocumented"


def test_docs_route_table_is_the_registry():
    rows = _table("| route | kinds | answers |")
    routes = {}
    for route, kinds, _answers in rows:
        name = re.match(r"`(?:GET|POST) …/(\w+)", route).group(1)
        routes[name] = sorted(k.strip() for k in kinds.split(","))
    assert set(routes) == _route_names()
    for name, kinds in routes.items():
        assert kinds == sorted(kinds_serving(name)), name


def test_an_unknown_kind_is_refused_naming_the_kinds():
    with pytest.raises(
        Exception, match="unknown model kind 'psychic'; the kinds are bradley_terry, comprf, emb"
    ):
        get_kind("psychic")
