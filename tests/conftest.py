import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import espnet_dynres  # noqa: E402,F401  (register the plugin once for all tests)


def pytest_collection_modifyitems(config, items):
    # Keep the slow end-to-end recipe run last.
    items.sort(key=lambda item: "recipe_smoke" in item.nodeid)
