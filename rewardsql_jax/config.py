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
    if target in (tuple, list):
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = tuple(s.strip() for s in raw.split(",") if s.strip())
        return tuple(value) if isinstance(value, (list, tuple)) else (value,)
    return raw


def apply_overrides(cfg, overrides):
    """Return ``cfg`` with each ``"a.b.c=value"`` applied (frozen dataclasses are rebuilt, re-validated)."""
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} must look like key=value (e.g. train.lr=1e-5)")
        key, raw = item.split("=", 1)
        cfg = _replace_path(cfg, key.strip().split("."), raw.strip(), key)
    return cfg


def _replace_path(obj, parts, raw, key):
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
        value = _parse_value(raw, current, fields[name].type, key)
    else:
        value = _replace_path(current, parts[1:], raw, key)
    return dataclasses.replace(obj, **{name: value})


def to_dict(cfg) -> dict:
    """Plain-JSON view of a (nested) config dataclass."""
    return json.loads(json.dumps(dataclasses.asdict(cfg), default=str))


def save_config(cfg, path) -> None:
    """Write the effective config as JSON (the run directory's ``config.json``)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(to_dict(cfg), indent=2, sort_keys=True))
