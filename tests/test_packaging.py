"""A non-editable wheel carries the Pallas kernels as ``rewardsql_jax.kernels`` and works from a fresh venv.

The kernels live in the top-level ``kernels/`` folder (no ``__init__.py``: never a top-level ``kernels`` package);
pyproject.toml maps it onto ``rewardsql_jax.kernels`` (``package-dir``), whose body is
``rewardsql_jax/kernels/__init__.py``. This builds the wheel offline (``--no-build-isolation``, setuptools from this venv) from a copy
of the checkout's files (so the checkout gets no ``build/`` folder and stale build output cannot leak in), checks
its file list, installs it into a fresh venv and, from a directory outside the checkout, runs one interpret-mode
flash-attention call from the installed copy against the reference (scripts/check_wheel.py, which CI also runs
after a plain ``pip install .`` into a fresh venv).
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _copy_checkout(dest: Path) -> None:
    """The checkout's tracked and not-ignored files (what a clean clone plus local edits would build)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _run(cmd, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def _checkout_copy(tmp_path) -> Path:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout (the wheel is built from its files)")
    src = tmp_path / "src"
    _copy_checkout(src)
    return src


def _fresh_venv(tmp_path, wheel: Path):
    """A fresh venv with ``wheel`` installed that sees this venv's packages (jax, ...) but not this checkout or
    its editable install. (venv --system-site-packages would see the base interpreter's packages, not this
    venv's, so a .pth names them; a plain path line does not run that folder's .pth files, so this venv's
    editable finder stays out.) Returns (python, site-packages)."""
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)])
    # after the install: pip must not see (or touch) this venv's editable rewardsql_jax
    (site / "outer_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python, site


def _check_kernels(tmp_path, src: Path, python: Path, expected_root: Path):
    """From a folder outside the checkout: the modules come from ``expected_root``; one interpret-mode call
    (scripts/check_wheel.py of the copied checkout; its own folder, scripts/, holds no package)."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["JAX_PLATFORMS"] = "cpu"
    proc = _run(
        [str(python), str(src / "scripts" / "check_wheel.py"), str(expected_root)], cwd=outside, env=env, timeout=600
    )
    assert "installed kernels ok" in proc.stdout


def test_wheel_installs_kernels_and_runs_them(tmp_path):
    src, dist = _checkout_copy(tmp_path), tmp_path / "dist"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(src),
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(dist),
        ],
        cwd=tmp_path,
    )
    (wheel,) = dist.glob("rewardsql_jax-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    kernel_files = sorted(p.name for p in (ROOT / "kernels").glob("*.py"))
    assert kernel_files and {f"rewardsql_jax/kernels/{n}" for n in kernel_files} <= set(names)
    assert not [n for n in names if n.startswith("kernels/")], "a top-level kernels package must not be installed"
    assert not [n for n in names if not n.startswith(("rewardsql_jax/", "rewardsql_jax-"))], names
    init = zipfile.ZipFile(wheel).read("rewardsql_jax/kernels/__init__.py").decode()
    assert init == (ROOT / "rewardsql_jax" / "kernels" / "__init__.py").read_text()
    python, site = _fresh_venv(tmp_path, wheel)
    _check_kernels(tmp_path, src, python, site)


def test_editable_install_finds_kernels(tmp_path):
    """``pip install -e .`` (README, CI): the PEP 660 hook pip calls, its wheel installed in a fresh venv."""
    src, dist = _checkout_copy(tmp_path), tmp_path / "dist"
    dist.mkdir()
    _run(
        [sys.executable, "-c", f"from setuptools import build_meta; build_meta.build_editable({str(dist)!r})"], cwd=src
    )
    (wheel,) = dist.glob("rewardsql_jax-*.whl")
    python, _ = _fresh_venv(tmp_path, wheel)
    _check_kernels(tmp_path, src, python, src)


def test_checkout_root_does_not_shadow_the_kernels_package():
    """Run from the checkout root (``python -m pytest``, ``python -c``), ``import kernels`` must not find our folder:
    transformers >= 5.25 depends on the PyPI ``kernels`` package and imports it when loading GGUF files."""
    probe = "import importlib.util as u; s = u.find_spec('kernels'); print(s.origin if s else None)"
    origin = _run([sys.executable, "-c", probe], cwd=ROOT).stdout.strip()
    assert origin in ("None", "") or not Path(origin).resolve().is_relative_to(ROOT / "kernels"), origin


def test_no_script_folder_shadows_an_installed_module(tmp_path):
    """``python benchmarks/x.py`` puts ``benchmarks/`` first on ``sys.path``: a script named like an installed module
    (``benchmarks/kernels.py`` vs the PyPI ``kernels`` that transformers imports) would replace it in that process."""
    for folder in ("benchmarks", "launch", "scripts"):
        stems = [p.stem for p in (ROOT / folder).glob("*.py") if p.stem != "__init__"]
        probe = (
            "import importlib.util as u, sys; "
            f"print([s for s in {stems!r} if u.find_spec(s) is not None and s not in sys.stdlib_module_names])"
        )
        shadowed = _run([sys.executable, "-c", probe], cwd=tmp_path).stdout.strip()
        assert shadowed == "[]", f"{folder}/ scripts named like installed modules: {shadowed}"
