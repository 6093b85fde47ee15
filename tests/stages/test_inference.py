"""stages.inference: a database's questions sampled together, whichever process predicts them."""

from rewardsql_jax.stages.inference import database_runs


def test_database_runs_stay_within_a_database_and_a_size():
    records = [{"db_id": d} for d in "aaaaabbbcaaa"]
    assert database_runs(list(range(12)), records, 3) == [[0, 1, 2], [3, 4], [5, 6, 7], [8], [9, 10, 11]]
    assert database_runs([0, 2, 4, 6, 8, 10], records, 8) == [[0, 2, 4], [6], [8], [10]]
    assert database_runs([], records, 4) == []
