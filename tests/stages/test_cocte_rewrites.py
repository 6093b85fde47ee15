"""Cold-start CoCTE rewrites: extraction, verification + dedup against a real SQLite DB, and the cold_start
stage with model rewrites (scripted, and sampled from a tiny random Qwen2 saved as an HF directory)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from rewardsql_jax.config import apply_overrides, load_config
from rewardsql_jax.data.prompts import COCTE_REWRITE_ANSWER, cocte_rewrite_prompt
from rewardsql_jax.sql import ExecutorPool, split_cocte
from rewardsql_jax.sql.to_cocte import to_cocte
from rewardsql_jax.stages import cold_start as cold_start_stage
from rewardsql_jax.stages.cocte_rewrites import cocte_layout, extract_cocte, select_coctes
from rewardsql_jax.stages.cold_start import read_jsonl, run_cold_start
from rewardsql_jax.stages.context import RunContext
from rewardsql_jax.stages.policy import new_or_pretrained_policy, save_model
from rewardsql_jax.stages.run_config import DataConfig
from rewardsql_jax.stages.sft import run_sft

GOLD = "SELECT name FROM team WHERE founded > 1980 ORDER BY name"
GOOD = (
    "WITH recent AS (\n  SELECT name\n  FROM team\n  WHERE founded > 1980\n)\n\nSELECT name FROM recent ORDER BY name"
)
GOOD_NEAR_DUP = (
    "WITH new_teams AS (\n  SELECT name\n  FROM team\n  WHERE founded > 1981\n)\n\n"
    "SELECT name FROM new_teams ORDER BY name"
)  # same tree, other names / constant
GOOD_OTHER = (
    "WITH t AS (\n  SELECT name, founded\n  FROM team\n),\n\nr AS (\n  SELECT name\n  FROM t\n"
    "  WHERE founded > 1980\n)\n\nSELECT r.name FROM r JOIN team ON team.name = r.name ORDER BY r.name"
)
WRONG = "WITH old AS (\n  SELECT name\n  FROM team\n  WHERE founded < 1980\n)\n\nSELECT name FROM old"
BROKEN = "WITH x AS (\n  SELECT name\n  FROM no_such_table\n)\n\nSELECT name FROM x"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("cocte_db") / "teams.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE team (id INTEGER PRIMARY KEY, name TEXT, founded INTEGER);
        INSERT INTO team VALUES (1, 'Lions', 1990), (2, 'Tigers', 1985), (3, 'Bears', 1975), (4, 'Wolves', 2001);
    """)
    conn.commit()
    conn.close()
    return str(path)


@pytest.fixture(scope="module")
def pool():
    p = ExecutorPool(workers=1)
    yield p
    p.close()


def test_extract_cocte_reads_completions_into_the_policy_layout():
    one_line = "WITH a AS (SELECT name FROM team), b AS (SELECT name FROM a) SELECT name FROM b"
    assert extract_cocte(one_line) == (
        "WITH a AS (SELECT name FROM team),\n\nb AS (SELECT name FROM a)\n\nSELECT name FROM b"
    )
    assert extract_cocte(GOOD) == GOOD  # a clean CoCTE is taken whole
    assert extract_cocte(f"Here it is:\n```sql\n{GOOD};\n```\nThis keeps the result.") == GOOD
    assert extract_cocte(f"{GOOD};\n\nExplanation: the CTE filters recent teams.") == GOOD
    assert extract_cocte(f"{GOOD}\n\nThe CTE filters recent teams.") == GOOD  # chatter blocks dropped
    assert extract_cocte(f"{GOOD}\n\n【Question】\nnext one") == GOOD
    spaced = "WITH a AS (\n  SELECT name\n\n  FROM team\n)\n\n\nSELECT name FROM a"
    assert extract_cocte(spaced) == "WITH a AS (\n  SELECT name\n  FROM team\n)\n\nSELECT name FROM a"
    for bad in ("SELECT name FROM team", "garbage", "", "WITH a AS (SELECT", None):
        assert extract_cocte(bad) is None
    with pytest.raises(ValueError, match="CTE"):
        cocte_layout("SELECT 1")
    rule = to_cocte("SELECT T1.name FROM team AS T1 WHERE T1.founded > 1980 GROUP BY T1.name HAVING count(*) > 0")
    assert extract_cocte(rule) == rule and len(split_cocte(rule).steps) >= 1


def test_select_coctes_verifies_by_execution_and_dedups(db, pool):
    cands = [GOOD, WRONG, BROKEN, "no sql here", GOOD_NEAR_DUP, GOOD_OTHER, GOOD]
    full, half = select_coctes([(db, GOLD, cands)], pool, keep=1.0)[0], select_coctes([(db, GOLD, cands)], pool, 0.5)[0]
    assert full.gold_ok and full.status == [
        "verified",
        "wrong_result",
        "error",
        "no_cocte",
        "verified",
        "verified",
        "verified",
    ]
    assert full.kept == [GOOD, GOOD_NEAR_DUP, GOOD_OTHER]  # the exact duplicate is gone
    # keep half of the 3 distinct verified ones (2): the near-duplicate of GOOD is the most redundant
    assert half.status == full.status and half.kept == [GOOD, GOOD_OTHER]
    # several questions in one call; a question whose gold fails verifies nothing; no candidates is fine
    many = select_coctes([(db, GOLD, [WRONG]), (db, "SELECT nope FROM nowhere", [GOOD]), (db, GOLD, [])], pool)
    assert [s.kept for s in many] == [[], [], []] and many[0].status == ["wrong_result"]
    assert not many[1].gold_ok and many[1].status == ["wrong_result"] and many[2].status == []


def test_rewrite_prompt_holds_the_task_and_ends_at_the_answer():
    p = cocte_rewrite_prompt("# Table: team\n[(name:TEXT)]", "Recent teams?", GOLD, "recent: after 1980")
    assert p.endswith(COCTE_REWRITE_ANSWER) and GOLD in p and "# Table: team" in p
    assert "Recent teams? recent: after 1980" in p and p.count(COCTE_REWRITE_ANSWER) == 2  # example + task
    with pytest.raises(ValueError, match="gold_sql"):
        cocte_rewrite_prompt("# Table: team", "q", " ")


def test_config_validates_the_rewriter_options():
    assert DataConfig().cocte_rewriter == "rule"
    with pytest.raises(ValueError, match="cocte_rewriter"):
        DataConfig(cocte_rewriter="llm", cocte_rewriter_path="x")
    with pytest.raises(ValueError, match="cocte_rewrite_samples"):
        DataConfig(cocte_rewriter="both", cocte_rewriter_path="x", cocte_rewrite_samples=0)
    with pytest.raises(ValueError, match="cocte_dedup_keep"):
        DataConfig(cocte_dedup_keep=0.0)
    with pytest.raises(ValueError, match="temperature"):
        DataConfig(cocte_rewrite_temperature=-1.0)


# ---------------------------------------------------------------- the stage
SMOKE = "configs/smoke.py"


def _context(run_dir, *overrides):
    cfg = apply_overrides(
        load_config(SMOKE), [f"run_dir={run_dir}", "workers=1", "data.max_train=5", "data.max_eval=2", *overrides]
    )
    return RunContext.create(cfg)


@pytest.fixture(scope="module")
def rule_run(tmp_path_factory):
    ctx = _context(tmp_path_factory.mktemp("cocte_rule"), "model.max_len=4096")  # the rewriter below fits its prompts
    metrics = run_cold_start(ctx)
    yield ctx, metrics
    ctx.close()


def _check_consistent(m, records):
    assert (
        m["cocte_model_sampled"]
        >= m["cocte_model_parsed"]
        >= m["cocte_model_executable"]
        >= m["cocte_model_verified"]
        >= 0
    )
    assert m["cocte_kept_after_dedup"] >= m["cocte_verified"] == sum(r["targets"] != [r["gold_sql"]] for r in records)
    assert m["sft_targets"] == sum(len(r["targets"]) for r in records)
    for r in records:
        assert r["targets"][0] == r["target"] and len(set(r["targets"])) == len(r["targets"])


def test_rule_rewriter_keeps_one_target_per_question(rule_run):
    ctx, m = rule_run
    records = read_jsonl(ctx.run_dir / "cold_start" / "train.jsonl")
    assert len(records) == m["train_questions"] == 5 and m["cocte_model_sampled"] == 0
    assert (
        m["cocte_verified"]
        == m["cocte_rule_verified"]
        == m["cocte_kept_after_dedup"]
        == m["sft_targets"] - (5 - m["cocte_verified"])
        > 0
    )
    _check_consistent(m, records)


def test_scripted_model_rewrites_are_verified_and_deduped(rule_run, tmp_path, monkeypatch):
    _, rule_m = rule_run
    golds = {}

    def scripted(ctx, examples, schema_of):
        assert all(schema_of(ex).strip() for ex in examples)
        out = []
        for ex in examples:
            rule = to_cocte(ex.gold_sql)
            golds[ex.gold_sql] = rule
            out.append(
                [
                    rule.replace("SELECT", "select", 1),  # near-duplicate of the rule rewrite
                    "WITH a AS (\n  SELECT 'nope' AS x\n)\n\nSELECT x FROM a",  # executes, wrong result
                    "WITH a AS (\n  SELECT * FROM no_such_table\n)\n\nSELECT * FROM a",  # error
                    "I cannot rewrite this.",
                ]
            )  # no CoCTE
        return out, 0

    monkeypatch.setattr(cold_start_stage, "sample_rewrites", scripted)
    ctx = _context(
        tmp_path,
        "data.cocte_rewriter=both",
        "data.cocte_rewriter_path=/unused",
        "data.cocte_dedup_keep=1.0",
        "sft.steps=2",
    )
    try:
        m = run_cold_start(ctx)
        sft = run_sft(ctx)
    finally:
        ctx.close()
    assert sft["examples"] + sft["dropped_too_long"] == m["sft_targets"]  # one SFT example per kept CoCTE
    records = read_jsonl(tmp_path / "cold_start" / "train.jsonl")
    n, v = len(records), rule_m["cocte_rule_verified"]
    assert m["cocte_rule_verified"] == v and m["cocte_model_sampled"] == 4 * n
    assert m["cocte_model_parsed"] == 3 * n and m["cocte_model_executable"] == 2 * n
    assert m["cocte_model_verified"] == v  # the near-duplicate verifies exactly when the rule does
    assert m["cocte_kept_after_dedup"] == 2 * v and m["sft_targets"] == 2 * v + (n - v)
    for r in records:
        if len(r["targets"]) == 2:
            assert r["targets"][0] == golds[r["gold_sql"]] and r["targets"][1].startswith("WITH")
    _check_consistent(m, records)


def test_model_rewriter_samples_from_a_tiny_random_qwen2(rule_run, tmp_path):
    base, _ = rule_run
    rewriter = save_model(base, new_or_pretrained_policy(base), tmp_path / "rewriter")  # HF dir + tokenizer
    assert (rewriter / "config.json").exists()
    for mode in ("model", "both"):
        ctx = _context(
            tmp_path / mode,
            f"data.cocte_rewriter={mode}",
            f"data.cocte_rewriter_path={rewriter}",
            "data.cocte_rewrite_samples=2",
            "data.cocte_rewrite_max_new_tokens=12",
        )
        try:
            m = run_cold_start(ctx)
        finally:
            ctx.close()
        records = read_jsonl(tmp_path / mode / "cold_start" / "train.jsonl")
        assert m["cocte_rewriter"] == mode and len(records) == 5
        assert m["cocte_model_prompts_too_long"] == 0 and m["cocte_model_sampled"] == 2 * 5
        assert (m["cocte_rule_verified"] == 0) == (mode == "model")
        _check_consistent(m, records)
        saved = json.loads((tmp_path / mode / "cold_start" / "metrics.json").read_text())
        assert saved["cocte_model_sampled"] == m["cocte_model_sampled"]


@pytest.mark.parametrize("path,error", [("", ValueError), ("missing", FileNotFoundError)])
def test_model_rewriter_needs_a_checkpoint(tmp_path, path, error):
    path = str(tmp_path / path) if path else ""
    ctx = _context(tmp_path, "data.cocte_rewriter=model", f"data.cocte_rewriter_path={path}")
    try:
        with pytest.raises(error, match="cocte_rewriter_path"):
            run_cold_start(ctx)
    finally:
        ctx.close()
