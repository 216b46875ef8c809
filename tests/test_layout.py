"""The layers of the package: decoding and evaluation never import the training loop's package, and
evaluation never imports a model (it scores strings)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "nmt"


def imported_modules(package: str, root: Path = PACKAGE, recursive: bool = False) -> dict[str, set[str]]:
    """File name -> every module that the files of root/`package` (`recursive`: and of its sub-packages,
    named by their path) import, at the top or inside a function. `from a import b` counts as importing
    a and a.b, since b may be a module (`from nmt import cli`)."""
    found: dict[str, set[str]] = {}
    paths = (root / package).rglob("*.py") if recursive else (root / package).glob("*.py")
    for path in sorted(paths):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module is not None:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
        found[str(path.relative_to(root / package)) if recursive else path.name] = names
    return found


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize("package", ["decoding", "evaluation"])
def test_decoding_and_evaluation_never_import_training(package: str) -> None:
    imports = imported_modules(package)
    assert imports, f"no modules found in nmt/{package}"
    assert any(_under(m, "nmt") for names in imports.values() for m in names)  # the parse sees nmt's imports
    upward = {name: sorted(m for m in names if _under(m, "nmt.training")) for name, names in imports.items()}
    assert {name: found for name, found in upward.items() if found} == {}


def test_evaluation_never_imports_a_model() -> None:
    models = ("nmt.models", "nmt.decoding", "nmt.rundir", "nmt.training", "torch")
    imports = imported_modules("evaluation")
    assert {
        name: sorted(m for m in names if any(_under(m, p) for p in models))
        for name, names in imports.items()
        if any(_under(m, p) for m in names for p in models)
    } == {}


@pytest.mark.parametrize("package", ["data", "models", "training", "decoding", "rundir", "evaluation"])
def test_only_the_command_line_imports_the_commands_that_compare_runs(package: str) -> None:
    imports = imported_modules(package)
    assert imports, f"no modules found in nmt/{package}"
    upward = {name: sorted(m for m in names if _under(m, "nmt.compare")) for name, names in imports.items()}
    assert {name: found for name, found in upward.items() if found} == {}


def test_the_translation_cache_is_part_of_the_run_directory() -> None:
    from nmt.rundir.translations import HYPS_DIR
    from nmt.rundir.writing import RUN_MARKERS

    assert HYPS_DIR in RUN_MARKERS  # a new training refuses a folder holding another run's translations


def test_the_import_walk_sees_every_form_of_import(tmp_path: Path) -> None:
    (tmp_path / "plain.py").write_text("import nmt.cli\n")
    (tmp_path / "from_package.py").write_text("def f():\n    from nmt import cli\n")
    (tmp_path / "from_module.py").write_text("from nmt.cli import main\n")
    assert all("nmt.cli" in names for names in imported_modules(".", root=tmp_path).values())


def test_no_library_module_imports_the_command_line() -> None:
    packages = sorted(str(init.parent.relative_to(PACKAGE)) for init in PACKAGE.rglob("__init__.py"))
    assert "." in packages and "compare" in packages  # nmt/ itself and every subpackage
    importers = [
        f"{package}/{name}"
        for package in packages
        for name, names in imported_modules(package).items()
        if f"{package}/{name}" != "./__main__.py" and any(_under(m, "nmt.cli") for m in names)
    ]
    assert importers == []


# The config layer: plain validated data at the bottom of the package (README: "lower layers never import
# upper ones"). nmt/lengths.py is the neutral module data and evaluation share.
CONFIG_LAYER = ("config.py", "config_sections.py", "typed_yaml.py", "errors.py", "fileio.py", "special.py", "lengths.py",
                "registry.py")
ABOVE_CONFIG = ("nmt.data", "nmt.models", "nmt.training", "nmt.decoding", "nmt.evaluation", "nmt.rundir",
                "nmt.compare", "nmt.commands", "nmt.cli")


def test_the_config_layer_imports_nothing_above_it() -> None:
    imports = imported_modules(".")
    assert all(name in imports for name in CONFIG_LAYER)
    upward = {
        name: sorted(m for m in imports[name] if any(_under(m, p) for p in ABOVE_CONFIG))
        for name in CONFIG_LAYER
    }
    assert {name: found for name, found in upward.items() if found} == {}


def test_data_never_imports_evaluation() -> None:
    imports = imported_modules("data", recursive=True)
    assert "sources/bible.py" in imports  # the sub-packages are walked too
    upward = {name: sorted(m for m in names if _under(m, "nmt.evaluation")) for name, names in imports.items()}
    assert {name: found for name, found in upward.items() if found} == {}


def test_the_analyses_sit_below_compare_and_above_the_models() -> None:
    # nmt/analysis/ is imported only by compare and commands (the commands reach it through compare today)
    packages = sorted(str(init.parent.relative_to(PACKAGE)) for init in PACKAGE.rglob("__init__.py"))
    importers = sorted(
        f"{package}/{name}"
        for package in packages
        if package not in ("analysis", "compare", "commands")
        for name, names in imported_modules(package).items()
        if any(_under(m, "nmt.analysis") for m in names)
    )
    assert importers == []
    analysis = imported_modules("analysis")
    assert "hooks.py" in analysis and "attention_checks.py" in analysis
    upward = {name: sorted(m for m in names if any(_under(m, p) for p in ("nmt.compare", "nmt.commands", "nmt.cli")))
              for name, names in analysis.items()}
    assert {name: found for name, found in upward.items() if found} == {}
    assert any(_under(m, "nmt.analysis") for names in imported_modules("compare").values() for m in names)
