"""Spider hardness: official eval_hardness on the sql trees, and the sqlglot approximation."""

import json
from collections import Counter
from pathlib import Path

import pytest

from rewardsql_jax.data import approx_spider_hardness, spider_hardness
from rewardsql_jax.data.spider_hardness import hardness_from_counts

DEV = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "spider" / "dev.json"


@pytest.fixture(scope="module")
def dev_rows():
    if not DEV.is_file():
        pytest.skip(f"real Spider dev.json not found at {DEV}")
    return json.loads(DEV.read_text())


def test_official_counts_on_dev(dev_rows):
    # Counts printed by the official evaluation.py on the 1034 dev questions.
    counts = Counter(spider_hardness(r["sql"]) for r in dev_rows)
    assert counts == {"easy": 248, "medium": 446, "hard": 174, "extra": 166}


def test_sqlglot_approximation_matches_official_on_dev(dev_rows):
    disagree = [r["query"] for r in dev_rows if approx_spider_hardness(r["query"]) != spider_hardness(r["sql"])]
    assert disagree == []


def test_decision_rule_boundaries():
    assert hardness_from_counts(1, 0, 0) == "easy"
    assert hardness_from_counts(2, 0, 1) == "medium"
    assert hardness_from_counts(0, 0, 2) == "medium"
    assert hardness_from_counts(3, 0, 2) == "hard"
    assert hardness_from_counts(1, 1, 0) == "hard"
    assert hardness_from_counts(1, 1, 1) == "extra"
    assert hardness_from_counts(4, 0, 0) == "extra"


@pytest.mark.parametrize(
    "sql, level",
    [
        ("SELECT count(*) FROM singer", "easy"),
        ("SELECT name FROM singer WHERE age > 20", "easy"),
        ("SELECT name, age FROM singer WHERE age > 20", "medium"),
        (
            "SELECT T2.name, count(*) FROM concert AS T1 JOIN stadium AS T2 ON T1.stadium_id = T2.stadium_id "
            "GROUP BY T1.stadium_id",
            "medium",
        ),
        ("SELECT name FROM singer WHERE age > (SELECT avg(age) FROM singer)", "hard"),
        ("SELECT name FROM a INTERSECT SELECT name FROM b", "hard"),
        ("SELECT name FROM a WHERE x = 1 OR y LIKE '%z%' ORDER BY name LIMIT 3", "extra"),
    ],
)
def test_approximation_on_hand_cases(sql, level):
    assert approx_spider_hardness(sql) == level


def test_approximation_rejects_unparsable_sql():
    with pytest.raises(ValueError, match="cannot parse"):
        approx_spider_hardness("SELECT FROM WHERE (((")
