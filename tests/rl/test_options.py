"""Algorithm options: each algorithm's own settings in ``rl.algorithm_options``, read as its ``options_type``; the
former flat ``rl`` keys fail naming the new one; command-line entries reach the algorithm."""

import dataclasses
from pathlib import Path

import pytest

from rewardsql_jax.config import apply_overrides, load_config
from rewardsql_jax.rl import get_algorithm, moved_setting, policy_loss
from rewardsql_jax.stages.run_config import RLConfig, RunConfig

SMOKE = Path(__file__).resolve().parents[2] / "configs" / "smoke.py"
MOVED = [  # (former rl field, algorithm, option, a value)
    ("advantage_variant", "grpo", "advantage_variant", "released"),
    ("rm_coef", "grpo", "rm_coef", "0"),
    ("dpo_beta", "dpo", "beta", "0.3"),
    ("rs_threshold", "rs", "threshold", "1.0"),
]


@pytest.mark.parametrize("old,algorithm,option,value", MOVED)
def test_a_moved_key_fails_naming_the_new_key(old, algorithm, option, value):
    says = rf"rl\.{old} moved: use rl\.algorithm_options\.{option}, an option of rl\.algorithm='{algorithm}'"
    with pytest.raises(ValueError, match=rf"^override rl\.{old}={value}: {says}"):
        apply_overrides(load_config(SMOKE), [f"rl.algorithm={algorithm}", f"rl.{old}={value}"])
    with pytest.raises(ValueError, match=rf"^{says}"):
        RLConfig(algorithm=algorithm, **{old: value})  # a config file's RLConfig(...)
    with pytest.raises(ValueError, match=rf"^{says}"):
        dataclasses.replace(RLConfig(), **{old: value})
    assert moved_setting("steps") is None


def test_an_option_the_algorithm_does_not_have_fails_listing_its_options():
    cfg = load_config(SMOKE)
    with pytest.raises(
        ValueError,
        match=r"override rl\.algorithm_options\.beta=0\.3: rl\.algorithm_options \['beta'\] are not options of "
        r"rl\.algorithm='grpo'; its options are \['advantage_variant', 'rm_coef'\] \(beta: an option of "
        r"rl\.algorithm 'dpo'\)",
    ):
        apply_overrides(cfg, ["rl.algorithm_options.beta=0.3"])
    with pytest.raises(
        ValueError, match=r"rl\.algorithm='grpo_outcome' takes no rl\.algorithm_options, got \['rm_coef'\]"
    ):
        apply_overrides(cfg, ["rl.algorithm=grpo_outcome", "rl.algorithm_options.rm_coef=0"])
    with pytest.raises(ValueError, match=r"rl\.algorithm_options\.rm_coef='high': expected a float"):
        apply_overrides(cfg, ["rl.algorithm_options.rm_coef=high"])
    with pytest.raises(ValueError, match=r"rl\.algorithm_options\.beta must be positive"):
        apply_overrides(cfg, ["rl.algorithm=dpo", "rl.algorithm_options.beta=0"])


def test_command_line_options_reach_the_algorithm():
    cfg = load_config(SMOKE)
    grpo = get_algorithm("grpo")
    assert grpo.uses_prm(cfg.rl) and grpo.options(cfg.rl) == grpo.options_type()  # defaults: paper, 1.0
    released = apply_overrides(
        cfg, ["rl.algorithm_options.advantage_variant=released", "rl.algorithm_options.rm_coef=0"]
    )
    opts = grpo.options(released.rl)
    assert (opts.advantage_variant, opts.rm_coef) == ("released", 0.0) and isinstance(opts.rm_coef, float)
    assert not grpo.uses_prm(released.rl)  # the released recipe: no PRM
    dpo = apply_overrides(cfg, ["rl.algorithm=dpo", "rl.algorithm_options.beta=0.3"])
    assert policy_loss(dpo.rl) == ("dpo", {"beta": 0.3, "temperature": 1.0})
    rs = apply_overrides(cfg, ["rl.algorithm=rs", "rl.algorithm_options.threshold=-1"])
    candidates = [{"reward": r} for r in (-0.5, 0.5, 1.6)]
    assert get_algorithm("rs").select(candidates, rs.rl) == candidates
    assert get_algorithm("rs").select(candidates, RLConfig(algorithm="rs")) == candidates[2:]  # default 1.5


def test_options_are_checked_with_the_rl_stage_like_every_cross_field_check():
    bad = RLConfig(algorithm_options={"rm_coef": -1.0})
    with pytest.raises(ValueError, match=r"rl\.algorithm_options\.rm_coef must be >= 0"):
        RunConfig(rl=bad)
    RunConfig(rl=bad, stages=("cold_start", "sft"))  # no rl stage: not checked (the RL stage checks again)
