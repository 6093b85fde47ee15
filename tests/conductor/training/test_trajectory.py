from rewardsql_jax.conductor.actions.episode import run_workflow
from rewardsql_jax.conductor.actions.state import State
from rewardsql_jax.conductor.search.reasoning import template_reasoning
from rewardsql_jax.conductor.training.trajectory import results_mask

from _conductor_helpers import scripted_env


def test_mask_covers_exactly_the_results_spans_and_prompt(tokenizer, music_db):
    env = scripted_env(
        {
            "generate": "SELECT COUNT(*) FROM singer WHERE country = 'Brasil'",
            "generate_with_values": "SELECT COUNT(*) FROM singer WHERE country = 'Brazil'",
        }
    )
    s = run_workflow(
        State(question="How many singers are from Brasil?", db_path=music_db, env=env),
        ["generate_sql", "retrieve_values", "generate_sql", "terminate"],
        reasoner=template_reasoning,
    )
    ids, mask = results_mask(tokenizer, s)
    assert len(ids) == len(mask)
    masked_text = tokenizer.decode([i for i, m in zip(ids, mask) if m == 0])
    kept_text = tokenizer.decode([i for i, m in zip(ids, mask) if m == 1])
    prompt = "question: How many singers are from Brasil?\n"
    results = [f"<results>{st.observation}</results>" for st in s.steps[:-1]]
    assert masked_text == prompt + "".join(results)  # prompt + every <results> span, nothing else
    assert kept_text.count("<call>") == 4 and "<results>" not in kept_text and "</results>" not in kept_text
    assert kept_text.endswith("<call>terminate()</call>")
    # the mask switches exactly at the tag tokens
    tag = tokenizer.convert_tokens_to_ids
    for i, t in enumerate(ids):
        if t in (tag("<results>"), tag("</results>")):
            assert mask[i] == 0
        if t in (tag("<reasoning>"), tag("</call>"), tag("<call>")):
            assert mask[i] == 1
