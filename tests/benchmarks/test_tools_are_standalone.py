"""Every tool under benchmarks/ runs on its own: no import of the test suite, no other script's private names."""

import ast

import pytest

from factory import REPO_ROOT

BENCH = REPO_ROOT / "benchmarks"
SCRIPTS = sorted(BENCH.glob("*.py"))
SCRIPT_NAMES = {p.stem for p in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_no_test_suite_imports_and_no_private_names_of_other_scripts(script):
    tree = ast.parse(script.read_text(encoding="utf-8"))
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            top = node.module.split(".")[0]
            if top in ("factory", "conftest", "tests"):
                bad.append(f"line {node.lineno}: from {node.module} import ...")
            elif top in SCRIPT_NAMES and top != "common":
                private = [a.name for a in node.names if a.name.startswith("_")]
                if private:
                    bad.append(f"line {node.lineno}: from {node.module} import {', '.join(private)}")
        elif isinstance(node, ast.Import):
            bad += [f"line {node.lineno}: import {a.name}" for a in node.names
                    if a.name.split(".")[0] in ("factory", "conftest", "tests")]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value == "tests":
            bad.append(f"line {node.lineno}: a path into tests/")
    assert not bad, f"{script.name}:\n" + "\n".join(bad)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_common_helpers_that_a_script_imports_exist(script):
    import importlib.util

    spec = importlib.util.spec_from_file_location("common", BENCH / "common.py")
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "common":
            for alias in node.names:
                assert hasattr(common, alias.name), f"{script.name}: common has no {alias.name}"


def test_real_utterances_read_fsdd_and_name_a_missing_folder(tmp_path):
    import importlib.util

    import torch

    from factory import FSDD_DIR, pad_batch, real_utterances

    spec = importlib.util.spec_from_file_location("common", BENCH / "common.py")
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    assert common.DEFAULT_FSDD_DIR == FSDD_DIR
    ours, theirs = common.real_utterances(3, concat=2, start=10), real_utterances(3, concat=2, start=10)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))  # 8 kHz read, resampled to 16 kHz
    assert all(torch.equal(a, b) for a, b in zip(common.pad_batch(ours), pad_batch(theirs)))
    missing = tmp_path / "no_fsdd_here"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        common.real_utterances(1, fsdd_dir=missing)


def test_no_tool_reads_a_private_attribute_of_the_package():
    package = REPO_ROOT / "espnet_dynres"
    private = set()  # the package's own private names: self._x, def _x, _X = ...
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                private.add(node.attr)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                private.add(node.name)
    private = {name for name in private if name.startswith("_") and not name.startswith("__")}
    bad = []
    for script in SCRIPTS:
        for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and node.attr in private
                    and not (isinstance(node.value, ast.Name) and node.value.id == "self")):
                bad.append(f"{script.name}:{node.lineno}: .{node.attr}")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("espnet_dynres"):
                bad += [f"{script.name}:{node.lineno}: import {a.name}" for a in node.names if a.name.startswith("_")]
    assert not bad, "\n".join(bad)
