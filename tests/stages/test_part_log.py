"""stages.part_log: a stage's finished groups of questions kept on disk, reused only under the same key and for the
same questions, a write torn by a kill ignored."""

import json

from rewardsql_jax.stages.part_log import PartLog, resumed_runs

RECORDS = [{"question_id": q} for q in (10, 11, 12, 13, 14)]
KEY = {"model": "m", "max_new_tokens": 8}


def _compute(calls):
    def compute(run):
        calls.append(run)
        return {i: f"sql{i}" for i in run}

    return compute


def test_a_rerun_computes_only_the_runs_not_kept(tmp_path):
    runs = [[0, 1], [2], [3, 4]]
    log = PartLog(tmp_path, "greedy", KEY, RECORDS)
    log.add(_compute([])([0, 1]))
    calls: list = []
    out = resumed_runs(PartLog(tmp_path, "greedy", KEY, RECORDS), runs, _compute(calls), "t")
    assert calls == [[2], [3, 4]]
    assert out == {i: f"sql{i}" for i in range(5)}
    calls.clear()
    assert resumed_runs(PartLog(tmp_path, "greedy", KEY, RECORDS), runs, _compute(calls), "t") == out
    assert calls == []


def test_another_key_or_other_questions_recompute(tmp_path):
    PartLog(tmp_path, "greedy", KEY, RECORDS).add({0: "old", 1: "old"})
    calls: list = []
    resumed_runs(PartLog(tmp_path, "greedy", {**KEY, "max_new_tokens": 16}, RECORDS), [[0, 1]], _compute(calls), "t")
    assert calls == [[0, 1]]
    moved = [{"question_id": 99}, *RECORDS[1:]]  # the eval set changed under index 0
    log = PartLog(tmp_path, "greedy", {**KEY, "max_new_tokens": 16}, moved)
    assert log.done == {1: "sql1"} and log.pending([[0, 1], [1]]) == [[0, 1]]
    # the log holds the new key's results alone: the first key's are gone
    assert PartLog(tmp_path, "greedy", KEY, RECORDS).done == {}


def test_a_line_torn_by_a_kill_ends_what_is_read_and_is_overwritten(tmp_path):
    log = PartLog(tmp_path, "samples", KEY, RECORDS)
    log.add({0: ["a"], 1: ["b"]})
    with open(log.path, "a") as f:
        f.write('{"i": 2, "question_id": 12, "val')  # killed mid-write
    again = PartLog(tmp_path, "samples", KEY, RECORDS)
    assert again.done == {0: ["a"], 1: ["b"]}
    again.add({2: ["c"]})
    lines = log.path.read_text().splitlines()
    assert [json.loads(line) for line in lines][1:] == [
        {"i": 0, "question_id": 10, "value": ["a"]},
        {"i": 1, "question_id": 11, "value": ["b"]},
        {"i": 2, "question_id": 12, "value": ["c"]},
    ]
