"""Fail when a module of the package imports another module's private name (CI step; README "Development checks").

    python scripts/check_private_imports.py [ROOT]

A private name (``_name``, not a dunder) belongs to its module: ``from rewardsql_jax.x import _helper`` in any
other module is a violation (make the name public, or move it to where both modules can use it). A private
module (``_common.py``) belongs to its package: its own package and that package's subpackages may import it,
nothing else may. Lazy imports inside functions count. The package's folders come from pyproject.toml:
``rewardsql_jax/`` plus each ``[tool.setuptools] package-dir`` mapping (``kernels/`` is ``rewardsql_jax.kernels``).
Prints one line per violation (``path:line: ...``) and exits 1 if there is any.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "rewardsql_jax"


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    importer: str
    message: str

    def render(self, root: Path) -> str:
        path = self.path.relative_to(root) if self.path.is_relative_to(root) else self.path
        return f"{path.as_posix()}:{self.line}: {self.importer} {self.message}"


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def package_folders(root: Path, package: str = PACKAGE) -> dict[str, Path]:
    """{dotted package name: folder}: ``package`` itself and the pyproject ``package-dir`` mappings under it."""
    folders = {package: root / package}
    pyproject = root / "pyproject.toml"
    if pyproject.exists():
        mapping = tomllib.loads(pyproject.read_text()).get("tool", {}).get("setuptools", {}).get("package-dir", {})
        folders.update(
            {name: root / path for name, path in mapping.items() if name == package or name.startswith(package + ".")}
        )
    return folders


def module_files(folders: dict[str, Path]) -> dict[str, list[Path]]:
    """{dotted module name: its files} (a package's ``__init__.py`` is the package; a mapped folder and a
    stand-in ``__init__.py`` may both give one name)."""
    modules: dict[str, list[Path]] = {}
    for name, folder in folders.items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder).with_suffix("").parts
            if rel[-1] == "__init__":
                rel = rel[:-1]
            modules.setdefault(".".join((name, *rel)), []).append(path)
    return modules


def _resolve(importer: str, is_package: bool, level: int, module: str | None) -> str:
    """The absolute name ``from <level dots><module> import ...`` refers to inside ``importer``."""
    if level == 0:
        return module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _private_module_owner(name: str) -> str | None:
    """The package a private module in the dotted ``name`` belongs to (the first private part's parent)."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if _private(part):
            return ".".join(parts[:i])
    return None


def _may_import_private_module(importer: str, owner: str) -> bool:
    return importer == owner or importer.startswith(owner + ".")


def check_module(importer: str, path: Path, modules: dict[str, list[Path]], package: str = PACKAGE) -> list[Violation]:
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    out = []

    def flag(node, message):
        out.append(Violation(path, node.lineno, importer, message))

    def check_module_name(node, name):
        owner = _private_module_owner(name)
        if owner is not None and not _may_import_private_module(importer, owner):
            flag(node, f"imports {name}, a private module of {owner}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == package or alias.name.startswith(package + "."):
                    check_module_name(node, alias.name)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(importer, is_package, node.level, node.module)
            if not (source == package or source.startswith(package + ".")):
                continue
            check_module_name(node, source)
            for alias in node.names:
                if not _private(alias.name):
                    continue
                sub = f"{source}.{alias.name}"
                if sub in modules:  # a private submodule, not a name
                    check_module_name(node, sub)
                elif importer != source:
                    flag(node, f"imports the private name {alias.name} from {source}")
    return out


def violations(root: Path, package: str = PACKAGE) -> list[Violation]:
    modules = module_files(package_folders(root, package))
    found = []
    for name, paths in sorted(modules.items()):
        for path in paths:
            found += check_module(name, path, modules, package)
    return found


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = Path(argv[0]).resolve() if argv else Path(__file__).resolve().parents[1]
    found = violations(root)
    for v in found:
        print(v.render(root))
    if found:
        print(
            f"{len(found)} private import(s) across modules: make the name public in its module, or move it "
            f"down to where both modules can import it.",
            flush=True,
        )
        return 1
    print(f"no private imports across the modules of {PACKAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
