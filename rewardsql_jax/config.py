"""Configs as frozen dataclasses: load a Python config file, apply ``key=value`` overrides, save as JSON.

A config file is a Python module defining ``CONFIG`` (a dataclass instance) or ``get_config()``.
Overrides address nested fields with dots (``model.hidden_size=64``); values are parsed by the type of
the field they replace, so a typo or a wrong type fails early with a message naming the key.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import re
import typing
from pathlib import Path


def load_config(path):
    """Import a config file and return its ``CONFIG`` (or ``get_config()``)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"config file {path} does not exist; pass --config configs/<name>.py")
    spec = importlib.util.spec_from_file_location(f"_rewardsql_config_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if hasattr(module, "get_config"):
        return module.get_config()
    if hasattr(module, "CONFIG"):
        return module.CONFIG
    raise ValueError(f"config file {path} must define CONFIG or get_config()")


def _parse_value(raw: str, current, field_type, key: str):
    if raw in ("None", "null"):
        return None
    target = type(current) if current is not None else None
    if target is None:
        origin_args = [a for a in typing.get_args(field_type) if a is not type(None)]
        target = origin_args[0] if origin_args else str
    if target is bool:
        if raw.lower() in ("true", "1", "yes"):
            return True
        if raw.lower() in ("false", "0", "no"):
            return False
        raise ValueError(f"override {key}={raw}: expected true/false")
    if target in (int, float):
        try:
            return target(float(raw)) if target is int and "e" in raw.lower() else target(raw)
        except ValueError:
            raise ValueError(f"override {key}={raw}: expected a {target.__name__}") from None
    if target is dict:  # e.g. rl.loss_options={"scale":2.0}
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = None
        if not isinstance(value, dict):
            raise ValueError(f"override {key}={raw}: expected a Python dict literal, e.g. {key}='{{\"scale\": 2.0}}'")
        return value
    if target in (tuple, list):
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = tuple(s.strip() for s in raw.split(",") if s.strip())
        return tuple(value) if isinstance(value, (list, tuple)) else (value,)
    return raw


def apply_overrides(cfg, overrides):
    """Return ``cfg`` with every ``"a.b.c=value"`` applied, validated once after all of them.

    All overrides are parsed and collected first; then each touched (frozen) dataclass is rebuilt once,
    innermost first, so its ``__post_init__`` checks the final values: ``data.source=spider data.root=R``
    works in either order. A check that fails names the override(s) it concerns.
    """
    changes = _Changes()  # field -> parsed value, or the nested _Changes of a section
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} must look like key=value (e.g. train.lr=1e-5)")
        key, raw = item.split("=", 1)
        key = key.strip()
        _collect(cfg, key.split("."), raw.strip(), key, changes)
    return _rebuild(cfg, changes, ())


class _Changes(dict):
    """Changes of one section, and the ``key=value`` overrides that reached it (for error messages)."""

    def __init__(self):
        super().__init__()
        self.items_: list = []


def _collect(obj, parts, raw, key, changes):
    changes.items_.append(f"{key}={raw}")
    if not dataclasses.is_dataclass(obj):
        raise ValueError(f"override {key}: {type(obj).__name__} has no field {parts[0]!r}")
    fields = {f.name: f for f in dataclasses.fields(obj)}
    name = parts[0]
    if name not in fields:
        raise ValueError(f"override {key}: unknown field {name!r}; known fields: {sorted(fields)}")
    current = getattr(obj, name)
    if len(parts) == 1:
        if dataclasses.is_dataclass(current):
            raise ValueError(f"override {key}: {name!r} is a section; set one of its fields ({key}.<field>=...)")
        if not fields[name].init:
            raise ValueError(f"override {key}: field {name!r} is computed, not settable")
        changes[name] = _parse_value(raw, current, fields[name].type, key)
    else:
        sub = changes.setdefault(name, _Changes())
        if not isinstance(sub, _Changes):  # a.b=1 then a.b.c=2
            raise ValueError(f"override {key}: {key.rsplit('.', len(parts) - 1)[0]} is not a section")
        _collect(current, parts[1:], raw, key, sub)


def _rebuild(obj, changes, path):
    if not changes:
        return obj
    kwargs = {
        name: _rebuild(getattr(obj, name), sub, (*path, name)) if isinstance(sub, _Changes) else sub
        for name, sub in changes.items()
    }
    try:
        return dataclasses.replace(obj, **kwargs)
    except (ValueError, TypeError) as e:
        items = changes.items_
        msg = str(e)
        named = [it for it in items if re.search(rf"\b{re.escape(it.split('=', 1)[0].split('.')[-1])}\b", msg)]
        which = named or items
        section = ".".join(path) or "config"
        label = "override" if len(which) == 1 else "overrides"
        raise ValueError(
            f"{label} {' '.join(which)}: {msg}" + ("" if named else f" (after all overrides, in {section})")
        ) from None


def to_dict(cfg) -> dict:
    """Plain-JSON view of a (nested) config dataclass."""
    return json.loads(json.dumps(dataclasses.asdict(cfg), default=str))


def save_config(cfg, path) -> None:
    """Write the effective config as JSON (the run directory's ``config.json``)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(to_dict(cfg), indent=2, sort_keys=True))
