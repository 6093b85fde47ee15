from rewardsql_jax.conductor.actions.values import (
    build_value_index,
    edit_similarity,
    index_database,
    retrieve_values,
    trigrams,
)


def _index():
    return build_value_index(
        {
            ("singer", "country"): ["Brazil", "France", "Portugal", "Brazil"],
            ("singer", "name"): ["Ana Costa", "Joao Silva"],
            ("song", "language"): ["Portuguese", "English"],
            ("singer", "age"): [31, 40],
        }
    )


def test_brasil_finds_stored_brazil():
    hits = retrieve_values(_index(), "How many singers come from Brasil?")
    assert hits, "no value retrieved for a misspelt country"
    assert (hits[0].table, hits[0].column, hits[0].value) == ("singer", "country", "Brazil")
    assert hits[0].phrase == "Brasil" and 0.75 <= hits[0].score < 1.0
    assert hits[0].render() == "singer.country = 'Brazil'"


def test_exact_match_scores_one_and_words_of_multiword_values():
    hits = retrieve_values(_index(), "songs in portuguese by Silva")
    by_value = {h.value: h for h in hits}
    assert by_value["Portuguese"].score == 1.0
    assert "Joao Silva" in by_value  # one word of a multi-word value


def test_unrelated_question_retrieves_nothing_and_numbers_not_indexed():
    assert retrieve_values(_index(), "What is the average age?") == ()
    assert all(isinstance(v, str) for _, _, v in _index().entries)
    assert len(_index().entries) == 7  # duplicates dropped


def test_edit_similarity_and_trigrams():
    assert edit_similarity("Brasil", "brazil") == 1 - 1 / 6
    assert edit_similarity("abc", "abc") == 1.0
    assert " br" in trigrams("Brazil")


def test_index_database_reads_text_columns(tmp_path):
    import sqlite3

    db = tmp_path / "x.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE city (id INTEGER, name TEXT, country TEXT)")
    conn.executemany("INSERT INTO city VALUES (?, ?, ?)", [(1, "Lisbon", "Portugal"), (2, "Rio", "Brazil")])
    conn.commit()
    conn.close()
    hits = retrieve_values(index_database(db), "cities in Brasil")
    assert hits[0].render() == "city.country = 'Brazil'"
