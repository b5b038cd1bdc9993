import sys
from pathlib import Path

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).resolve().parent))

# One Hypothesis profile for CI and local runs alike: the same examples every run (a property test
# fails for a reason, not for a new draw) and no per-example deadline (a 2-core machine under load
# is not a slow function). A test's own @settings changes only what it names.
settings.register_profile("espnet_dynres", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("espnet_dynres")

import espnet_dynres  # noqa: E402,F401  (the plugin registers when a test imports ESPnet's ASR task)


def pytest_addoption(parser):
    parser.addoption("--deterministic-algorithms", action="store_true",
                     help="run under torch.use_deterministic_algorithms(True) (tests/numeric_matrix.sh)")


def pytest_configure(config):
    if config.getoption("--deterministic-algorithms"):
        import torch

        torch.use_deterministic_algorithms(True)


def pytest_collection_modifyitems(config, items):
    # Keep the slow end-to-end recipe run last.
    items.sort(key=lambda item: "recipe_smoke" in item.nodeid)
