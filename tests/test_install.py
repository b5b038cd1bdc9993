"""The declared dependency ranges hold the exact lock the project's set-up installs, and the
environment the suite runs in."""

import re
from importlib.metadata import requires, version

from packaging.requirements import Requirement

from factory import REPO_ROOT

LOCKED = ("espnet", "espnet_model_zoo", "torch", "torchaudio")
# A new Hypothesis release draws other derandomized examples: the suite is run with the locked one.
TEST_TOOLS = ("hypothesis", "pytest")


def declared():
    reqs = [Requirement(r) for r in requires("espnet_dynres") if "extra ==" not in r]
    return {r.name.replace("-", "_").lower(): r for r in reqs}


def locked():
    lines = (REPO_ROOT / "requirements-lock.txt").read_text().splitlines()
    pins = dict(re.fullmatch(r"([\w.-]+)==([\w.+-]+)", line).groups() for line in lines if line and line[0] != "#")
    return {k.replace("-", "_").lower(): v for k, v in pins.items()}


def test_the_lock_pins_every_core_dependency_inside_the_declared_range():
    ranges, pins = declared(), locked()
    assert set(LOCKED) <= set(pins)
    for name in LOCKED:
        assert ranges[name].specifier, f"{name} has no declared range"
        assert pins[name] in ranges[name].specifier, (name, pins[name], str(ranges[name].specifier))


def test_the_installed_versions_are_inside_the_declared_ranges():
    ranges = declared()
    for name in LOCKED:
        installed = version(name).split("+")[0]  # torch 2.9.1+cu128 -> 2.9.1
        assert installed in ranges[name].specifier, (name, installed, str(ranges[name].specifier))


def test_the_lock_pins_the_test_tools_that_install_sh_installs():
    pins = locked()
    assert set(TEST_TOOLS) <= set(pins), "requirements-lock.txt must pin " + ", ".join(TEST_TOOLS)
    install = (REPO_ROOT / "install.sh").read_text()
    assert '-c requirements-lock.txt -e ".[test]"' in install  # the test extra is installed under the lock
