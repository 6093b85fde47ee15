"""Shared fixtures: a tiny tagged tokenizer and a scripted action model on a small SQLite database."""

import sqlite3

import pytest


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory):
    from rewardsql_jax.conductor.training.tokenizer import build_tokenizer

    texts = [
        "question: How many singers are from Brazil?\n<reasoning>Write a first SQL query.</reasoning>"
        "<call>generate_sql()</call><results>sql: SELECT COUNT(*) FROM singer\nok, 1 rows</results>"
    ] * 20
    return build_tokenizer(texts, 320, tmp_path_factory.mktemp("tok"))


@pytest.fixture()
def music_db(tmp_path):
    path = tmp_path / "music.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER)")
    conn.execute(
        "CREATE TABLE song (id INTEGER PRIMARY KEY, title TEXT, singer_id INTEGER, "
        "FOREIGN KEY (singer_id) REFERENCES singer(id))"
    )
    conn.executemany(
        "INSERT INTO singer VALUES (?, ?, ?, ?)",
        [(1, "Ana", "Brazil", 30), (2, "Joao", "Brazil", 41), (3, "Marie", "France", 25)],
    )
    conn.executemany("INSERT INTO song VALUES (?, ?, ?)", [(1, "Sol", 1), (2, "Mar", 1), (3, "Ciel", 3)])
    conn.commit()
    conn.close()
    return str(path)
