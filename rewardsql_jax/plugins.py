"""User code without editing the package: ``plugins=path/a.py,path/b.py`` imports those files before the run, so
the losses (``losses.register``) and RL algorithms (``rl.register_algorithm``) they define are selectable by name
on the command line (``rl.loss=...``, ``rl.algorithm=...``)."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

_LOADED: dict[Path, object] = {}


def load_plugins(paths) -> list:
    """Import each ``.py`` file of ``paths`` once (a second call with the same file is a no-op); returns the
    modules. A missing file or one that fails to import raises one error naming the file."""
    modules = []
    for raw in paths or ():
        path = Path(raw).expanduser().resolve()
        if path in _LOADED:
            modules.append(_LOADED[path])
            continue
        if not path.is_file() or path.suffix != ".py":
            raise FileNotFoundError(
                f"plugins={raw}: no Python file at {path}; give the path of a .py file (several: plugins=a.py,b.py)"
            )
        name = f"rewardsql_plugin_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None  # a .py file always gets a source loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            del sys.modules[name]
            raise ImportError(f"plugins={raw}: importing {path} failed: {type(e).__name__}: {e}") from e
        _LOADED[path] = module
        modules.append(module)
    return modules


def plugin_overrides(overrides) -> list[str]:
    """The files named by ``plugins=...`` among ``key=value`` overrides (to import before the others are read,
    since ``rl.algorithm=NAME`` is checked against the registry)."""
    files = []
    for item in overrides:
        key, _, value = item.partition("=")
        if key.strip() == "plugins":
            files += [v.strip() for v in value.strip("()[] ").replace("'", "").replace('"', "").split(",") if v.strip()]
    return files
