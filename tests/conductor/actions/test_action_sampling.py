"""Action calls are sampled LLM calls (``action.temperature``): one seed a call from the server's seed and the
call's key (episode id, call index), so the same call gives the same SQL, another call a new candidate, and
temperature 0 stays greedy."""

import pytest
from tiny_shapes import tiny_model

from rewardsql_jax.conductor.actions.env import Env
from rewardsql_jax.conductor.actions.episode import run_workflow
from rewardsql_jax.conductor.actions.lm import ModelServer, SeededPrompt, action_handler
from rewardsql_jax.conductor.actions.state import State
from rewardsql_jax.conductor.training.rollout import bind
from rewardsql_jax.conductor.training.sft import new_model

PROMPT = "task: generate\nquestion: How many singers are from Brazil?\nsql:"


@pytest.fixture(scope="module")
def tiny_action_model(tokenizer):
    shape = tiny_model(vocab_size=320, max_len=256)
    return new_model(shape, tokenizer, 0)


def _server(model, tokenizer, temperature, seed=0, max_batch=256):
    return ModelServer(
        model,
        stop_ids=(tokenizer.eos_token_id,),
        pad_id=tokenizer.pad_token_id or 0,
        max_new_tokens=8,
        temperature=temperature,
        seed=seed,
        max_batch=max_batch,
    )


def test_seeded_calls_are_reproducible_and_differ_by_key(tiny_action_model, tokenizer):
    handle = action_handler(_server(tiny_action_model, tokenizer, 2.0, seed=3), tokenizer)
    keys = [(7, i) for i in range(5)]
    texts = [c.text for c in handle([SeededPrompt(PROMPT, k) for k in keys])]
    assert len(set(texts)) >= 2  # another call of the same state draws another answer
    again = [c.text for c in handle([SeededPrompt(PROMPT, k) for k in reversed(keys)])]
    assert again[::-1] == texts  # the same call gives the same SQL, whatever the batch
    alone = handle([SeededPrompt(PROMPT, keys[2])])[0].text
    assert alone == texts[2]
    other_run = action_handler(_server(tiny_action_model, tokenizer, 2.0, seed=4), tokenizer)
    assert [c.text for c in other_run([SeededPrompt(PROMPT, k) for k in keys])] != texts


def test_a_large_call_is_decoded_in_batches_of_max_batch_with_the_same_answers(tiny_action_model, tokenizer):
    """ModelServer.max_batch bounds the decode batch (memory); seeded calls give the same SQL however split."""
    keys = [(9, i) for i in range(5)]
    whole = action_handler(_server(tiny_action_model, tokenizer, 2.0, seed=3), tokenizer)
    split = action_handler(_server(tiny_action_model, tokenizer, 2.0, seed=3, max_batch=2), tokenizer)
    prompts = [SeededPrompt(PROMPT, k) for k in keys]
    assert [c.text for c in split(prompts)] == [c.text for c in whole(prompts)]
    with pytest.raises(ValueError, match="max_batch must be >= 1"):
        _server(tiny_action_model, tokenizer, 2.0, max_batch=0)


def test_temperature_zero_is_greedy(tiny_action_model, tokenizer):
    greedy = action_handler(_server(tiny_action_model, tokenizer, 0.0), tokenizer)
    plain = greedy([PROMPT])[0].text
    assert [c.text for c in greedy([SeededPrompt(PROMPT, (1, i)) for i in range(3)])] == [plain] * 3


def test_bind_numbers_an_episodes_action_calls(music_db):
    seen = []

    def call(kind, prompt):
        seen.append(prompt)
        from rewardsql_jax.conductor.actions.env import Completion

        return Completion(f"SELECT COUNT(*) FROM singer WHERE id > {len(seen)}")

    state = State(question="How many singers?", db_path=music_db, env=Env(complete=call))
    s = run_workflow(bind(state, call, ("q", 5)), ["generate_sql", "generate_sql", "select_candidate", "terminate"])
    assert [p.key for p in seen] == [("q", 5, 0), ("q", 5, 1)]
    assert len(s.candidates) == 2  # a repeated generate_sql adds a new candidate to choose from
