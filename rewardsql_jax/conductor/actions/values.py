"""Relevant-value retrieval without an LLM (SQLConductor Sec. 4.1, action "relevant-value retrieval").

An index over the distinct text values of every TEXT column of a database. A question is cut into
candidate phrases (word n-grams, n = 1..3); each phrase is matched against the stored values by

* exact match (case-insensitive) of the phrase with a value or with a word of a multi-word value, and
* fuzzy match: character-trigram Jaccard similarity (candidate generation, an inverted index over
  trigrams plays the role of LSH buckets) confirmed by a normalised edit-distance similarity.

So a misspelt surface form finds the stored one: "Brasil" retrieves 'Brazil' (the paper's Figure 9
example, BIRD-Dev QID 405). The index is pure Python and built once per database file.
"""

from __future__ import annotations

import collections
import dataclasses
import re
import sqlite3

_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'\-]*")


@dataclasses.dataclass(frozen=True)
class ValueHit:
    """A stored value matching part of the question: ``table.column = value`` with a similarity in [0, 1]."""

    table: str
    column: str
    value: str
    phrase: str
    score: float

    def render(self) -> str:
        escaped = self.value.replace("'", "''")
        return f"{self.table}.{self.column} = '{escaped}'"


@dataclasses.dataclass(frozen=True)
class ValueIndex:
    """Distinct text values per (table, column) plus a trigram inverted index over their normalised forms."""

    entries: tuple[tuple[str, str, str], ...]  # ((table, column, value), ...)
    trigrams: dict = dataclasses.field(compare=False)  # trigram -> tuple of entry indices


def trigrams(text: str) -> frozenset:
    """Character trigrams of ``' ' + lower(text) + ' '`` (padding lets short words share boundary grams)."""
    t = f" {text.lower().strip()} "
    return frozenset(t[i : i + 3] for i in range(len(t) - 2))


def edit_similarity(a: str, b: str) -> float:
    """1 - Levenshtein(a, b) / max(len): 1 for equal strings (case-insensitive), 0 for nothing in common."""
    a, b = a.lower(), b.lower()
    if a == b:
        return 1.0
    if not a or not b:
        return 0.0
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return 1.0 - prev[-1] / max(len(a), len(b))


def build_value_index(columns: dict, *, max_values_per_column: int = 1000) -> ValueIndex:
    """Index ``{(table, column): [values]}``; non-strings and duplicates are dropped."""
    entries, seen = [], set()
    for (table, column), values in columns.items():
        kept = 0
        for v in values:
            if not isinstance(v, str) or not v.strip() or (table, column, v) in seen or kept >= max_values_per_column:
                continue
            seen.add((table, column, v))
            entries.append((table, column, v))
            kept += 1
    inverted = collections.defaultdict(list)
    for i, (_, _, v) in enumerate(entries):
        for g in trigrams(v):
            inverted[g].append(i)
    return ValueIndex(entries=tuple(entries), trigrams={g: tuple(ix) for g, ix in inverted.items()})


def index_database(db_path) -> ValueIndex:
    """Read the distinct values of every TEXT column of a SQLite file (read-only) and index them."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        columns = {}
        for t in tables:
            for _, col, typ, *_ in conn.execute(f'PRAGMA table_info("{t}")'):
                if "CHAR" in typ.upper() or "TEXT" in typ.upper() or typ == "":
                    rows = conn.execute(f'SELECT DISTINCT "{col}" FROM "{t}" LIMIT 1000').fetchall()
                    columns[(t, col)] = [r[0] for r in rows]
    finally:
        conn.close()
    return build_value_index(columns)


def question_phrases(question: str, max_n: int = 3) -> list[str]:
    """Word n-grams of the question (n = 1..max_n), quotes stripped; the candidate surface forms."""
    words = [w.strip("'") for w in _WORD.findall(question)]
    words = [w for w in words if w]
    return [" ".join(words[i : i + n]) for n in range(1, max_n + 1) for i in range(len(words) - n + 1)]


def _similarity(phrase: str, value: str) -> float:
    """Best of whole-value and per-word similarity (a phrase may name one word of a longer value)."""
    best = edit_similarity(phrase, value)
    if " " in value and " " not in phrase:
        best = max(best, max(edit_similarity(phrase, w) for w in value.split()) * 0.9)
    return best


def retrieve_values(
    index: ValueIndex,
    question: str,
    *,
    top_k: int = 5,
    min_score: float = 0.75,
    min_phrase_chars: int = 3,
    candidate_jaccard: float = 0.2,
) -> tuple[ValueHit, ...]:
    """Stored values that match question phrases exactly or fuzzily, best first, one hit per value.

    Candidates share trigrams with the phrase (Jaccard >= ``candidate_jaccard``); a candidate is kept
    when its edit similarity reaches ``min_score``. Short phrases (< ``min_phrase_chars``) are skipped.
    """
    best: dict = {}
    for phrase in question_phrases(question):
        if len(phrase) < min_phrase_chars:
            continue
        grams = trigrams(phrase)
        counts = collections.Counter(i for g in grams for i in index.trigrams.get(g, ()))
        for i, shared in counts.items():
            table, column, value = index.entries[i]
            if (
                shared / len(grams | trigrams(value)) < candidate_jaccard
                and phrase.lower() not in value.lower().split()
            ):
                continue
            score = _similarity(phrase, value)
            if score >= min_score and score > best.get(i, (0.0, ""))[0]:
                best[i] = (score, phrase)
    ranked = sorted(best.items(), key=lambda kv: (-kv[1][0], kv[0]))[:top_k]
    hits = []
    for i, (s, p) in ranked:
        table, column, value = index.entries[i]
        hits.append(ValueHit(table, column, value, phrase=p, score=round(s, 4)))
    return tuple(hits)
