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


def test_step_credit_puts_each_decisions_advantage_on_its_own_tokens():
    """rl.credit=step: grpo.episode_batch spreads decision t's advantage over the tokens of policy segment t."""
    import numpy as np
    import pytest

    from rewardsql_jax.conductor.training.grpo import episode_batch
    from rewardsql_jax.conductor.training.rollout import Rollout
    from rewardsql_jax.conductor.training.trajectory import Segment

    segs = (
        Segment((1, 2), False),
        Segment((3, 4, 5), True, (-0.1,) * 3),
        Segment((6,), False),
        Segment((7,), True, (-0.2,)),
    )
    rollout = Rollout(State(question="q", db_path=""), segs, 4, False, (None, "SELECT 1"))
    batch = episode_batch([rollout, rollout], [np.asarray([0.5, -1.5]), np.asarray([2.0, 0.0])], pad_id=0)
    np.testing.assert_allclose(batch.advantages[0, :8], [0, 0, 0.5, 0.5, 0.5, 0, -1.5, 0])
    np.testing.assert_allclose(batch.advantages[1, :8], [0, 0, 2.0, 2.0, 2.0, 0, 0, 0])
    np.testing.assert_array_equal(batch.completion_mask[0, :8], [0, 0, 1, 1, 1, 0, 1, 0])
    per_episode = episode_batch([rollout, rollout], np.asarray([1.0, -1.0]), pad_id=0)
    assert per_episode.advantages.shape == (2,)
    with pytest.raises(ValueError, match="3 decision values for an episode of 2 policy decisions"):
        episode_batch([rollout], [np.asarray([1.0, 2.0, 3.0])], pad_id=0)
