"""Names a package exports, imported from its modules at first use (PEP 562).

``capwatch.model`` and ``capwatch.alerts`` list their public names in ``__init__`` but do
not import the modules that define them until one is read: importing one module of such a
package runs its ``__init__`` first, and eager imports there cost the daemon's start-up
(docs/performance.md, "Start-up"). A root module, so that packages of any layer may use
it: it imports no other capwatch module (tests/test_layers.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any


def lazy_getattr(package: str, module_of: Mapping[str, str],
                 namespace: MutableMapping[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``name`` is imported from
    ``package.<module_of[name]>`` and kept in ``namespace`` (the package's globals), so
    the next lookup of it is a plain one; any other name is an AttributeError."""

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    return __getattr__
