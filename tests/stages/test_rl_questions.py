"""``data.rl_questions_per_db``: cold_start writes ``rl.jsonl`` (questions of the training databases SFT did not
see), the RL stage reads it instead of ``train.jsonl``, and the setting is one cold_start is recorded with."""

import dataclasses
import json

import pytest
from tiny_shapes import tiny_model

from rewardsql_jax.config import apply_overrides
from rewardsql_jax.stages.context import RunContext
from rewardsql_jax.stages.rl.setup import rl_data
from rewardsql_jax.stages.run_config import DataConfig, RunConfig
from rewardsql_jax.stages.runner import run_pipeline
from rewardsql_jax.stages.stage_config import StageConfigChanged, stage_settings

CFG = RunConfig(
    name="rl_questions_test",
    workers=1,
    stages=("cold_start",),
    data=DataConfig(
        n_train_dbs=2, n_test_dbs=1, questions_per_db=6, schema_examples=0, max_eval=2, rl_questions_per_db=5
    ),
    model=tiny_model(vocab_size=500, max_len=1024),
)


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_rl_questions_need_the_builtin_or_spider_source():
    with pytest.raises(ValueError, match=r"data\.rl_questions_per_db=5 needs data\.source='builtin' or 'spider'"):
        DataConfig(source="bird", root="/data/bird", rl_questions_per_db=5)
    with pytest.raises(ValueError, match=r"takes RL questions out of the training split; data\.train_split is empty"):
        DataConfig(source="spider", root="/data/spider", train_split="", rl_questions_per_db=5)
    assert DataConfig(source="spider", root="/data/spider", rl_questions_per_db=5).rl_questions_per_db == 5
    with pytest.raises(ValueError, match=r"data\.rl_questions_per_db must be a non-negative int"):
        DataConfig(rl_questions_per_db=-1)
    DataConfig(source="bird", root="/data/bird")  # 0 (the default) is fine with any source
    cfg = apply_overrides(RunConfig(), ["data.rl_questions_per_db=20"])
    assert cfg.data.rl_questions_per_db == 20
    assert stage_settings(cfg, "cold_start")["data.rl_questions_per_db"] == 20


def test_cold_start_writes_rl_questions_and_rl_data_reads_them(tmp_path):
    cfg = dataclasses.replace(CFG, run_dir=str(tmp_path / "run"))
    metrics = run_pipeline(cfg, log=lambda *_: None)["cold_start"]
    out = tmp_path / "run" / "cold_start"
    train, rl = _jsonl(out / "train.jsonl"), _jsonl(out / "rl.jsonl")
    assert metrics["rl_questions"] == len(rl) == 2 * 5 and metrics["train_questions"] == len(train) == 2 * 6
    assert set(rl[0]) == set(train[0]) - {"targets"}
    assert not {(r["db_id"], r["gold_sql"]) for r in rl} & {(r["db_id"], r["gold_sql"]) for r in train}
    assert {r["db_id"] for r in rl} == {r["db_id"] for r in train}
    assert all(r["target"] == r["gold_sql"] and r["question"] in r["prompt"] for r in rl)
    # the same schema text as the SFT prompts of the database
    head = {r["db_id"]: r["prompt"].split("【Question】")[0] for r in train}
    assert all(r["prompt"].split("【Question】")[0] == head[r["db_id"]] for r in rl)

    ctx = RunContext.create(cfg)
    data = rl_data(ctx)
    assert data.source == "rl.jsonl"
    assert [r["question_id"] for r in data.records] == [r["question_id"] for r in rl]

    # a rerun asking for another number stops: cold_start's artefacts depend on the setting
    changed = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, rl_questions_per_db=0))
    with pytest.raises(StageConfigChanged, match="data.rl_questions_per_db: 5 -> 0"):
        run_pipeline(changed, log=lambda *_: None)


def test_without_the_option_rl_trains_on_the_sft_questions(tmp_path):
    cfg = dataclasses.replace(
        CFG, run_dir=str(tmp_path / "run"), data=dataclasses.replace(CFG.data, rl_questions_per_db=0)
    )
    out = tmp_path / "run" / "cold_start"
    out.mkdir(parents=True)
    (out / "rl.jsonl").write_text('{"stale": true}\n')  # of an earlier run: removed, not read
    metrics = run_pipeline(cfg, log=lambda *_: None)["cold_start"]
    assert metrics["rl_questions"] == 0 and not (out / "rl.jsonl").exists()
    assert not (out / "data" / "rl.json").exists()
    data = rl_data(RunContext.create(cfg))
    assert data.source == "train.jsonl"
    assert [r["question_id"] for r in data.records] == [r["question_id"] for r in _jsonl(out / "train.jsonl")]
