import pytest

from rewardsql_jax.conductor.config import ConductorData, ConductorRLConfig, ConductorRunConfig
from rewardsql_jax.config import apply_overrides, load_config


def test_default_and_smoke_configs_load_and_override():
    cfg = load_config("configs/conductor_default.py")
    assert isinstance(cfg, ConductorRunConfig) and cfg.pipeline == "conductor"
    assert cfg.policy.top_k == 3 and cfg.policy.alpha == 2.0
    assert cfg.fixed_workflow == ("generate_sql", "refine_sql", "terminate")
    cfg = apply_overrides(cfg, ["policy.sft_steps=7", "rl.reward.lam=0.5", "explore.num_simulations=3"])
    assert (cfg.policy.sft_steps, cfg.rl.reward.lam, cfg.explore.num_simulations) == (7, 0.5, 3)
    assert load_config("configs/conductor_smoke.py").data.max_eval_questions == 4


def test_bad_values_give_one_clear_message():
    with pytest.raises(ValueError, match="unknown actions"):
        ConductorRunConfig(fixed_workflow=("generate_sql", "teleport"))
    with pytest.raises(ValueError, match="samples_per_prompt must be >= 2"):
        ConductorRLConfig(samples_per_prompt=1)
    with pytest.raises(ValueError, match="eval_on"):
        ConductorData(eval_on="dev")
    with pytest.raises(
        ValueError, match="rl.loss_options.agg='mean'; choose one of grpo, bnpo, dr_grpo, dapo, token_mean"
    ):
        ConductorRLConfig(loss_options={"agg": "mean"})
    with pytest.raises(ValueError, match="eval_repeats"):
        ConductorData(eval_repeats=0)
    with pytest.raises(ValueError, match="rl.credit='token'; choose one of episode, step"):
        ConductorRLConfig(credit="token")
    with pytest.raises(ValueError, match="reward lam"):
        apply_overrides(load_config("configs/conductor_default.py"), ["rl.reward.lam=2"])


@pytest.mark.parametrize("eval_on", ["heldout_questions", "test_dbs"])
def test_the_default_evaluates_on_at_least_200_questions(tmp_path, eval_on):
    """One question is at most 0.5 EX points on either split of configs/conductor_default.py."""
    from rewardsql_jax.conductor.data import evaluation_split
    from rewardsql_jax.data.builtin import make_builtin_benchmark

    d = load_config("configs/conductor_default.py").data
    train, test = make_builtin_benchmark(
        tmp_path, seed=0, n_train_dbs=d.n_train_dbs, n_test_dbs=d.n_test_dbs, questions_per_db=d.questions_per_db
    )
    tr, ev = evaluation_split(
        train.examples,
        test.examples,
        eval_on=eval_on,
        heldout_every=d.heldout_every,
        max_eval_questions=d.max_eval_questions,
        value_typo_rate=d.value_typo_rate,
        seed=0,
    )
    assert len(ev) >= 200 and 100 / len(ev) <= 0.5 and len({e.question_id for e in ev}) == len(ev)
    assert len(tr) >= 480  # no fewer training questions than before the evaluation set grew


def test_an_old_rl_name_fails_naming_the_pipeline_name():
    """rl.group_size is rl.samples_per_prompt, as in the pipeline's RLConfig: the old name, as an override or a
    keyword, stops with the new key named (not a list of every known field)."""
    cfg = load_config("configs/conductor_smoke.py")
    with pytest.raises(ValueError, match=r"override rl.group_size=3: rl.group_size was renamed rl.samples_per_prompt"):
        apply_overrides(cfg, ["rl.group_size=3"])
    with pytest.raises(ValueError, match=r"renamed rl.samples_per_prompt .*ConductorRLConfig\(samples_per_prompt="):
        ConductorRLConfig(group_size=3)
    assert apply_overrides(cfg, ["rl.samples_per_prompt=3"]).rl.samples_per_prompt == 3
