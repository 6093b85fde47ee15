"""`model.lora.rank > 0` through the pipeline: every train stage trains adapters alone over the model it loads,
saves merged weights beside its adapters (peft format), and resumes."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

ROOT = Path(__file__).resolve().parents[2]
RANK = 4


def _weights(path: Path) -> dict:
    return load_file(str(path / "model.safetensors"))


def _bf16_rounded(w: np.ndarray) -> np.ndarray:
    import ml_dtypes

    return w.astype(ml_dtypes.bfloat16).astype(np.float32)


@pytest.mark.slow
@pytest.mark.parametrize("base_dtype", ["", "bfloat16"], ids=["base-as-loaded", "bf16-base"])
def test_lora_trains_adapters_alone_in_every_train_stage(tmp_path, base_dtype):
    """With ``model.lora.base_dtype=bfloat16`` each stage holds its loaded model in bf16 under fp32 adapters: its
    merged weights are then that rounded base plus a rank-r update (in fp32)."""
    run_dir = tmp_path / "lora"
    overrides = [f"model.lora.rank={RANK}", "model.lora.targets=q,v,gate", f"model.lora.base_dtype={base_dtype}"]
    cmd = [
        sys.executable,
        str(ROOT / "launch" / "run.py"),
        "--config",
        str(ROOT / "configs" / "smoke.py"),
        f"run_dir={run_dir}",
        *overrides,
        "stages=cold_start,sft,prm_labels,prm,rl",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for d in ("sft/policy", "prm/model", "rl/policy"):
        config = json.loads((run_dir / d / "adapter" / "adapter_config.json").read_text())
        assert config["r"] == RANK and set(config["target_modules"]) == {"q_proj", "v_proj", "gate_proj"}, d
        assert (run_dir / d / "adapter" / "adapter_model.safetensors").exists(), d
    sft, rl, prm = (_weights(run_dir / d) for d in ("sft/policy", "rl/policy", "prm/model"))
    assert set(rl) == set(sft) == set(prm)
    assert all(w.dtype == np.float32 for w in (*sft.values(), *rl.values()))  # merged in fp32 whatever the base
    if base_dtype:  # the SFT stage's frozen base was bf16: its untouched weights are exactly bf16 values
        untouched = [w for name, w in sft.items() if not any(t in name for t in ("q_proj", "v_proj", "gate_proj"))]
        assert untouched and all(np.array_equal(w, _bf16_rounded(w)) for w in untouched)
    for later in (rl, prm):  # both start from the SFT policy's merged weights (rounded to bf16 with a bf16 base)
        changed = []
        for name, w in sft.items():
            start = _bf16_rounded(w) if base_dtype else w
            delta = later[name].astype(np.float64) - start.astype(np.float64)
            if any(t in name for t in ("q_proj.weight", "v_proj.weight", "gate_proj.weight")):
                # the trained adapters moved a targeted projection by B A alpha / r: rank <= r
                assert np.linalg.matrix_rank(delta, tol=1e-6 * max(np.abs(w).max(), 1.0)) <= RANK, name
                changed.append(np.abs(delta).max() > 0)
            else:  # the frozen base: bit-identical
                np.testing.assert_array_equal(later[name], w, err_msg=name)
        assert any(changed)
    # GRPO's PRM was its adapters over the policy's frozen base: one base in the process
    assert json.loads((run_dir / "rl" / "metrics.json").read_text())["prm_shares_policy_base"] is True
    _check_prm_over_policy_base(run_dir, overrides)
    # Rerunning the same command resumes: every stage is skipped.
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-4000:]
    assert again.stdout.count("already done") == 5


def _check_prm_over_policy_base(run_dir: Path, overrides: list[str]) -> None:
    """The RL stage's PRM (adapters over the train state's base) holds no base weights of its own and scores as the
    merged PRM the prm stage saved."""
    import jax
    from flax import nnx

    from rewardsql_jax.config import apply_overrides, load_config
    from rewardsql_jax.models.adapters import base_state
    from rewardsql_jax.rewards.prm_scoring import PRMScorer
    from rewardsql_jax.stages.context import RunContext
    from rewardsql_jax.stages.rl.setup import load_prm_scorer, new_state, prm_over_policy_base

    cfg = apply_overrides(
        load_config(str(ROOT / "configs" / "smoke.py")),
        [f"run_dir={run_dir}", *overrides],
    )
    ctx = RunContext.create(cfg)
    state = new_state(ctx)
    shared = prm_over_policy_base(ctx, state)
    assert shared is not None
    scorer = shared.scorer_for(state)
    base = jax.tree.leaves(base_state(scorer.model))
    assert base and all(a is b for a, b in zip(base, jax.tree.leaves(state.frozen), strict=True))
    assert all(a.dtype == (cfg.model.lora.base_dtype or "float32") for a in base)
    assert not any(x is y for x in jax.tree.leaves(nnx.state(scorer.model)) for y in jax.tree.leaves(state.params))
    rows = [json.loads(line) for line in (run_dir / "prm_labels" / "labels.jsonl").read_text().splitlines()][:6]
    prompts, responses = [r["prompt"] for r in rows], [r["response"] for r in rows]
    merged = load_prm_scorer(ctx).score(prompts, responses)
    over_base = scorer.score(prompts, responses)
    for a, b in zip(merged, over_base, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    # ... and its adapters matter: the base alone (the policy's initial adapters, B = 0) scores otherwise
    base_only = PRMScorer(state.model(), ctx.tokenizer()).score(prompts, responses)
    assert max(abs(x - y) for a, b in zip(merged, base_only) for x, y in zip(a, b)) > 1e-4


@pytest.mark.slow
def test_prm_full_finetune_trains_every_weight_beside_a_lora_policy(tmp_path):
    """``prm.full_finetune=true`` with ``model.lora`` on: the policy trains adapters, the PRM every weight (no
    adapters saved), and GRPO then scores with that whole PRM instead of adapters over the policy's base."""
    run_dir = tmp_path / "full_prm"
    cmd = [
        sys.executable,
        str(ROOT / "launch" / "run.py"),
        "--config",
        str(ROOT / "configs" / "smoke.py"),
        f"run_dir={run_dir}",
        f"model.lora.rank={RANK}",
        "model.lora.targets=q,v",
        "prm.full_finetune=true",
        "stages=cold_start,sft,prm_labels,prm,rl",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (run_dir / "sft" / "policy" / "adapter" / "adapter_config.json").exists()
    assert not (run_dir / "prm" / "model" / "adapter").exists()
    assert json.loads((run_dir / "prm" / "metrics.json").read_text())["trained"] == "every weight"
    sft, prm = _weights(run_dir / "sft" / "policy"), _weights(run_dir / "prm" / "model")
    moved = {name for name, w in sft.items() if not np.array_equal(prm[name], w)}
    assert any("k_proj" in n for n in moved) and any("down_proj" in n for n in moved)  # not LoRA targets
    q = next(n for n in moved if n.endswith("q_proj.weight"))
    delta = prm[q].astype(np.float64) - sft[q].astype(np.float64)
    assert np.linalg.matrix_rank(delta, tol=1e-6 * max(np.abs(sft[q]).max(), 1.0)) > RANK  # a full-rank update
    assert json.loads((run_dir / "rl" / "metrics.json").read_text())["prm_shares_policy_base"] is False
