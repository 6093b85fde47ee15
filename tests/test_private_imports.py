"""scripts/check_private_imports.py (a CI step): private names stay in their module, private modules in their package."""

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check_private_imports.py"


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("check_private_imports", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while the class is made
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


BASE = {
    "pyproject.toml": '[tool.setuptools]\npackage-dir = {"rewardsql_jax.kernels" = "kernels"}\n',
    "rewardsql_jax/__init__.py": "",
    "rewardsql_jax/a/__init__.py": "_PACKAGE_PRIVATE = 1\n",
    "rewardsql_jax/a/mod.py": "__version__ = '1'\n_helper = 1\npublic = 2\n",
    "rewardsql_jax/a/_common.py": "shared = 1\n",
    "rewardsql_jax/a/sub/__init__.py": "",
    "kernels/__init__.py": "",
    "kernels/_pallas.py": "block = 1\n",
}


def _messages(check, root):
    return sorted((v.path.relative_to(root).as_posix(), v.line, v.message) for v in check.violations(root))


def test_allowed_imports_pass(check, tmp_path):
    root = _tree(
        tmp_path,
        {
            **BASE,
            "rewardsql_jax/a/ok.py": """
        import os._private_stdlib_is_not_ours
        from os import _exit
        from rewardsql_jax.a.mod import public, __version__
        from . import _common                      # a private module of its own package
        from ._common import shared
        from rewardsql_jax.a._common import shared as again
        """,
            "rewardsql_jax/a/sub/deep.py": "from .._common import shared\nfrom rewardsql_jax.a import _common\n",
            "kernels/flash.py": "from ._pallas import block\n",  # kernels/ is rewardsql_jax.kernels
        },
    )
    assert _messages(check, root) == []


def test_private_names_and_foreign_private_modules_are_flagged(check, tmp_path):
    root = _tree(
        tmp_path,
        {
            **BASE,
            "rewardsql_jax/b.py": """
        from rewardsql_jax.a.mod import _helper, public

        def lazy():
            from .a import _PACKAGE_PRIVATE         # a private name of the package a
            from rewardsql_jax.a._common import shared
            import rewardsql_jax.a._common
            from rewardsql_jax.kernels import _pallas
        """,
            "rewardsql_jax/a/sub/inner.py": "from ..mod import _helper\n",
        },
    )
    assert _messages(check, root) == [
        ("rewardsql_jax/a/sub/inner.py", 1, "imports the private name _helper from rewardsql_jax.a.mod"),
        ("rewardsql_jax/b.py", 2, "imports the private name _helper from rewardsql_jax.a.mod"),
        ("rewardsql_jax/b.py", 5, "imports the private name _PACKAGE_PRIVATE from rewardsql_jax.a"),
        ("rewardsql_jax/b.py", 6, "imports rewardsql_jax.a._common, a private module of rewardsql_jax.a"),
        ("rewardsql_jax/b.py", 7, "imports rewardsql_jax.a._common, a private module of rewardsql_jax.a"),
        ("rewardsql_jax/b.py", 8, "imports rewardsql_jax.kernels._pallas, a private module of rewardsql_jax.kernels"),
    ]


def test_cli_exit_status(tmp_path):
    clean = _tree(tmp_path / "clean", BASE)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(clean)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bad = _tree(tmp_path / "bad", {**BASE, "rewardsql_jax/b.py": "from rewardsql_jax.a.mod import _helper\n"})
    proc = subprocess.run([sys.executable, str(SCRIPT), str(bad)], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "rewardsql_jax/b.py:1: rewardsql_jax.b imports the private name _helper" in proc.stdout
