"""Tree-edit-distance dedup of CoCTE candidates (Reward-SQL section 4.1)."""

import itertools

import numpy as np
import pytest

from rewardsql_jax.sql.dedup import _levenshtein_to_many, cocte_similarity, dedup, distance_matrix, preorder_tokens

A = "WITH a AS (SELECT name, age FROM singer WHERE age > 30)\n\nSELECT name FROM a"
A2 = "WITH b AS (SELECT title, year FROM song WHERE year > 2000)\n\nSELECT title FROM b"  # same structure
A3 = "WITH a AS (SELECT name, age FROM singer WHERE age > 30)\n\nSELECT name FROM a ORDER BY age"
DIFF = (
    "WITH c AS (SELECT country, COUNT(*) AS n FROM singer GROUP BY country),\n\n"
    "d AS (SELECT country FROM c WHERE n > 1 UNION SELECT country FROM stadium)\n\nSELECT COUNT(*) FROM d"
)


def _lev(a, b):
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def test_vectorised_levenshtein_matches_reference_dp():
    rng = np.random.default_rng(0)
    for _ in range(100):
        a = rng.integers(0, 4, rng.integers(0, 15))
        bs = [rng.integers(0, 4, rng.integers(0, 15)) for _ in range(4)]
        assert list(_levenshtein_to_many(a, bs)) == [_lev(list(a), list(b)) for b in bs]


def test_preorder_is_depth_first_parent_before_children():
    toks = preorder_tokens("SELECT a FROM t WHERE b = 1")
    assert toks[0] == "Select"
    # the Column a and its Identifier come before the FROM subtree (pre-order, not breadth-first)
    assert toks[1:3] == ("Column", "Identifier") and toks.index("From") > 2
    assert "EQ" in toks and toks.index("EQ") < toks.index("Literal")
    assert preorder_tokens("SELECT a FROM t", values=True)[1:3] == ("Column", "Identifier:a")


def test_similarity_properties():
    qs = [A, A2, A3, DIFF]
    for a in qs:
        assert cocte_similarity(a, a) == 1.0
    for a, b in itertools.combinations(qs, 2):
        s = cocte_similarity(a, b)
        assert 0.0 <= s <= 1.0 and s == cocte_similarity(b, a)
    assert cocte_similarity(A, A2) == 1.0  # structure only by default
    assert cocte_similarity(A, A2, values=True) < 1.0
    assert cocte_similarity(A, A3) > cocte_similarity(A, DIFF)


def test_similarity_is_one_minus_normalised_distance():
    ta, tb = preorder_tokens(A), preorder_tokens(A3)
    expected = 1 - _lev(ta, tb) / max(len(ta), len(tb))
    assert cocte_similarity(A, A3) == pytest.approx(expected, abs=1e-12)
    d = distance_matrix([A, A3, DIFF])
    assert np.allclose(d, d.T) and np.all(np.diag(d) == 0)


def test_dedup_keeps_the_diverse_one():
    cands = [A, A2, A3, DIFF]  # three near-identical + one different
    kept = dedup(cands, 2)
    assert DIFF in kept and len(kept) == 2
    assert kept[0] in (A, A2, A3)
    assert kept == [c for c in cands if c in kept]  # original order


def test_dedup_ties_prefer_earlier_candidates_and_ratio_rounds_up():
    cands = [A, A2, DIFF]  # A and A2 are structurally identical: the later (A2) goes first
    assert dedup(cands, 2) == [A, DIFF]
    assert dedup(cands, 0.5) == [A, DIFF]  # ceil(1.5) = 2
    assert dedup(cands, 0.1) == [A]  # at least one
    assert dedup(cands, 1.0) == cands and dedup(cands, 10) == cands
    assert dedup([], 3) == []


def test_dedup_32_candidates():
    base = "WITH s AS (SELECT {c} FROM singer WHERE age > {v})\n\nSELECT {c} FROM s"
    cands = [base.format(c="name", v=i) for i in range(28)] + [A3, DIFF, A, "SELECT COUNT(*) FROM singer"]
    kept = dedup(cands, 0.125)
    assert len(kept) == 4
    assert DIFF in kept and "SELECT COUNT(*) FROM singer" in kept
    assert sum(c.startswith("WITH s AS") for c in kept) <= 1


@pytest.mark.parametrize(
    "keep,err",
    [(0, ValueError), (-1, ValueError), (0.0, ValueError), (1.5, ValueError), (True, TypeError), ("2", TypeError)],
)
def test_bad_keep(keep, err):
    with pytest.raises(err):
        dedup([A, DIFF], keep)


def test_unparseable_candidate_names_its_index():
    with pytest.raises(ValueError, match="candidate 1"):
        dedup([A, "SELEC FROM WHERE", DIFF], 2)
    with pytest.raises(ValueError):
        cocte_similarity(A, "")
