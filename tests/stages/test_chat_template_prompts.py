"""``data.chat_template=true``: cold_start wraps every prompt (SFT, RL, eval) in the policy tokenizer's chat template,
so every later stage (which reads the records' prompts) sees the same format; the raw M-Schema prompt otherwise."""

import dataclasses
import json

import pytest

from rewardsql_jax.data.tokenizer import load_tokenizer
from rewardsql_jax.models.wheel_weights import wheel_file
from rewardsql_jax.stages.run_config import DataConfig, ModelConfigSection, RunConfig
from rewardsql_jax.stages.runner import run_pipeline

WHEEL = "wheel:smollm2-135m-instruct"


def _config(tmp_path, chat_template: bool) -> RunConfig:
    return RunConfig(
        name="chat_template_test",
        run_dir=str(tmp_path / f"run_{chat_template}"),
        workers=1,
        stages=("cold_start",),
        data=DataConfig(
            n_train_dbs=2,
            n_test_dbs=1,
            questions_per_db=4,
            schema_examples=0,
            max_eval=2,
            rl_questions_per_db=2,
            chat_template=chat_template,
        ),
        model=ModelConfigSection(path=WHEEL, max_len=1024),
    )


def _prompts(run_dir) -> list[str]:
    out = []
    for name in ("train.jsonl", "eval.jsonl", "rl.jsonl"):
        out += [json.loads(line)["prompt"] for line in (run_dir / "cold_start" / name).read_text().splitlines()]
    return out


def test_cold_start_wraps_every_prompt_in_the_chat_template(tmp_path):
    try:
        wheel_file(WHEEL)
    except FileNotFoundError as e:
        pytest.skip(str(e))
    raw_cfg, chat_cfg = _config(tmp_path, False), _config(tmp_path, True)
    run_pipeline(raw_cfg, log=lambda *_: None)
    run_pipeline(chat_cfg, log=lambda *_: None)
    raw, chat = _prompts(tmp_path / "run_False"), _prompts(tmp_path / "run_True")
    assert len(raw) == len(chat) == 2 * 4 + 2 + 2 * 2
    tok = load_tokenizer(WHEEL)
    for r, c in zip(raw, chat):
        assert c == tok.apply_chat_template(
            [{"role": "user", "content": r}], tokenize=False, add_generation_prompt=True
        )
        assert c != r and c.endswith("<|im_start|>assistant\n")


def test_chat_template_needs_a_pretrained_tokenizer(tmp_path):
    with pytest.raises(ValueError, match=r"data\.chat_template=true needs a pretrained tokenizer"):
        dataclasses.replace(_config(tmp_path, True), model=ModelConfigSection(vocab_size=500, hidden_size=32))
