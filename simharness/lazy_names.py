"""A package's names loaded on first use (PEP 562), as TFF's packages list them.

``simharness.learning``, ``.learning.algorithms``, ``.learning.templates``, ``.program`` and
``.analytics`` each load their names and submodules when first asked for (importing them
all would load Keras and every algorithm at ``import``). Each gives its table to a
`LazyNames` and its module-level ``__getattr__`` / ``__dir__`` call `attribute` / `listing`.
Imports nothing of simharness.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Iterable, List, Mapping, Optional, Tuple


class LazyNames:
    """The lazy names of one package.

    Args:
      package: the package's ``__name__``.
      names: each public name -> the submodule (relative to `package`) that defines it.
      modules: submodules reached as attributes (``tff.learning.templates.composers``).
      aliases: older names -> (submodule, the name there); reachable, not listed.
    """

    def __init__(
        self,
        package: str,
        names: Mapping[str, str],
        modules: Iterable[str] = (),
        aliases: Optional[Mapping[str, Tuple[str, str]]] = None,
    ) -> None:
        self.package = package
        self.names = dict(names)
        self.modules = frozenset(modules)
        self.aliases = dict(aliases or {})

    def attribute(self, name: str) -> object:
        """The package's attribute `name`; a name of `names` is kept in the package, so
        that the next lookup is a plain one.

        Raises:
          AttributeError: `name` is none of the package's names, as Python's own.
        """
        if name in self.modules:
            return importlib.import_module(f'{self.package}.{name}')
        if name in self.names:
            value = getattr(self._submodule(self.names[name]), name)
            setattr(sys.modules[self.package], name, value)
            return value
        if name in self.aliases:
            where, there = self.aliases[name]
            return getattr(self._submodule(where), there)
        raise AttributeError(f'module {self.package!r} has no attribute {name!r}')

    def listing(self) -> List[str]:
        """What ``dir(package)`` lists: its ``__all__``, names and submodules, and the module's
        own dunders; not what it imported for itself (``Any``, `LazyNames`) or its private
        tables."""
        module = sys.modules[self.package]
        inside = self.package + '.'
        own = {
            k
            for k, v in vars(module).items()
            if k.startswith('__') or (isinstance(v, ModuleType) and v.__name__.startswith(inside))
        }
        public = set(getattr(module, '__all__', ())) | set(self.names) | self.modules
        return sorted(own | public)

    def _submodule(self, where: str) -> ModuleType:
        return importlib.import_module(f'{self.package}.{where}')
