"""SFT and PRM rows grouped by a shared prompt prefix (GroupedSFTBatch, GroupedPRMBatch) give the SFTBatch /
PRMBatch loss and gradients; the group order covers every example of a key once per epoch and never mixes keys."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rewardsql_jax.training.batch import PRMBatch, SFTBatch
from rewardsql_jax.training.collate import pad_rows, sft_arrays
from rewardsql_jax.training.prefix_groups import (
    grouped_prm_batch,
    grouped_sft_batch,
    grouped_slots,
    prefix_group_batches,
    shared_prefix_lengths,
)
from rewardsql_jax.training.step import loss_and_grads

from _train_tiny import V, tiny_state


def _examples(seed=0):
    """Two 'databases' whose prompts share a schema prefix (plus, for db a, a first question word), then a
    per-row question and a target of varying length."""
    rng = np.random.default_rng(seed)
    schema = {"a": list(rng.integers(1, V, 9)), "b": list(rng.integers(1, V, 6))}
    encoded, keys = [], []
    for k, n_rows in (("a", 6), ("b", 4)):
        for _ in range(n_rows):
            question = ([7] if k == "a" else []) + list(rng.integers(1, V, int(rng.integers(1, 4))))
            target = list(rng.integers(1, V, int(rng.integers(1, 6))))
            prompt = schema[k] + question
            encoded.append((prompt + target, [0] * len(prompt) + [1] * len(target)))
            keys.append(k)
    return encoded, keys, schema


def test_shared_prefix_lengths_are_the_keys_common_prompt_prefix():
    encoded, keys, schema = _examples()
    lengths = shared_prefix_lengths(encoded, keys)
    assert {k: n for k, n in zip(keys, lengths)} == {"a": len(schema["a"]) + 1, "b": len(schema["b"])}
    with pytest.raises(ValueError, match="share no first token"):
        shared_prefix_lengths([([1, 2, 3], [0, 0, 1]), ([2, 2, 3], [0, 0, 1])], ["x", "x"])


@pytest.mark.parametrize("micro_batches", [1, 2])
def test_grouped_sft_batch_equals_the_unshared_rows(micro_batches):
    encoded, keys, _ = _examples()
    prefix = shared_prefix_lengths(encoded, keys)
    groups = np.array([[0, 1, 2], [6, 7, 8]])  # one group of db a, one of db b
    slots = grouped_slots(encoded, prefix)
    grouped = grouped_sft_batch(encoded, groups, prefix, prefix_slots=slots[0], rest_slots=slots[1], pad_id=0)
    rows = [encoded[j] for j in groups.reshape(-1)]
    flat = SFTBatch(*sft_arrays(rows, 32, 0))
    state = tiny_state(num_hidden_layers=2)

    def run(batch, m, options):
        fn = jax.jit(
            lambda p, b: loss_and_grads(
                p, None, state.graphdef, b, loss_name="sft", loss_options=options, micro_batches=m
            )
        )
        return fn(state.params, batch)

    loss_f, g_f, m_f = run(flat, 1, {})
    loss_g, g_g, m_g = run(grouped, micro_batches, {"target_tokens": 8})
    assert float(m_g["loss_denominator"]) == float(m_f["loss_denominator"]) == sum(sum(m) for _, m in rows)
    np.testing.assert_allclose(float(loss_g), float(loss_f), atol=2e-6, rtol=1e-5)
    assert float(jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree.leaves(g_f)))) > 1e-3
    for a, b in zip(jax.tree.leaves(g_f), jax.tree.leaves(g_g)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=2e-6, rtol=1e-4)


def test_grouped_batch_refuses_a_group_of_two_keys():
    encoded, keys, _ = _examples()
    prefix = shared_prefix_lengths(encoded, keys)
    with pytest.raises(ValueError, match="different shared prefixes"):
        grouped_sft_batch(encoded, np.array([[0, 6]]), prefix, prefix_slots=16, rest_slots=16, pad_id=0)


def test_group_order_is_one_key_per_group_and_covers_each_epoch():
    keys = ["a"] * 10 + ["b"] * 5 + ["c"] * 1
    # per epoch: a -> 3 groups (10 + 2 fill), b -> 2 groups (5 + 1), c -> 1 group (1 + 3 repeats) = 6 groups
    order = prefix_group_batches(keys, 4, 2, steps=3, seed=0)
    assert len(order) == 3 and all(b.shape == (2, 4) for b in order)
    groups = [g for b in order for g in b]
    assert all(len({keys[j] for j in g}) == 1 for g in groups)
    seen = collections.Counter(int(j) for g in groups for j in g)
    assert set(seen) == set(range(16))  # one epoch (6 groups = 3 steps): every example at least once
    again = prefix_group_batches(keys, 4, 2, steps=3, seed=0)
    assert all((a == b).all() for a, b in zip(order, again))
    other = prefix_group_batches(keys, 4, 2, steps=3, seed=1)
    assert any((a != b).any() for a, b in zip(order, other))


def _prm_examples(seed=0):
    """PRM examples (ids, tag positions, labels) of two 'databases': a schema prefix, a question, then steps each
    ending in the tag token 5; the shared prefixes end before the first tag."""
    rng = np.random.default_rng(seed)
    schema = {"a": list(rng.integers(6, V, 9)), "b": list(rng.integers(6, V, 6))}
    examples, keys = [], []
    for k, n_rows in (("a", 5), ("b", 3)):
        for _ in range(n_rows):
            ids = schema[k] + list(rng.integers(6, V, int(rng.integers(1, 4))))
            pos, labels = [], []
            for _ in range(int(rng.integers(1, 4))):
                ids += list(rng.integers(6, V, int(rng.integers(1, 5)))) + [5]
                pos.append(len(ids) - 1)
                labels.append(int(rng.integers(0, 2)))
            examples.append((ids, pos, labels))
            keys.append(k)
    return examples, keys


def _prm_prefix_lengths(examples, keys):
    """``shared_prefix_lengths`` over the tokens before each row's first tag (what the PRM stage passes)."""
    return shared_prefix_lengths([(ids, [0] * pos[0] + [1]) for ids, pos, _ in examples], keys)


@pytest.mark.parametrize("micro_batches", [1, 2])
def test_grouped_prm_batch_equals_the_unshared_rows(micro_batches):
    examples, keys = _prm_examples()
    prefix = _prm_prefix_lengths(examples, keys)
    groups = np.array([[0, 1, 2], [5, 6, 7]])  # one group of db a, one of db b
    prefix_slots, rest_slots = grouped_slots(examples, prefix, spare=1)
    grouped = grouped_prm_batch(
        examples, groups, prefix, prefix_slots=prefix_slots, rest_slots=rest_slots, num_steps=4, pad_id=0
    )
    rows = [examples[j] for j in groups.reshape(-1)]
    flat = PRMBatch(
        input_ids=pad_rows([e[0] for e in rows], 32, 0),
        attention_mask=pad_rows([[1] * len(e[0]) for e in rows], 32, 0),
        tag_positions=pad_rows([e[1] for e in rows], 4, 0),
        labels=pad_rows([e[2] for e in rows], 4, 0),
        step_mask=pad_rows([[1] * len(e[2]) for e in rows], 4, 0),
    ).validate()
    state = tiny_state(num_hidden_layers=2)
    options = {"tag_token_ids": (3, 4), "pos_weight": 1.5}

    def run(batch, m):
        fn = jax.jit(
            lambda p, b: loss_and_grads(
                p, None, state.graphdef, b, loss_name="prm", loss_options=options, micro_batches=m
            )
        )
        return fn(state.params, batch)

    loss_f, g_f, m_f = run(flat, 1)
    loss_g, g_g, m_g = run(grouped, micro_batches)
    assert float(m_g["loss_denominator"]) == float(m_f["loss_denominator"]) == sum(len(e[2]) for e in rows)
    np.testing.assert_allclose(float(loss_g), float(loss_f), atol=2e-6, rtol=1e-5)
    np.testing.assert_allclose(float(m_g["accuracy"]), float(m_f["accuracy"]), atol=1e-6)
    assert float(jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree.leaves(g_f)))) > 1e-3
    for a, b in zip(jax.tree.leaves(g_f), jax.tree.leaves(g_g)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=2e-6, rtol=1e-4)


def test_grouped_prm_batch_needs_a_slot_after_the_last_tag_and_tags_after_the_prefix():
    examples, keys = _prm_examples()
    prefix = _prm_prefix_lengths(examples, keys)
    groups = np.array([[0, 1]])
    longest = max(len(examples[j][0]) - prefix[j] for j in (0, 1))
    with pytest.raises(ValueError, match="leaves no slot after its last token"):
        grouped_prm_batch(examples, groups, prefix, prefix_slots=16, rest_slots=longest, num_steps=4, pad_id=0)
    past_a_tag = [examples[0][1][0] + 1] * len(prefix)  # a "prefix" that swallows row 0's first tag
    with pytest.raises(ValueError, match="inside the shared prefix"):
        grouped_prm_batch(examples, groups[:, :1], past_a_tag, prefix_slots=64, rest_slots=64, num_steps=4, pad_id=0)


def test_remat_recomputes_the_prefix_shared_layers_same_loss_and_gradients_less_memory():
    """``model.remat`` in the prefix-shared steps (``hidden_with_cache``): the grouped SFT step's loss and
    gradients are unchanged and its compiled temporaries shrink (before, remat reached only ``hidden_states`` and a
    grouped Spider SFT step asked XLA for 104 GB)."""
    rng = np.random.default_rng(0)
    schema = list(rng.integers(1, V, 40))
    encoded = []
    for _ in range(8):
        prompt = schema + list(rng.integers(1, V, 6))
        target = list(rng.integers(1, V, 24))
        encoded.append((prompt + target, [0] * len(prompt) + [1] * len(target)))
    keys = ["db"] * 8
    prefix = shared_prefix_lengths(encoded, keys)
    slots = grouped_slots(encoded, prefix)
    batch = grouped_sft_batch(
        encoded, np.array([[0, 1, 2, 3], [4, 5, 6, 7]]), prefix, prefix_slots=slots[0], rest_slots=slots[1], pad_id=0
    )
    out, temp = {}, {}
    for remat in (False, True):
        state = tiny_state(num_hidden_layers=6, remat=remat)
        fn = jax.jit(lambda p, b, s=state: loss_and_grads(p, None, s.graphdef, b, loss_name="sft"))
        temp[remat] = fn.lower(state.params, batch).compile().memory_analysis().temp_size_in_bytes
        out[remat] = fn(state.params, batch)
    np.testing.assert_allclose(float(out[True][0]), float(out[False][0]), rtol=1e-6)
    for a, b in zip(jax.tree.leaves(out[False][1]), jax.tree.leaves(out[True][1])):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-7, rtol=1e-5)
    assert temp[True] < temp[False], temp
