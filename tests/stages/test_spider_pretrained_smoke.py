"""configs/spider_pretrained.py runs every stage on real Spider and resumes, with a tiny from-scratch model substituted
on the command line (model.path="", configs/smoke.py's shapes) and a few questions of each kind: a small training file
of three Spider train databases, 2 RL questions of each taken out of it, 8 dev questions stratified by hardness."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from spider_files import SPIDER, TRAIN, small_train_file

from rewardsql_jax.config import load_config

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "spider_pretrained.py"
TINY = [
    "model.path=",
    "model.vocab_size=800",
    "model.hidden_size=32",
    "model.intermediate_size=64",
    "model.num_layers=1",
    "model.num_heads=2",
    "model.num_kv_heads=1",
    "model.max_len=4096",
    "data.max_prompt_tokens=0",  # counts a pretrained tokenizer's tokens; a tokenizer trained on the data has none yet
    "data.schema_examples=0",
    "inference.zero_shot=false",  # needs the pretrained model (tests/stages/test_zero_shot.py)
    "mesh.micro_batches=1",
    "workers=1",
]
FEW = [
    "data.rl_questions_per_db=2",
    "data.max_eval=8",
    "sft.steps=4",
    "sft.batch_size=4",
    "sft.micro_batches=1",
    "sft.checkpoint_every=2",
    "prm_labels.num_questions=2",
    "prm_labels.rollouts_per_question=2",
    "prm_labels.completions_per_step=2",
    "prm_labels.search_budget=2",
    "prm_labels.max_new_tokens=24",
    "prm.steps=3",
    "prm.batch_size=4",
    "rl.steps=2",
    "rl.prompts_per_step=2",
    "rl.samples_per_prompt=2",
    "rl.prompts_per_sampler_call=2",
    "rl.max_new_tokens=24",
    "inference.best_of_n=2",
    "inference.max_new_tokens=24",
]
STAGES = ("cold_start", "sft", "prm_labels", "prm", "rl", "inference", "evaluate")


def test_the_config_is_the_issues_pipeline():
    cfg = load_config(CONFIG)
    d = cfg.data
    assert (d.source, d.ex_mode, d.eval_split) == ("spider", "spider", "dev.json")
    assert (SPIDER.parent / "spider" / d.train_split).resolve() == TRAIN.resolve()
    assert d.rl_questions_per_db > 0 and d.max_eval == 400 and cfg.inference.zero_shot
    assert cfg.model.path == "wheel:smollm2-135m-instruct" and cfg.stages == STAGES
    assert d.max_prompt_tokens + max(cfg.inference.max_new_tokens, cfg.rl.max_new_tokens) <= cfg.model.max_len


@pytest.mark.slow
@pytest.mark.skipif(not TRAIN.exists(), reason="../shared/data/spider_syn not present")
def test_spider_pretrained_runs_every_stage_with_a_tiny_model_and_resumes(tmp_path):
    train = small_train_file(
        tmp_path, {"department_management": 8, "perpetrator": 8, "concert_singer": 0, "gymnast": 8}
    )
    run_dir = tmp_path / "run"
    cmd = [sys.executable, str(ROOT / "launch" / "run.py"), "--config", str(CONFIG), f"run_dir={run_dir}"]
    cmd += [f"data.root={SPIDER}", f"data.train_split={train}", *TINY, *FEW]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    metrics = {s: json.loads((run_dir / s / "metrics.json").read_text()) for s in STAGES}
    assert all(m["wall_seconds"] >= 0 for m in metrics.values())
    assert "stage wall time" in proc.stdout

    cold = metrics["cold_start"]
    assert (cold["train_questions"], cold["rl_questions"], cold["eval_questions"]) == (24 - 6, 6, 8)
    assert cold["eval_subset"]["of"] == 972 and sum(cold["eval_difficulty_counts"].values()) == 8
    assert set(cold["prompt_tokens"]) == {"train", "eval", "rl"} and "prompt_fit" not in cold
    rl_db = {json.loads(line)["db_id"] for line in (run_dir / "cold_start" / "rl.jsonl").read_text().splitlines()}
    assert rl_db == {"department_management", "perpetrator", "gymnast"}

    ev = metrics["evaluate"]
    assert ev["ex_mode"] == "spider" and ev["questions"] == 8
    assert set(ev["methods"]) >= {"sft_greedy", "rl_greedy", "best_of_n", "self_consistency"}
    assert set(ev["ex_by_difficulty"]["greedy_rl"]) <= {"easy", "medium", "hard", "extra"}
    assert ev["quadrants"] is not None and ev["curves"]["n"] == [1, 2] and ev["curves"]["prm@n"]
    assert len((run_dir / "evaluate" / "predict_spider.txt").read_text().splitlines()) == 8

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-4000:]
    assert again.stdout.count("already done") == 7
