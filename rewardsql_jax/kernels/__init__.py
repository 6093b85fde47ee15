"""Source checkouts and editable installs only: this package is the top-level ``kernels/`` folder.

pyproject.toml maps ``kernels/`` onto ``rewardsql_jax.kernels`` (``package-dir``), so a built wheel installs
``kernels/*.py`` here, ``kernels/__init__.py`` included, and not this file. From a checkout this file is what
Python finds; it points the package's search path at ``kernels/`` and runs ``kernels/__init__.py`` as the package
body, so both ways give the same package (DESIGN.md: a top-level ``kernels`` import name belongs to another
PyPI package, so the folder is never importable as ``kernels``).
"""

from pathlib import Path as _Path

_INIT = _Path(__file__).resolve().parents[2] / "kernels" / "__init__.py"
__path__[:] = [str(_INIT.parent)]
exec(compile(_INIT.read_text(), str(_INIT), "exec"))
del _Path, _INIT
