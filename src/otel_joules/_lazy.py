"""PEP 562 lazy exports for package ``__init__`` modules.

A package lists ``{name: module}``; the module is imported when the name is first read,
so importing the package (or one of its submodules) does not import everything it
exports. Used where an export is expensive (the root package: the SDK, meter and
sensors) or needs an optional extra (``EnergyInstrumentor``).
"""

from __future__ import annotations

import sys
from importlib import import_module
from typing import Any, Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, resolving each name of ``exports`` from its module.

    Args:
        package: The package's ``__name__``.
        exports: Public name -> the module that defines it.

    A resolved name is stored on the package, so later reads skip ``__getattr__``.
    Do not list a name that is also a submodule's name: importing that submodule would
    put the module, not the name, on the package.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
