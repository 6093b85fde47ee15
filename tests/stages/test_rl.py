"""The RL stage end to end on a tiny generated benchmark: every algorithm trains from the SFT policy, writes a
loadable rl/policy and sane metrics; a stopped run resumes from its checkpoint to the same final params."""

import dataclasses
import json
import shutil

import jax
import numpy as np
import pytest
from flax import nnx
from tiny_shapes import tiny_model

from rewardsql_jax.stages.context import RunContext
from rewardsql_jax.stages.policy import load_model
from rewardsql_jax.stages.rl import STOP_ENV, RLStopped, run_rl
from rewardsql_jax.stages.run_config import DataConfig, RLConfig, RunConfig, SFTConfig
from rewardsql_jax.stages.runner import run_pipeline

pytestmark = pytest.mark.slow  # ~1-3 min on 2 CPU cores: compiles a sampler and a train step per run

RL = RLConfig(
    algorithm="reinforce_pp",
    steps=2,
    prompts_per_step=2,
    samples_per_prompt=2,
    max_new_tokens=16,
    lr=1e-2,
    kl_beta=0.01,
)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """cold_start + a 10-step SFT of a tiny Qwen2 (enough for SQL-like text whose clause rewards differ), shared
    by the tests (each copies it)."""
    root = tmp_path_factory.mktemp("rl_base")
    cfg = RunConfig(
        name="rl_test",
        run_dir=str(root / "run"),
        workers=1,
        stages=("cold_start", "sft"),
        data=DataConfig(n_train_dbs=1, n_test_dbs=1, questions_per_db=6, schema_examples=0, max_train=4, max_eval=2),
        model=tiny_model(vocab_size=600, max_len=1024),
        sft=SFTConfig(steps=10, batch_size=4, lr=2e-2, warmup_steps=1),
        rl=RL,
    )
    run_pipeline(cfg, log=lambda *_: None)
    return cfg


def _copy(base, tmp_path, name="run", with_prm=False):
    dst = tmp_path / name
    shutil.copytree(base.run_dir, dst)
    if with_prm:  # a PRM for the plumbing: the SFT backbone, scoring steps at the " и" tag
        shutil.copytree(dst / "sft" / "policy", dst / "prm" / "model")
    return dst


def _run(base, run_dir, **rl):
    cfg = dataclasses.replace(base, run_dir=str(run_dir), stages=("rl",), rl=dataclasses.replace(RL, **rl))
    ctx = RunContext.create(cfg)
    try:
        return run_rl(ctx)
    finally:
        ctx.close()


def _params(path):
    return [np.asarray(x) for x in jax.tree.leaves(nnx.state(load_model(path), nnx.Param))]


def _changed(run_dir):
    return any(
        not np.array_equal(a, b)
        for a, b in zip(_params(run_dir / "rl" / "policy"), _params(run_dir / "sft" / "policy"))
    )


def _sane_online(m, steps):
    assert m["steps"] == steps and len(m["reward_curve"]) == steps and len(m["or_rate_curve"]) == steps
    assert all(0.0 <= r <= 1.0 for _, r in m["or_rate_curve"]) and 0.0 <= m["or_rate_last"] <= 1.0
    assert np.isfinite(m["final_loss"]) and m["nonfinite_steps"] == 0
    assert m["rollout_tokens"] > 0 and m["rollout_tokens_per_s"] > 0 and m["seconds"] > 0
    assert 0.0 <= m["device_idle_fraction"] < 1.0


def test_reinforce_pp_trains_and_a_stopped_run_resumes_to_the_same_params(base, tmp_path, monkeypatch):
    full = _copy(base, tmp_path, "full")
    m = _run(base, full)
    _sane_online(m, 2)
    assert all(-1.5 <= r <= 1.5 for _, r in m["reward_curve"])  # mean clause reward per completion
    assert _changed(full)
    assert json.loads((full / "rl" / "metrics.json").read_text())["algorithm"] == "reinforce_pp"

    part = _copy(base, tmp_path, "part")
    monkeypatch.setenv(STOP_ENV, "1")
    with pytest.raises(RLStopped, match="rerun to resume"):
        _run(base, part)
    assert not (part / "rl" / "metrics.json").exists()
    metas = list((part / "rl" / "checkpoint_meta").glob("*.json"))
    assert len(metas) == 1 and json.loads(metas[0].read_text())["next_step"] == 1
    monkeypatch.delenv(STOP_ENV)
    resumed = _run(base, part)
    assert resumed["resumed_from_step"] == 1 and resumed["steps"] == 2
    assert resumed["reward_curve"] == m["reward_curve"]
    for a, b in zip(_params(part / "rl" / "policy"), _params(full / "rl" / "policy")):
        np.testing.assert_array_equal(a, b)


def test_grpo_with_prm_step_advantages(base, tmp_path):
    run = _copy(base, tmp_path, with_prm=True)
    m = _run(base, run, algorithm="grpo", steps=1)
    _sane_online(m, 1)
    assert all(0.0 <= r <= 2.0 for _, r in m["reward_curve"])  # R = PR + OR
    assert _changed(run)  # PR differs between samples, so the step advantages are not all zero
    assert load_model(run / "rl" / "policy").config.vocab_size == load_model(run / "sft" / "policy").config.vocab_size


def test_released_grpo_with_rm_coef_0_loads_no_prm_and_trains_as_with_it(base, tmp_path, monkeypatch):
    """rl.algorithm_options.rm_coef=0 with the released advantages (the released recipe): the stage never loads (nor runs) a PRM,
    and trains to the same parameters as the same run that scores its rollouts with one (weighted 0)."""
    from rewardsql_jax.rl import rollouts
    from rewardsql_jax.rl.algorithms.grpo import GRPO
    from rewardsql_jax.stages.rl import setup as rl_setup

    # The tiny SFT policy is rarely right, and a group whose outcomes are all equal has zero advantages and moves
    # nothing; one right and one wrong answer per group makes both runs train.
    real_outcomes = rollouts.execution_outcomes

    def one_right_per_group(*args, **kwargs):
        out = real_outcomes(*args, **kwargs)
        return dataclasses.replace(out, rewards=(np.arange(len(out.rewards)) % 2 == 0).astype(out.rewards.dtype))

    monkeypatch.setattr(rollouts, "execution_outcomes", one_right_per_group)
    released = dict(algorithm="grpo", algorithm_options=dict(advantage_variant="released", rm_coef=0.0), steps=1)
    with_prm = _copy(base, tmp_path, "with_prm", with_prm=True)
    with monkeypatch.context() as patch:  # the old behaviour: the PRM loaded and scoring every step
        patch.setattr(GRPO, "uses_prm", lambda self, rl: True)
        _run(base, with_prm, **released)

    def no_prm(ctx):
        raise AssertionError("the PRM was loaded")

    monkeypatch.setattr(rl_setup, "load_prm_scorer", no_prm)
    without = _copy(base, tmp_path, "without")  # no prm/model on disk either
    m = _run(base, without, **released)
    _sane_online(m, 1)
    assert m["uses_prm"] is False
    assert _changed(without)
    for a, b in zip(_params(without / "rl" / "policy"), _params(with_prm / "rl" / "policy")):
        np.testing.assert_array_equal(a, b)


def test_grpo_outcome_moves_params_only_when_outcomes_differ_in_a_group(base, tmp_path):
    run = _copy(base, tmp_path)
    m = _run(base, run, algorithm="grpo_outcome", steps=1)
    _sane_online(m, 1)
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    step = [r for r in log if r.get("stage") == "rl" and "grad_norm" in r][-1]
    if step["or_rate"] in (0.0, 1.0):
        # Every group uniform: zero advantages; only the k3 KL term remains, whose gradient vanishes at
        # policy == reference up to the fp32 difference of two forward passes (Adam would amplify that into a
        # parameter change, so the gradient norm is what is checked).
        assert step["loss"] == pytest.approx(0.0, abs=1e-7) and step["grad_norm"] < 1e-5
    else:
        assert step["grad_norm"] > 1e-4 and _changed(run)


def test_offline_dpo_and_rs(base, tmp_path):
    dpo = _copy(base, tmp_path, "dpo", with_prm=True)
    m = _run(base, dpo, algorithm="dpo", steps=1)
    cands = [json.loads(line) for line in (dpo / "rl" / "candidates.jsonl").read_text().splitlines()]
    assert len(cands) == 4 and all(0.0 <= c["pr"] <= 1.0 and c["reward"] == c["pr"] + c["or"] for c in cands)
    assert m["candidates"] == 4 and m["pairs"] >= 1 and m["steps"] == 1 and np.isfinite(m["final_loss"])
    assert m["final_loss"] == pytest.approx(np.log(2.0), abs=1e-4)  # policy == reference at the first step
    assert _changed(dpo)
    # A rerun reuses the saved candidates and the last checkpoint: nothing is sampled or trained again.
    stamp = (dpo / "rl" / "candidates.jsonl").stat().st_mtime_ns
    again = _run(base, dpo, algorithm="dpo", steps=1)
    assert again["resumed_from_step"] == 1 and again["pairs"] == m["pairs"]
    assert (dpo / "rl" / "candidates.jsonl").stat().st_mtime_ns == stamp
    rs = _copy(base, tmp_path, "rs", with_prm=True)
    m = _run(base, rs, algorithm="rs", steps=1, algorithm_options={"threshold": -1.0})
    assert m["kept"] == 4 and m["kept_fraction"] == 1.0 and _changed(rs)


def test_clear_errors(base, tmp_path):
    run = _copy(base, tmp_path)
    with pytest.raises(FileNotFoundError, match="run the prm stage"):
        _run(base, run, algorithm="grpo")
    with pytest.raises(ValueError, match="samples_per_prompt >= 2"):
        _run(base, run, algorithm="grpo_outcome", samples_per_prompt=1)
    with pytest.raises(ValueError, match="entropy_coef"):
        _run(base, run, algorithm="reinforce_pp", entropy_coef=0.001)
    with pytest.raises(ValueError, match="temperature > 0"):
        _run(base, run, temperature=0.0)
    three = dataclasses.replace(base, mesh=dataclasses.replace(base.mesh, micro_batches=3))
    with pytest.raises(ValueError, match="micro_batches=3 must divide rl.prompts_per_step=2"):
        _run(three, run)


def test_mini_batches_and_epochs_take_several_optimizer_steps_per_rollout_batch(base, tmp_path):
    """rl.mini_batches=2 x rl.epochs=2: four optimizer steps per iteration on the same rollouts; the first is
    on-policy (ratio 1), the later ones are not, so the logged (averaged) ratio spread is > 0, where one step
    on the whole batch logs ratio 1 exactly as sampled."""
    one = _copy(base, tmp_path, "one")
    four = _copy(base, tmp_path, "four")
    _sane_online(_run(base, one), 2)  # reinforce_pp: its clause rewards differ even for this tiny policy
    _sane_online(_run(base, four, mini_batches=2, epochs=2), 2)

    def ratio_std(run):
        records = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
        return [r["loss_metrics"]["ratio/std"] for r in records if r.get("stage") == "rl" and "loss_metrics" in r]

    assert max(ratio_std(one)) < 1e-3
    assert min(ratio_std(four)) > 1e-3
    assert _changed(four)
    with pytest.raises(ValueError, match="mini_batches=3 must divide rl.prompts_per_step=2"):
        RLConfig(prompts_per_step=2, mini_batches=3)


def test_filter_groups_draws_until_groups_have_reward_spread(base, tmp_path):
    """DAPO dynamic sampling through the stage: every step logs its draws; the batch keeps its shape (the step
    compiles once: the run finishes), the informative groups are counted from the executed rewards."""
    run = _copy(base, tmp_path, "dapo")
    m = _run(base, run, algorithm="grpo_outcome", filter_groups=True, filter_groups_max_draws=3, kl_beta=0.0)
    _sane_online(m, 2)
    records = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    steps = [r for r in records if r.get("stage") == "rl" and "draws" in r]
    assert len(steps) == 2
    for r in steps:
        assert 1 <= r["draws"] <= 3 and 0 <= r["informative_groups"] <= RL.prompts_per_step
        assert r["informative_groups"] >= r["informative_groups_first_draw"]
        # a step stops drawing once the informative groups fill the batch, and draws again otherwise
        assert r["draws"] == 3 or r["informative_groups"] == RL.prompts_per_step
