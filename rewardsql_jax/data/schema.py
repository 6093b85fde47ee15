"""Reward-SQL / XiYan M-Schema text of a SQLite database.

Format (XiYan-SQL's M-Schema, `MSchema.to_mschema`, as used by Reward-SQL's prompt; DESIGN.md):

    【DB_ID】 concert_singer
    # Table: stadium
    [
    (Stadium_ID:INT, Primary Key, Examples: [1, 2, 3]),
    (Location:TEXT, Examples: [Raith Rovers, Ayr United, East Fife]),
    ...
    ]
    【Foreign keys】
    concert.Stadium_ID=stadium.Stadium_ID

Field line: `(name:TYPE[, description][, Primary Key][, Examples: [v1, v2, v3]])`, joined by
",\\n". Choices, following XiYan's code where it decides:
- TYPE is the declared SQLite type, upper-cased, without its "(n)" size; an undeclared type
  prints as NULL (what XiYan gets from SQLAlchemy's NullType).
- Examples: `SELECT DISTINCT col ... WHERE col IS NOT NULL AND col <> '' LIMIT 5` (deterministic
  for a given file), first `example_num` kept; DATE/TIME/DATETIME/TIMESTAMP columns keep one;
  if some example is longer than 20 characters only the first is kept, and none if longer
  than 50; no examples when a value looks like an e-mail or a URL; BLOBs are never shown.
  Unlike XiYan, whitespace inside a value is collapsed so each column stays on one line.
- The description (BIRD column_description) sits between the type and "Primary Key".
- Tables in creation order (sqlite_master); foreign keys in declaration order, each
  `table.column=ref_table.ref_column`, an omitted reference column resolved to the primary key;
  the 【Foreign keys】 block is left out when there are none.
- XiYan's own "【Schema】" line after 【DB_ID】 is not emitted: Reward-SQL's prompt already puts
  【Schema】 above this text (prompts.reward_sql_prompt).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

_DATE_TYPES = ("DATE", "TIME", "DATETIME", "TIMESTAMP")
_EMAIL = re.compile(r"^[\w\.-]+@[\w\.-]+\.\w+$")


@dataclass(frozen=True)
class ColumnInfo:
    """One column: declared type (as in the DDL), primary-key flag, up to `example_rows` sample values."""

    name: str
    type: str
    primary_key: bool
    examples: tuple[str, ...]


@dataclass(frozen=True)
class TableInfo:
    """One table and its columns in declaration order."""

    name: str
    columns: tuple[ColumnInfo, ...]


@dataclass(frozen=True)
class ForeignKey:
    """`table.column` references `ref_table.ref_column`."""

    table: str
    column: str
    ref_table: str
    ref_column: str

    def text(self) -> str:
        """M-Schema line `t1.c1=t2.c2`."""
        return f"{self.table}.{self.column}={self.ref_table}.{self.ref_column}"


@dataclass(frozen=True)
class DbSchema:
    """What a SQLite file says about its tables, keys and values."""

    tables: tuple[TableInfo, ...]
    foreign_keys: tuple[ForeignKey, ...]


@dataclass(frozen=True)
class MSchemaOptions:
    """Rendering knobs; defaults are XiYan's."""

    example_num: int = 3
    long_example_len: int = 20
    max_example_len: int = 50

    def __post_init__(self):
        if self.example_num < 0:
            raise ValueError(f"example_num must be >= 0, got {self.example_num}")
        if not 0 < self.long_example_len <= self.max_example_len:
            raise ValueError(
                f"need 0 < long_example_len <= max_example_len, got {self.long_example_len}, {self.max_example_len}"
            )


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def connect_readonly(db_path: str | Path) -> sqlite3.Connection:
    """Open a SQLite file read-only (`mode=ro`); FileNotFoundError with the path if it is absent."""
    path = Path(db_path)
    if not path.is_file():
        raise FileNotFoundError(f"SQLite database not found: {path}")
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)


def _examples(conn: sqlite3.Connection, table: str, column: str, n: int) -> tuple[str, ...]:
    q = (
        f"SELECT DISTINCT {_quote(column)} FROM {_quote(table)} "
        f"WHERE {_quote(column)} IS NOT NULL AND {_quote(column)} <> '' LIMIT {int(n)}"
    )
    try:
        values = [row[0] for row in conn.execute(q)]
    except sqlite3.Error:
        return ()
    return tuple(" ".join(str(v).split()) for v in values if not isinstance(v, bytes))


def _read_schema(conn: sqlite3.Connection, example_rows: int) -> DbSchema:
    names = [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
            "ORDER BY rowid"
        )
    ]
    by_lower = {n.lower(): n for n in names}
    tables, pks, fks = [], {}, []
    for name in names:
        info = list(conn.execute(f"PRAGMA table_info({_quote(name)})"))
        pks[name] = [r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5])]
        columns = tuple(
            ColumnInfo(
                name=r[1],
                type=(r[2] or "").split("(")[0].strip().upper() or "NULL",
                primary_key=bool(r[5]),
                examples=_examples(conn, name, r[1], example_rows),
            )
            for r in info
        )
        tables.append(TableInfo(name=name, columns=columns))
    for name in names:
        rows = sorted(conn.execute(f"PRAGMA foreign_key_list({_quote(name)})"), key=lambda r: (-r[0], r[1]))
        for _id, seq, ref_table, column, ref_column, *_ in rows:
            ref_table = by_lower.get(ref_table.lower(), ref_table)
            if ref_column is None:  # REFERENCES t  ==  REFERENCES t(<primary key>)
                ref_pk = pks.get(ref_table, [])
                ref_column = ref_pk[seq] if seq < len(ref_pk) else column
            fks.append(ForeignKey(name, column, ref_table, ref_column))
    return DbSchema(tables=tuple(tables), foreign_keys=tuple(fks))


@lru_cache(maxsize=256)
def _read_schema_cached(path: str, mtime_ns: int, size: int, example_rows: int) -> DbSchema:
    conn = connect_readonly(path)
    try:
        return _read_schema(conn, example_rows)
    finally:
        conn.close()


def read_db_schema(db_path: str | Path, *, example_rows: int = 5) -> DbSchema:
    """Tables, columns, types, keys and sample values of a SQLite file (read-only).

    Cached per (resolved path, mtime, size), so a rewritten file is read again.
    """
    path = Path(db_path)
    if not path.is_file():
        raise FileNotFoundError(f"SQLite database not found: {path}")
    stat = path.stat()
    return _read_schema_cached(str(path.resolve()), stat.st_mtime_ns, stat.st_size, example_rows)


def _shown_examples(column: ColumnInfo, options: MSchemaOptions) -> list[str]:
    values = list(column.examples)
    if any(_EMAIL.match(v) or "http://" in v or "https://" in v for v in values):
        return []
    values = values[: options.example_num]
    if not values:
        return []
    if column.type in _DATE_TYPES:
        return values[:1]
    longest = max(len(v) for v in values)
    if longest > options.max_example_len:
        return []
    if longest > options.long_example_len:
        return values[:1]
    return values


def _field_line(table: str, column: ColumnInfo, descriptions: Mapping, options: MSchemaOptions) -> str:
    line = f"({column.name}:{column.type}"
    description = descriptions.get((table.lower(), column.name.lower()), "")
    if description:
        line += f", {description.strip()}"
    if column.primary_key:
        line += ", Primary Key"
    examples = _shown_examples(column, options)
    if examples:
        line += f", Examples: [{', '.join(examples)}]"
    return line + ")"


def render_m_schema(
    db_id: str,
    schema: DbSchema,
    *,
    descriptions: Mapping[tuple[str, str], str] | None = None,
    extra_foreign_keys: tuple[ForeignKey, ...] = (),
    options: MSchemaOptions = MSchemaOptions(),
) -> str:
    """M-Schema text of `schema` (see the module docstring for the exact format).

    `descriptions`: {(table.lower(), column.lower()): text}, e.g. from bird.read_bird_descriptions.
    `extra_foreign_keys` are appended after the database's own (duplicates dropped).
    """
    descriptions = descriptions or {}
    out = [f"【DB_ID】 {db_id}"]
    for table in schema.tables:
        out.append(f"# Table: {table.name}")
        out.append("[")
        out.append(",\n".join(_field_line(table.name, c, descriptions, options) for c in table.columns))
        out.append("]")
    fks, seen = [], set()
    for fk in schema.foreign_keys + tuple(extra_foreign_keys):
        if fk.text().lower() not in seen:
            seen.add(fk.text().lower())
            fks.append(fk)
    if fks:
        out.append("【Foreign keys】")
        out.extend(fk.text() for fk in fks)
    return "\n".join(out)


def spider_foreign_keys(tables_entry: Mapping) -> tuple[ForeignKey, ...]:
    """Foreign keys declared in a Spider tables.json entry (original table/column names)."""
    tables = tables_entry["table_names_original"]
    columns = tables_entry["column_names_original"]
    return tuple(
        ForeignKey(tables[columns[a][0]], columns[a][1], tables[columns[b][0]], columns[b][1])
        for a, b in tables_entry["foreign_keys"]
    )


def m_schema(
    db_path: str | Path,
    *,
    db_id: str | None = None,
    descriptions: Mapping[tuple[str, str], str] | None = None,
    tables_entry: Mapping | None = None,
    options: MSchemaOptions = MSchemaOptions(),
) -> str:
    """M-Schema text of a SQLite file: read (cached, read-only) then render.

    `db_id` defaults to the file stem. `tables_entry` (a Spider tables.json entry) adds the
    foreign keys it annotates that the SQLite DDL does not declare.
    """
    path = Path(db_path)
    schema = read_db_schema(path, example_rows=max(5, options.example_num))
    extra = spider_foreign_keys(tables_entry) if tables_entry is not None else ()
    return render_m_schema(
        db_id or path.stem, schema, descriptions=descriptions, extra_foreign_keys=extra, options=options
    )
