"""Configs as frozen dataclasses: load a Python config file, apply ``key=value`` overrides, save as JSON.

A config file is a Python module defining ``CONFIG`` (a dataclass instance) or ``get_config()``.
Overrides address nested fields with dots (``model.hidden_size=64``); values are parsed by the type of
the field they replace, so a typo or a wrong type fails early with a message naming the key. A dict field takes
a whole dict (``rl.loss_options={"agg": "dr_grpo"}``) or one entry (``rl.loss_options.agg=dr_grpo``: the value
parsed as a Python literal, else true/false, else a string). A dataclass whose fields moved declares
``moved_field(name) -> message | None`` and ``@with_moved_fields``: the old name then fails with that message,
as an override and as a keyword argument.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
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
        moved = _moved_message(type(obj), name)
        if moved:
            raise ValueError(f"override {key}={raw}: {moved}")
        raise ValueError(f"override {key}: unknown field {name!r}; known fields: {sorted(fields)}")
    current = getattr(obj, name)
    if len(parts) == 1:
        if dataclasses.is_dataclass(current):
            raise ValueError(f"override {key}: {name!r} is a section; set one of its fields ({key}.<field>=...)")
        if not fields[name].init:
            raise ValueError(f"override {key}: field {name!r} is computed, not settable")
        value = _parse_value(raw, current, fields[name].type, key)
        if isinstance(changes.get(name), _DictEntries):  # a.d.x=1 then a.d={...}: the entries apply on top
            changes[name].base = value
        else:
            changes[name] = value
    elif isinstance(current, dict):
        if len(parts) > 2:
            raise ValueError(f"override {key}: set one entry of {name!r} ({name}.<key>=value) or all of it")
        entries = changes.get(name)
        if not isinstance(entries, _DictEntries):
            entries = changes[name] = _DictEntries(entries)
        entries.set(parts[1], raw, current, key)
    else:
        sub = changes.setdefault(name, _Changes())
        if not isinstance(sub, _Changes):  # a.b=1 then a.b.c=2
            raise ValueError(f"override {key}: {key.rsplit('.', len(parts) - 1)[0]} is not a section")
        _collect(current, parts[1:], raw, key, sub)


class _DictEntries:
    """Overrides of single entries of a dict field (``rl.algorithm_options.rm_coef=0``), applied on top of the
    field's value, or of the whole dict when that is overridden too (in either order)."""

    def __init__(self, base=None):
        self.base = base
        self.entries: dict = {}

    def set(self, name, raw, current: dict, key):
        old = (self.base if self.base is not None else current).get(name)
        self.entries[name] = _parse_value(raw, old, None, key) if old is not None else _parse_entry(raw)

    def value(self, current: dict) -> dict:
        return {**(self.base if self.base is not None else current), **self.entries}


def _parse_entry(raw: str):
    """A dict entry's value without a type to go by: a Python literal, true/false, else the string."""
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return {"true": True, "false": False}.get(raw.lower(), raw)


def _moved_message(cls, name: str):
    moved = getattr(cls, "moved_field", None)
    return moved(name) if moved is not None else None


def with_moved_fields(cls):
    """Class decorator (above ``@dataclass``) for a config dataclass with a ``moved_field(name)`` classmethod:
    a keyword argument it knows (``RLConfig(rm_coef=0)`` in a config file, or ``dataclasses.replace``) fails
    with its message, which says where the setting lives now."""
    init = cls.__init__
    names = {f.name for f in dataclasses.fields(cls)}

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        for name in kwargs.keys() - names:
            moved = _moved_message(cls, name)
            if moved:
                raise ValueError(moved)
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls


def _rebuild(obj, changes, path):
    if not changes:
        return obj

    def new_value(name, sub):
        if isinstance(sub, _Changes):
            return _rebuild(getattr(obj, name), sub, (*path, name))
        return sub.value(getattr(obj, name)) if isinstance(sub, _DictEntries) else sub

    kwargs = {name: new_value(name, sub) for name, sub in changes.items()}
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
