"""stages.inference: a database's questions sampled together, whichever process predicts them; a stopped stage resumed
inside itself to what one uninterrupted run writes; greedy decoding alone with ``best_of_n=0``."""

import dataclasses
import json
import shutil

import pytest

from rewardsql_jax.stages import generation, inference, zero_shot
from rewardsql_jax.stages.inference import database_runs
from rewardsql_jax.stages.runner import run_pipeline


def test_database_runs_stay_within_a_database_and_a_size():
    records = [{"db_id": d} for d in "aaaaabbbcaaa"]
    assert database_runs(list(range(12)), records, 3) == [[0, 1, 2], [3, 4], [5, 6, 7], [8], [9, 10, 11]]
    assert database_runs([0, 2, 4, 6, 8, 10], records, 8) == [[0, 2, 4], [6], [8], [10]]
    assert database_runs([], records, 4) == []


def _pipeline_config(tmp_path, run_dir, best_of_n: int):
    from test_zero_shot import _config, _tiny_chat_model

    cfg = _config(tmp_path, _tiny_chat_model(tmp_path / "tiny"), ("cold_start", "sft", "inference", "evaluate"))
    return dataclasses.replace(
        cfg,
        run_dir=str(run_dir),
        data=dataclasses.replace(cfg.data, questions_per_db=8, max_eval=6),
        inference=dataclasses.replace(cfg.inference, best_of_n=best_of_n),
    )


def _counting_decoder(monkeypatch, calls: list, fail_after: int | None = None):
    """Every decoder call of the stage (zero-shot, greedy, samples) counted; the call after ``fail_after`` raises,
    as a kill would stop the stage there."""
    real = generation.generate_sql

    def decode(*args, **kwargs):
        if fail_after is not None and len(calls) == fail_after:
            raise KeyboardInterrupt("stopped")
        calls.append(len(args[2]))
        return real(*args, **kwargs)

    monkeypatch.setattr(inference, "generate_sql", decode)
    monkeypatch.setattr(zero_shot, "generate_sql", decode)


def test_a_stopped_inference_stage_resumes_inside_itself_to_the_same_predictions(tmp_path, monkeypatch):
    """Zero-shot, SFT greedy and SFT samples decoded two questions at a time; stopped after its fourth decoder call,
    the rerun decodes only what was not kept, and writes what one uninterrupted run wrote."""
    monkeypatch.setattr(inference, "GREEDY_CALL", 2)
    monkeypatch.setattr(inference, "SAMPLE_CALL", 2)
    whole = _pipeline_config(tmp_path, tmp_path / "whole", best_of_n=2)
    run_pipeline(whole, log=lambda *_: None)
    stopped = dataclasses.replace(whole, run_dir=str(tmp_path / "stopped"))
    shutil.copytree(tmp_path / "whole", tmp_path / "stopped")
    for stage in ("inference", "evaluate"):
        shutil.rmtree(tmp_path / "stopped" / stage)
    first: list = []
    _counting_decoder(monkeypatch, first, fail_after=4)
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(stopped, log=lambda *_: None)
    rest: list = []
    _counting_decoder(monkeypatch, rest)
    run_pipeline(stopped, log=lambda *_: None)
    assert len(first) == 4 and len(rest) == 3 * 3 - 4  # three parts of three runs of two questions
    read = lambda d: json.loads((tmp_path / d / "inference" / "predictions.json").read_text())  # noqa: E731
    assert read("stopped") == read("whole")
    ev = lambda d: json.loads((tmp_path / d / "evaluate" / "metrics.json").read_text())["ex"]  # noqa: E731
    assert ev("stopped") == ev("whole")


def test_best_of_n_zero_decodes_greedy_alone(tmp_path, monkeypatch):
    calls: list = []
    _counting_decoder(monkeypatch, calls)
    results = run_pipeline(_pipeline_config(tmp_path, tmp_path / "run", best_of_n=0), log=lambda *_: None)
    preds = json.loads((tmp_path / "run" / "inference" / "predictions.json").read_text())
    assert len(calls) == 2  # zero-shot and SFT greedy, six questions of one database in one call each
    assert all(p["candidates"] == [] and "greedy_sft" in p and "zero_shot" in p for p in preds)
    assert set(results["evaluate"]["ex"]) == {"zero_shot", "greedy_sft"}
    assert results["evaluate"]["curves"] is None and results["evaluate"]["headroom"] is None
