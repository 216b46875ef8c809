"""The layers of the package (README "Layout"), bottom to top: a module imports only modules of its own
layer and of those below, every module of nmt/ sits in a layer, and no chain of imports comes back to where
it started. Evaluation, besides, never imports a model (it scores strings)."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "nmt"

# Bottom to top: each layer names its modules and packages (a package holds its sub-packages).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("config", ("nmt", "nmt.errors", "nmt.fileio", "nmt.figures", "nmt.interrupts", "nmt.special", "nmt.lengths", "nmt.registry",
                "nmt.text_encoding", "nmt.typed_yaml", "nmt.overrides", "nmt.config_sections", "nmt.config", "nmt.environment",
                "nmt.torchrun", "nmt.transfer")),
    ("data", ("nmt.data",)),
    ("models", ("nmt.models",)),
    ("evaluation", ("nmt.evaluation",)),
    ("run directory", ("nmt.rundir",)),
    ("decoding", ("nmt.decoding",)),
    ("training", ("nmt.training",)),
    ("analysis", ("nmt.analysis",)),
    ("compare", ("nmt.compare",)),
    ("commands", ("nmt.commands", "nmt.cli", "nmt.__main__")),
)


def module_imports(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Every module of the package at `root` (dotted, a package by its own name) -> the modules of the
    package it imports, at the top, inside a function or under TYPE_CHECKING. `from a import b` counts as
    importing a.b where that is a module (`from nmt import cli`), else a."""
    files = {path: ".".join(path.relative_to(root.parent).with_suffix("").parts) for path in root.rglob("*.py")}
    modules = {path: name.removesuffix(".__init__") for path, name in files.items()}
    known = set(modules.values())
    found: dict[str, set[str]] = {}
    for path, module in sorted(modules.items()):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module is not None:
                names.update(
                    f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known else node.module
                    for alias in node.names
                )
        found[module] = {name for name in names if name in known and name != module}
    return found


def layer_of(module: str) -> int | None:
    """The index in LAYERS of the layer holding `module` (the longest name that is it or holds it)."""
    holders = [(len(name), index) for index, (_, names) in enumerate(LAYERS) for name in names
               if module == name or (name != "nmt" and module.startswith(name + "."))]
    return max(holders)[1] if holders else None


def upward_imports(imports: Mapping[str, set[str]]) -> dict[str, list[str]]:
    """Module -> the modules it imports from a layer above its own, named with that layer."""
    found = {}
    for module, names in imports.items():
        own = layer_of(module)
        above = sorted(f"{name} ({LAYERS[layer][0]})" for name in names
                       if (layer := layer_of(name)) is not None and own is not None and layer > own)
        if above:
            found[f"{module} ({LAYERS[own][0]})" if own is not None else module] = above
    return found


def import_circles(imports: Mapping[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other round a circle (Tarjan's strongly connected components
    of more than one module)."""
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = lowest[module] = len(index)
        stack.append(module)
        for name in sorted(imports.get(module, ())):
            if name not in index:
                visit(name)
                lowest[module] = min(lowest[module], lowest[name])
            elif name in stack:
                lowest[module] = min(lowest[module], index[name])
        if lowest[module] == index[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
            if len(group) > 1:
                circles.append(sorted(group))

    for module in sorted(imports):
        if module not in index:
            visit(module)
    return circles


def test_every_module_sits_in_a_layer() -> None:
    imports = module_imports()
    assert {"nmt.cli", "nmt.data.sources.bible", "nmt.models.transformer.model", "nmt.config"} <= set(imports)
    assert [module for module in imports if layer_of(module) is None] == []


def test_no_module_imports_a_layer_above_its_own() -> None:
    assert upward_imports(module_imports()) == {}


def test_no_chain_of_imports_comes_back_to_where_it_started() -> None:
    assert import_circles(module_imports()) == []


def test_the_layering_checks_fail_on_a_forbidden_import_or_a_circle() -> None:
    imports = module_imports()
    imports["nmt.data.pairs"] = imports["nmt.data.pairs"] | {"nmt.evaluation.scoring"}  # data -> evaluation
    assert upward_imports(imports) == {"nmt.data.pairs (data)": ["nmt.evaluation.scoring (evaluation)"]}
    # two modules of one layer that import each other: allowed by the layers, refused as a circle
    imports["nmt.lengths"] = imports["nmt.lengths"] | {"nmt.config"}
    imports["nmt.config"] = imports["nmt.config"] | {"nmt.lengths"}
    assert ["nmt.config", "nmt.lengths"] in import_circles(imports)


def test_the_import_walk_sees_every_form_of_import(tmp_path: Path) -> None:
    package = tmp_path / "nmt"
    (package / "sub").mkdir(parents=True)
    for name in ("__init__.py", "cli.py", "sub/__init__.py"):
        (package / name).write_text("")
    (package / "plain.py").write_text("import nmt.cli\n")
    (package / "from_package.py").write_text("def f():\n    from nmt import cli\n")
    (package / "from_module.py").write_text("from nmt.cli import main\n")
    (package / "sub" / "lazy.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import nmt.cli\n")
    imports = module_imports(package)
    assert all(imports[module] == {"nmt.cli"} for module in ("nmt.plain", "nmt.from_package", "nmt.from_module",
                                                              "nmt.sub.lazy"))


def test_evaluation_never_imports_a_model() -> None:
    models = ("nmt.models", "nmt.decoding", "nmt.rundir", "nmt.training")
    found = {module: sorted(name for name in names if name.startswith(models))
             for module, names in module_imports().items() if module.startswith("nmt.evaluation")}
    assert {module: names for module, names in found.items() if names} == {}
    torch = [path.name for path in (PACKAGE / "evaluation").rglob("*.py") if "import torch" in path.read_text()]
    assert torch == []


def test_the_translation_cache_is_part_of_the_run_directory() -> None:
    from nmt.rundir.folders import RUN_MARKERS
    from nmt.rundir.translations import HYPS_DIR

    assert HYPS_DIR in RUN_MARKERS  # a new training refuses a folder holding another run's translations
