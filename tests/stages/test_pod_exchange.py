"""The host-value exchange of a pod's stages, as 2 processes (gloo, a localhost coordinator): every process gets
every process's value in order, a batch's rows computed where they are owned (row r on process r mod P) come back
whole and in order, and the RL stage's PRM scoring (``prm_scores``) scores each row on one process only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pod import launch

pytestmark = pytest.mark.slow

WORKER = str(Path(__file__).with_name("pod_exchange_worker.py"))


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    outs = launch([], processes=2, devices=1, log_dir=tmp_path_factory.mktemp("exchange"), script=WORKER, timeout=300)
    return [json.loads(out.strip().splitlines()[-1]) for out in outs]


def test_every_process_gets_every_value_in_process_order(reports):
    for me, rep in enumerate(reports):
        assert rep["process"] == me and rep["processes"] == 2
        assert rep["gathered"] == [[{"process": 0, "rows": [0]}, {"process": 1, "rows": [0, 1]}]] * 3


def test_rows_computed_where_owned_come_back_whole_and_in_order(reports):
    expected = [f"row {r} by {r % 2}" for r in range(7)]
    assert [rep["rows"] for rep in reports] == [expected, expected]


def test_prm_scores_each_row_once_on_its_owner(reports):
    responses = ["x" * (r + 1) for r in range(7)]
    expected = [[2.0, float(r + 1)] for r in range(7)]
    assert [rep["scores"] for rep in reports] == [expected, expected]
    assert reports[0]["scored_here"] == responses[0::2] and reports[1]["scored_here"] == responses[1::2]
