"""The package's layout shows its architecture: the core imports nothing from ESPnet or from the rest of
the package, the modules' imports form no loop, and no module imports another of the package inside
a function."""

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

PACKAGE = Path(__file__).resolve().parents[1] / "espnet_dynres"
CORE_MAY_IMPORT = {"__future__", "dataclasses", "difflib", "enum", "math", "pathlib", "typing", "humanfriendly", "numpy", "torch"}
# The one import inside a function: the import hook exists to defer registration (and ESPnet's ASR
# task, which registration imports) until that task is imported.
DEFERRED_IMPORTS = {("espnet_dynres.glue.import_hook", "espnet_dynres.glue.registration")}


def modules() -> Dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports(path: Path, module: str) -> Iterator[Tuple[str, bool]]:
    """``(imported module, outside any function)`` for every import statement of the file."""
    known = modules()

    def walk(node: ast.AST, in_function: bool) -> Iterator[Tuple[str, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, not in_function
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:  # relative import
                    parts = module.split(".")
                    package = parts[: len(parts) - child.level + (path.name == "__init__.py")]
                    base = ".".join(package + ([base] if base else []))
                for alias in child.names:  # "from package import module" names a module
                    name = f"{base}.{alias.name}"
                    yield (name if name in known else base), not in_function
            else:
                yield from walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    yield from walk(ast.parse(path.read_text()), False)


def test_the_core_imports_nothing_from_espnet_or_the_rest_of_the_package():
    for module, path in modules().items():
        if not module.startswith("espnet_dynres.core"):
            continue
        for name, _ in imports(path, module):
            root = name.split(".")[0]
            assert root in CORE_MAY_IMPORT or name.startswith("espnet_dynres.core"), f"{module} imports {name}"


def test_module_imports_form_no_loop_and_none_hides_in_a_function():
    known = modules()
    graph: Dict[str, Set[str]] = {}
    for module, path in known.items():
        graph[module] = set()
        for name, at_top in imports(path, module):
            if not name.startswith("espnet_dynres"):
                continue
            target = name
            while target not in known:
                target = target.rsplit(".", 1)[0]
            if not at_top and (module, target) not in DEFERRED_IMPORTS:
                raise AssertionError(f"{module} imports {name} inside a function")
                continue
            if target != module:
                graph[module].add(target)
    # depth-first search for a cycle (parent packages' __init__ run implicitly and are not edges here)
    state: Dict[str, int] = {}
    stack: List[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            assert state.get(nxt) != 1, "import loop: " + " -> ".join(stack[stack.index(nxt):] + [nxt])
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


# The layers under the ESPnet boundary: they may use ESPnet's building blocks (its frontend, model,
# sampler and iterator base classes) but not its task or trainer, and never the plugin's glue.
BELOW_GLUE = ("espnet_dynres.core", "espnet_dynres.asr", "espnet_dynres.samplers", "espnet_dynres.iterators")
ESPNET_TASK_AND_TRAINER = ("espnet2.tasks", "espnet2.train.trainer")


def imports_of(layers: Tuple[str, ...]) -> Iterator[Tuple[str, str]]:
    """``(module, imported name)`` for every import of every module in ``layers``."""
    for module, path in modules().items():
        if module.startswith(layers):
            for name, _ in imports(path, module):
                yield module, name


def test_only_glue_imports_espnets_task_and_trainer_and_nothing_below_it_imports_glue():
    for module, name in imports_of(BELOW_GLUE):
        assert not name.startswith("espnet_dynres.glue"), f"{module} imports {name} (the glue sits above it)"
        assert not name.startswith(ESPNET_TASK_AND_TRAINER), f"{module} imports {name} (only glue/ may)"


def test_the_layout_test_can_fail(tmp_path):
    """The import walker sees an import of the glue and of ESPnet's task where a module would hide them."""
    path = tmp_path / "m.py"
    path.write_text("from espnet_dynres.glue import trainer\nimport espnet2.tasks.asr\n")
    found = [name for name, _ in imports(path, "espnet_dynres.asr.m")]
    assert "espnet_dynres.glue.trainer" in found and "espnet2.tasks.asr" in found


TRAINING_LAYERS = BELOW_GLUE + ("espnet_dynres.glue",)
TOOLS = ("espnet_dynres.batch_audit", "espnet_dynres.bin")


def test_training_imports_no_tool():
    """What training runs (the glue and every layer below it) never imports the audit or a command-line tool."""
    for module, name in imports_of(TRAINING_LAYERS):
        assert not name.startswith(TOOLS), f"{module} imports {name} (a tool; training must not need it)"
