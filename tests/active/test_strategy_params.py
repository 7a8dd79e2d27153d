"""Each strategy's declared params (``Strategy.declared``, read by the plan builder and
``GET /api/strategies``) agree with what its constructor accepts and refuses."""

from __future__ import annotations

import pytest

from app.active.comprf import PARAMS as COMPRF_PARAMS
from app.active.planner import STRATEGIES, Planner, StrategyError

N_OBJECTS = 30
EXAMPLES = {"indices": [0, 1, 2], "triplets": [[0, 1, 2]], "bool": True}


def _make(kind: str, params: dict) -> object:
    return STRATEGIES[kind](N_OBJECTS, params, seed=0)


@pytest.mark.parametrize("kind", sorted(STRATEGIES))
def test_every_declared_param_is_accepted_and_no_other(kind):
    cls = STRATEGIES[kind]
    for param in cls.declared:
        value = param.default
        if value is None:
            value = EXAMPLES.get(param.kind, param.low if param.low is not None else 2)
        if param.kind == "int":
            value = int(value)
        # accepted alone (with the params it needs), at its default or an example
        _make(kind, {**dict(param.applies_with), param.name: value})
    with pytest.raises(ValueError, match="unknown params"):
        _make(kind, {"not_a_param": 1})
    assert cls.describe()["description"], f"{kind} needs a docstring: the builder shows it"


@pytest.mark.parametrize(
    ("kind", "param"),
    [(kind, p) for kind in sorted(STRATEGIES) for p in STRATEGIES[kind].declared],
    ids=lambda value: getattr(value, "name", value),
)
def test_declared_bounds_and_choices_are_the_constructors(kind, param):
    number = int if param.kind == "int" else float
    step = 1 if param.kind == "int" else 0.01
    needs = dict(param.applies_with)
    if param.kind in ("int", "float") and param.low is not None:
        with pytest.raises(ValueError):
            _make(kind, {**needs, param.name: number(param.low) - step})
    if param.kind in ("int", "float") and param.high is not None:
        with pytest.raises(ValueError):
            _make(kind, {**needs, param.name: number(param.high) + step})
    if param.kind == "choice":
        for choice in param.choices:
            _make(kind, {**needs, param.name: choice})
        with pytest.raises(ValueError):
            _make(kind, {**needs, param.name: "no-such-choice"})


def test_comprf_declares_the_params_it_checks():
    assert STRATEGIES["comprf"].param_names() == COMPRF_PARAMS


def test_a_refusal_names_the_param_to_blame():
    specs = [
        {"kind": "random", "weight": 1},
        {"kind": "adaptive", "weight": 1, "params": {"pool": 0}},
    ]
    with pytest.raises(StrategyError) as caught:
        Planner(specs, N_OBJECTS, seed=0)
    assert caught.value.loc == ("strategies", 1, "params", "pool")
    with pytest.raises(StrategyError) as caught:
        Planner([{"kind": "random", "weight": 1}], 2, seed=0)
    assert caught.value.loc == ("strategies", 0)  # too few objects: no param to blame
