"""When ``import espnet_dynres`` registers the plugin: at once if ``espnet2.tasks.asr`` is imported already,
else right after it is (an import-system finder, :pep:`451`, that wraps its loader and removes itself)."""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
from types import ModuleType
from typing import Optional, Sequence

ESPNET_ASR_TASK = "espnet2.tasks.asr"


def _register() -> None:
    with contextlib.redirect_stdout(sys.stderr):  # ESPnet's import notices go to stderr, not a tool's output
        from espnet_dynres.glue.registration import register
        register()


class _RegisterAfterExec(importlib.abc.Loader):
    """ESPnet's loader of ``espnet2.tasks.asr``, then :func:`_register`."""

    def __init__(self, loader: importlib.abc.Loader):
        self._loader = loader

    def create_module(self, spec) -> Optional[ModuleType]:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        with contextlib.redirect_stdout(sys.stderr):
            self._loader.exec_module(module)
        _register()

    def __getattr__(self, name: str):  # get_source, get_filename, ... of the wrapped loader
        return getattr(self._loader, name)


class _AsrTaskFinder(importlib.abc.MetaPathFinder):
    """Finds ``espnet2.tasks.asr`` with the other finders and wraps its loader; used once."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None):
        if fullname != ESPNET_ASR_TASK:
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _RegisterAfterExec(spec.loader)
                return spec
        return None


def register_with_espnet() -> None:
    """Register the plugin now if ``espnet2.tasks.asr`` is imported, else right after it is (idempotent)."""
    if ESPNET_ASR_TASK in sys.modules:
        _register()
    elif not any(isinstance(f, _AsrTaskFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AsrTaskFinder())
