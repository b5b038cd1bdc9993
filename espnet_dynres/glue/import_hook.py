"""When ``import espnet_dynres`` registers the plugin: at once if ESPnet's ASR task
(``espnet2.tasks.asr``) is imported already, else the moment it is imported.

Importing ESPnet's ASR task takes about 10 s (it imports every ESPnet model family); a process that
never builds an ESPnet task, such as the recipe's data scripts, which only read and check audio with
the plugin's helpers, should not pay for it. Every way to use the registered names goes through
``espnet2.tasks.asr`` (its ``*_choices`` and ``ASRTask``), so registering right after that module
is executed is, to any code that looks, the same as registering on ``import espnet_dynres``.
The hook is an import-system finder (:pep:`451`) that wraps that one module's loader; it removes
itself once used.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
from types import ModuleType
from typing import Optional, Sequence

ESPNET_ASR_TASK = "espnet2.tasks.asr"


def _register() -> None:
    # ESPnet prints notices on import (e.g. "Failed to import Flash Attention"); they go to stderr,
    # so that a tool's standard output (``audit_batches --json -``) holds only what the tool writes.
    with contextlib.redirect_stdout(sys.stderr):
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
