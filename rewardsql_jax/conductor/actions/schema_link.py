"""Compact schema text and lexical schema linking (SQLConductor Sec. 4.1, action "schema linking").

The paper's schema linking is an LLM sub-task; with a user's action model (``actions.model_path``) the
``link_schema`` action asks it and keeps the tables it names (``named_tables``, closed over FK bridges). The
built-in default links lexically (no model): a
table is kept when its name or one of its columns shares a (crudely stemmed) word with the question
or with a retrieved value's column, and tables on foreign-key paths between kept tables are added so
joins stay possible. The linked schema keeps every column of a kept table (keys included).
"""

from __future__ import annotations

import dataclasses
import re
import sqlite3


@dataclasses.dataclass(frozen=True)
class SchemaInfo:
    """Tables in file order: ((table, (columns...)), ...) and foreign keys ((t1, c1, t2, c2), ...)."""

    tables: tuple
    foreign_keys: tuple


def read_schema(db_path) -> SchemaInfo:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY rowid")]
        tables, fks = [], []
        for t in names:
            tables.append((t, tuple(r[1] for r in conn.execute(f'PRAGMA table_info("{t}")'))))
            for r in conn.execute(f'PRAGMA foreign_key_list("{t}")'):
                fks.append((t, r[3], r[2], r[4]))
    finally:
        conn.close()
    return SchemaInfo(tables=tuple(tables), foreign_keys=tuple(fks))


def schema_text(info: SchemaInfo, keep=None) -> str:
    """``table(col, col, ...)`` one per line, then ``fk: t1.c=t2.c`` lines among the kept tables."""
    keep = None if keep is None else set(keep)
    lines = [f"{t}({', '.join(cols)})" for t, cols in info.tables if keep is None or t in keep]
    lines += [f"fk: {a}.{b}={c}.{d}" for a, b, c, d in info.foreign_keys if keep is None or (a in keep and c in keep)]
    return "\n".join(lines)


def _stem(word: str) -> str:
    word = word.lower()
    for suffix in ("ies", "es", "s"):
        if word.endswith(suffix) and len(word) > len(suffix) + 2:
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def _words(text: str) -> set:
    return {_stem(w) for w in re.findall(r"[A-Za-z]+", text) if len(w) > 1}


def link_tables(info: SchemaInfo, question: str, value_tables=()) -> tuple:
    """Tables mentioned by the question (name or column words) or by retrieved values, closed over FK paths."""
    q = _words(question)
    kept = {
        t
        for t, cols in info.tables
        if _words(t.replace("_", " ")) & q or any(_words(c.replace("_", " ")) - {"id"} & q for c in cols)
    }
    kept |= set(value_tables)
    if not kept:
        return tuple(t for t, _ in info.tables)
    return close_over_bridges(info, kept)


def named_tables(info: SchemaInfo, text: str) -> tuple:
    """The schema's tables named in ``text`` (a model's answer), as whole words, case-insensitive; schema order."""
    words = {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)}
    return tuple(t for t, _ in info.tables if t.lower() in words)


def close_over_bridges(info: SchemaInfo, kept) -> tuple:
    """``kept`` plus every table linked by FKs to two kept tables (e.g. a many-to-many link table); schema order."""
    kept = set(kept)
    neighbours: dict[str, set] = {}
    for a, _, c, _ in info.foreign_keys:
        neighbours.setdefault(a, set()).add(c)
        neighbours.setdefault(c, set()).add(a)
    bridges = {t for t, ns in neighbours.items() if t not in kept and len(ns & kept) >= 2}
    kept |= bridges
    return tuple(t for t, _ in info.tables if t in kept)
