"""The registry of model kinds: every public module of this package is one kind.

A kind module defines ``KIND``, a :class:`~app.training.kinds._common.ModelKindSpec` named
like the module, that declares its params model, its requirements (the 422 reasons), its
train function with its honest figures, and its prediction routes. Schemas, jobs, serving,
the routers, the CLI and the kind table of docs/guide/models.md (kept in step by
``tests/training/test_registry.py``) read :data:`KINDS`; adding a kind is adding a module.

The kinds are imported on first use of :data:`KINDS` (PEP 562), so that reading their names
(:func:`kind_names`, for the command line's help) costs no import of the learning library.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.training.kinds._common import ModelKindSpec

    KINDS: dict[str, ModelKindSpec]

_registry: dict[str, ModelKindSpec] | None = None


def kind_names() -> list[str]:
    """The kinds' names, in registry order (alphabetical), without importing them."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def _discover() -> dict[str, ModelKindSpec]:
    found = {}
    for name in kind_names():
        spec = importlib.import_module(f"{__name__}.{name}").KIND
        if spec.name != name:
            raise RuntimeError(f"{name}.KIND is named {spec.name!r}, not {name!r}")
        found[name] = spec
    return found


def __getattr__(name: str) -> Any:
    global _registry
    if name == "KINDS":
        if _registry is None:
            _registry = _discover()
        return _registry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_kind(name: str) -> ModelKindSpec:
    """The kind named ``name``; 422 naming the kinds there are if none is."""
    from app.errors import InvalidInput

    kinds: dict[str, ModelKindSpec] = __getattr__("KINDS")
    if name not in kinds:
        raise InvalidInput(f"unknown model kind {name!r}; the kinds are {', '.join(kinds)}")
    return kinds[name]


def kinds_serving(route: str) -> list[str]:
    """The kinds that answer prediction route ``route``, in registry order."""
    kinds: dict[str, ModelKindSpec] = __getattr__("KINDS")
    return [name for name, spec in kinds.items() if route in spec.routes]
