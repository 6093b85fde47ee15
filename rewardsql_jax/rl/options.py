"""An algorithm's own settings: ``rl.algorithm_options`` (a dict in the config) read as its ``options_type``.

Every algorithm with settings of its own, built-in or a plugin's, declares ``options_type``: a frozen dataclass
whose fields are those settings with their defaults, checked in its ``__post_init__``. ``typed_options`` builds it
from the dict: a key that is not a field fails listing the fields, and a value given as an ``int`` where the field
is a ``float`` (``rl.algorithm_options.rm_coef=0`` on the command line) is made a ``float``; any other value of
the wrong plain type (``bool`` / ``int`` / ``float`` / ``str``) fails naming the key.
"""

from __future__ import annotations

import dataclasses
import typing

PLAIN = (bool, int, float, str)


def option_names(options_type) -> list[str]:
    """The option names of an ``options_type`` (none for ``None``)."""
    return [] if options_type is None else [f.name for f in dataclasses.fields(options_type)]


def _field_types(options_type) -> dict:
    try:
        return typing.get_type_hints(options_type)
    except (NameError, TypeError):  # an annotation that does not resolve: leave those values unchecked
        return {}


def _coerce(key: str, value, want):
    if want not in PLAIN or value is None:
        return value
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, want) and not (want is not bool and isinstance(value, bool)):
        return value
    raise ValueError(f"rl.algorithm_options.{key}={value!r}: expected a {want.__name__}")


def typed_options(options_type, given: dict, algorithm: str):
    """``given`` (``rl.algorithm_options``) as an instance of ``options_type``; ``None`` when the algorithm has
    no options (then ``given`` must be empty). Unknown keys fail with the algorithm's option names."""
    given = dict(given or {})
    names = option_names(options_type)
    unknown = sorted(set(given) - set(names))
    if unknown and not names:
        raise ValueError(f"rl.algorithm={algorithm!r} takes no rl.algorithm_options, got {unknown}")
    if unknown:
        raise ValueError(
            f"rl.algorithm_options {unknown} are not options of rl.algorithm={algorithm!r}; "
            f"its options are {sorted(names)}"
        )
    if options_type is None:
        return None
    types = _field_types(options_type)
    return options_type(**{k: _coerce(k, v, types.get(k)) for k, v in given.items()})


def options_dict(options) -> dict:
    """An algorithm's typed options as a plain dict (``{}`` for ``None``), for metrics and the resume check."""
    return {} if options is None else dataclasses.asdict(options)
