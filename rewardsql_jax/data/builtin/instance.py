"""One generated database of the built-in benchmark: resolved names, rows, and the SQLite writer."""

from __future__ import annotations

import functools
import random
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from rewardsql_jax.data.builtin import words as W
from rewardsql_jax.data.builtin.domains import ROLES, Domain, make_value

# Foreign-key columns: (table role holding it, referenced role).
FOREIGN_KEYS = (("child", "parent"), ("link", "child"), ("link", "other"))
# The naming of a database whose table and column names are random two-word names (``data.scrambled_train_dbs``);
# namings 0 and 1 are the domains' own spellings.
SCRAMBLED = 2


@dataclass(frozen=True)
class Spelling:
    """The identifiers of one database: ``tables`` {role: (singular, plural)}, ``columns`` {(role, column role):
    name} and the primary keys' style (``id`` or ``<table>_id``)."""

    tables: dict
    columns: dict
    table_prefixed_ids: bool


def spelling(domain: Domain, naming: int, db_id: str) -> Spelling:
    """The domain's own names under naming 0 or 1; under ``SCRAMBLED`` distinct random adjective_noun names drawn
    for ``db_id`` (its own seed: the rows' random stream is the same under every naming)."""
    if naming in (0, 1):
        return Spelling(
            {t.role: (t.names[naming], t.plurals[naming]) for t in domain.tables},
            {(t.role, c.role): c.names[naming] for t in domain.tables for c in t.cols},
            table_prefixed_ids=naming == 1,
        )
    if naming != SCRAMBLED:
        raise ValueError(f"naming must be 0, 1 or {SCRAMBLED} (scrambled), got {naming}")
    pairs = [f"{a}_{n}".lower() for a in W.ADJECTIVES for n in W.NOUNS]
    slots = [("table", t.role) for t in domain.tables] + [(t.role, c.role) for t in domain.tables for c in t.cols]
    names = dict(zip(slots, random.Random(f"rewardsql_jax.builtin.scrambled:{db_id}").sample(pairs, len(slots))))
    return Spelling(
        {t.role: (names[("table", t.role)], names[("table", t.role)] + "s") for t in domain.tables},
        {key: name for key, name in names.items() if key[0] != "table"},
        table_prefixed_ids=True,
    )


@dataclass(frozen=True)
class DbInstance:
    """A domain under one naming (its identifiers: ``spelling``), with its generated rows ({role: [ {column role:
    value} ]})."""

    db_id: str
    domain: Domain
    naming: int
    rows: dict = field(compare=False)

    @functools.cached_property
    def spelling(self) -> Spelling:
        """The database's identifiers (``spelling(domain, naming, db_id)``)."""
        return spelling(self.domain, self.naming, self.db_id)

    def table(self, role: str) -> str:
        """SQL name of the table playing `role`."""
        return self.spelling.tables[role][0]

    def noun(self, role: str, plural: bool = False) -> str:
        """English noun for the table (singular or plural)."""
        return self.spelling.tables[role][int(plural)].replace("_", " ")

    def col(self, role: str, col_role: str) -> str:
        """SQL name of a column: a value role ('name', 'cat', ...), 'id', or 'fk_<role>'."""
        if col_role == "id":
            return f"{self.table(role)}_id" if self.spelling.table_prefixed_ids else "id"
        if col_role.startswith("fk_"):
            return f"{self.table(col_role[3:])}_id"
        if (role, col_role) not in self.spelling.columns:
            raise KeyError(f"{self.domain.name}.{role} has no column role {col_role!r}")
        return self.spelling.columns[(role, col_role)]

    def phrase(self, role: str, col_role: str) -> str:
        """English phrase for a column (its SQL name with spaces)."""
        return self.col(role, col_role).replace("_", " ")

    def values(self, role: str, col_role: str) -> list:
        """All values of a column, in row order."""
        return [r[col_role] for r in self.rows[role]]


def _columns(inst: DbInstance, role: str) -> list[tuple[str, str]]:
    """(column role, DDL fragment) in table order: id, value columns, foreign keys."""
    cols = [("id", f"{inst.col(role, 'id')} INTEGER PRIMARY KEY")]
    cols += [(c.role, f"{inst.col(role, c.role)} {c.sql_type}") for c in inst.domain.table(role).cols]
    cols += [(f"fk_{ref}", f"{inst.col(role, 'fk_' + ref)} INTEGER") for holder, ref in FOREIGN_KEYS if holder == role]
    return cols


def generate_instance(db_id: str, domain: Domain, naming: int, rng: random.Random) -> DbInstance:
    """Draw row counts and values for every table; names of a table are kept unique."""
    rows: dict[str, list[dict]] = {}
    for role in ROLES:
        table = domain.table(role)
        n = rng.randint(*table.rows)
        seen, out = set(), []
        for i in range(n):
            row: dict[str, object] = {"id": i + 1}
            for c in table.cols:
                value = make_value(c.gen, rng)
                if c.role == "name":
                    for _ in range(30):
                        if value not in seen:
                            break
                        value = make_value(c.gen, rng)
                    if value in seen:
                        continue
                    seen.add(value)
                row[c.role] = value
            for holder, ref in FOREIGN_KEYS:
                if holder == role:
                    row[f"fk_{ref}"] = rng.randint(1, len(rows[ref]))
            out.append(row)
        for i, row in enumerate(out):  # keep ids dense after dropped duplicates
            row["id"] = i + 1
        rows[role] = out
    return DbInstance(db_id=db_id, domain=domain, naming=naming, rows=rows)


def write_sqlite(inst: DbInstance, path: Path) -> None:
    """Create the SQLite file (replacing any old one) with keys declared in the DDL."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    conn = sqlite3.connect(path)
    try:
        for role in ROLES:
            cols = _columns(inst, role)
            ddl = [frag for _, frag in cols]
            ddl += [
                f"FOREIGN KEY ({inst.col(role, 'fk_' + ref)}) REFERENCES {inst.table(ref)}({inst.col(ref, 'id')})"
                for holder, ref in FOREIGN_KEYS
                if holder == role
            ]
            conn.execute(f"CREATE TABLE {inst.table(role)} (\n  " + ",\n  ".join(ddl) + "\n)")
            marks = ", ".join("?" for _ in cols)
            conn.executemany(
                f"INSERT INTO {inst.table(role)} VALUES ({marks})",
                [tuple(r[k] for k, _ in cols) for r in inst.rows[role]],
            )
        conn.commit()
    finally:
        conn.close()
