"""``variant="released"`` against the released RewardSQL verl code, token for token.

The released functions are transcribed into torch below (their logic, float32 as they run):
  * ``verl/workers/fsdp_workers.py`` ``_expand_to_token_level_steps``: the j-th PRM step score on token
    ``len(encode(response[:pos_j])) - 1`` (``pos_j`` = the j-th "\\n\\n" of the decoded response, EOS text
    included), the last score on the last response token;
  * ``verl/workers/reward_manager/custom.py`` ``CustomRewardManager.__call__`` / ``verify``: ``rm_coef *
    rm_scores`` filled backwards from each nonzero position, plus the outcome (``verifier.reward_coef`` 1) on
    every response token, or with ``rm_coef == 0`` on the last response token only;
  * ``verl/trainer/ppo/core_algos.py`` ``compute_grpo_process_advantage_avg_unique``.
The PRM forward itself is not transcribed: both sides get the same step scores (one per "\\n\\n" block).

Completions are sampled-looking ids from small byte-level BPE tokenizers: a GPT-2 style pre-tokenizer, where
"\\n\\n" after a CTE's ")," is two "\\n" tokens of its own (the released placement gives them the next
step's score), and a Qwen2 style one, where "),\\n\\n" is one token (it keeps the step it ends).

Deliberate difference, handled explicitly: a group whose responses all have the same R_i gets exactly 0 from
us; the released float32 ``mean()`` of equal values can be off by an ulp, which ``/ (std + 1e-6)`` turns into
advantages of either sign. Those groups are checked to be exactly 0 on our side and not compared.
"""

import numpy as np
import pytest
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from rewardsql_jax.rewards.process import process_advantages, released_rewards
from rewardsql_jax.rewards.rollout_rewards import Outcomes, decode_with_offsets, process_token_advantages
from rewardsql_jax.rewards.token_align import blank_line_spans, released_step_anchors
from rewardsql_jax.stages.run_config import RLConfig, RunConfig

torch = pytest.importorskip("torch")

CTES = [
    "WITH old AS (\n  SELECT name, age FROM singer WHERE age > 30\n),",
    "names AS (\n  SELECT name FROM old\n),",
    "counts AS (SELECT country, COUNT(*) AS n FROM singer GROUP BY country),",
    "young AS (SELECT * FROM singer WHERE age < 20),",
]
FINALS = [
    "SELECT COUNT(*) FROM names",
    "SELECT name FROM old ORDER BY age DESC LIMIT 3",
    "SELECT country FROM counts WHERE n > 2",
    "SELECT name FROM singer",
]
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _cocte(ctes, final):
    """A Chain-of-CTEs as the policy writes it: steps separated by a blank line; the last CTE loses its comma."""
    if not ctes:
        return final
    steps = list(ctes)
    steps[0] = steps[0] if steps[0].startswith("WITH ") else "WITH " + steps[0]
    steps[-1] = steps[-1][:-1]
    return "\n\n".join(steps + [final])


def _tokenizer(style):
    t = Tokenizer(models.BPE())
    if style == "gpt2":
        t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        t.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    t.decoder = decoders.ByteLevel()
    corpus = [_cocte(CTES[:k] + CTES[k + 1 :], f) for k in range(len(CTES)) for f in FINALS]
    t.train_from_iterator(
        corpus * 5,
        trainers.BpeTrainer(
            vocab_size=400, special_tokens=["<eos>", "<pad>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    return PreTrainedTokenizerFast(tokenizer_object=t, eos_token="<eos>", pad_token="<pad>")


@pytest.fixture(scope="module", params=["gpt2", "qwen2"])
def tok(request):
    return _tokenizer(request.param)


# --- the released code, transcribed into torch -------------------------------------------------------------


def released_rm_scores(tokenizer, responses, attention_mask, scores):
    """fsdp_workers._expand_to_token_level_steps (response part): [B, L] float32 PRM scores on anchor tokens."""
    out = torch.zeros(responses.shape, dtype=torch.float32)
    for i in range(responses.shape[0]):
        valid = int(attention_mask[i].sum())
        if valid == 0:
            continue
        text = tokenizer.decode(responses[i, :valid].tolist())  # special tokens (EOS) not skipped
        positions, cur = [], 0
        while (pos := text.find("\n\n", cur)) != -1:
            positions.append(pos)
            cur = pos + 2
        current, idx = scores[i], 0
        row = torch.zeros(valid)
        if not positions and current:
            row[valid - 1] = current[-1]
        else:
            for pos in positions:
                if idx < len(current):
                    token_pos = len(tokenizer.encode(text[:pos])) - 1
                    if 0 <= token_pos < valid:
                        row[token_pos] = current[idx]
                    idx += 1
            if idx < len(current):
                row[valid - 1] = current[idx]
        out[i, :valid] = row
    return out


def released_token_rewards(rm_scores, attention_mask, outcomes, rm_coef):
    """CustomRewardManager.__call__ with its verify(): the token_level_rewards of the batch."""
    reward = torch.zeros_like(rm_scores)
    if rm_coef != 0:
        reward += rm_coef * rm_scores
    filled = reward.clone()
    for i in range(filled.shape[0]):
        start = 0
        for pos in torch.nonzero(filled[i], as_tuple=True)[0].tolist():
            filled[i, start : pos + 1] = filled[i, pos].item()
            start = pos + 1
    reward = filled
    score = torch.tensor(outcomes, dtype=torch.float32)
    verifier = torch.zeros_like(reward)
    for i in range(reward.shape[0]):
        valid = int(attention_mask[i].sum())
        if rm_coef == 0:
            verifier[i, valid - 1] = score[i]
        else:
            verifier[i, :valid] = score[i]
    return reward + 1.0 * verifier


def released_grpo_process_advantage(token_level_rewards, index, epsilon=1e-6):
    """core_algos.compute_grpo_process_advantage_avg_unique."""
    adv = torch.zeros_like(token_level_rewards)
    groups = {}
    for i, k in enumerate(index):
        groups.setdefault(k, []).append(i)
    for members in groups.values():
        avg = {}
        for i in members:
            nz = torch.nonzero(token_level_rewards[i], as_tuple=True)[0]
            avg[i] = torch.unique(token_level_rewards[i][nz]).mean().item() if len(nz) else 0.0
        if len(members) <= 1:
            continue
        t = torch.tensor([avg[i] for i in members])
        mean, std = t.mean().item(), t.std().item() + epsilon
        for i in members:
            a = (avg[i] - mean) / std
            for pos in torch.nonzero(token_level_rewards[i], as_tuple=True)[0].tolist():
                r = token_level_rewards[i, pos].item()
                adv[i, pos] = ((r - 1.0) * a if r > 1.0 else r * a) if a > 0 else (1.0 - r) * a
    return adv


def released_pipeline(tokenizer, id_rows, scores, outcomes, group_size, rm_coef):
    """Padded batch -> (token_level_rewards, advantages, attention mask), all [B, L]."""
    width = max(len(r) for r in id_rows)
    responses = torch.full((len(id_rows), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(id_rows), width), dtype=torch.long)
    for i, r in enumerate(id_rows):
        responses[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    rm = released_rm_scores(tokenizer, responses, mask, scores)
    rewards = released_token_rewards(rm, mask, outcomes, rm_coef)
    index = [i // group_size for i in range(len(id_rows))]
    return rewards, released_grpo_process_advantage(rewards, index), mask


# --- batches -----------------------------------------------------------------------------------------------


def _response_ids(tok, rng):
    """Ids of one sampled completion: 0-3 CTE steps (repeats allowed) and a final query; EOS, or cut off
    before it (max length reached) at a point where the decoded text does not end in whitespace."""
    k = int(rng.integers(0, 4))
    text = _cocte([CTES[j] for j in rng.integers(0, len(CTES), size=k)], FINALS[int(rng.integers(len(FINALS)))])
    ids = tok(text, add_special_tokens=False).input_ids
    u = rng.uniform()
    if u < 0.2:
        cuts = [n for n in range(2, len(ids)) if not tok.decode(ids[:n])[-1].isspace()]
        ids = ids[: int(rng.choice(cuts))]
    elif u < 0.4:
        pass  # cut at max length right at the end: no EOS
    else:
        ids = ids + [tok.eos_token_id]
    return ids


def _scores(rng, n):
    """PRM scores with repeats (a few fixed values) and the occasional exact 0.0."""
    fixed = np.array([0.0, 0.25, 0.5, 0.75, 0.9], np.float32)
    s = np.where(rng.uniform(size=n) < 0.5, rng.choice(fixed, size=n), rng.uniform(0.02, 1.0, size=n))
    return s.astype(np.float32).tolist()


def _batch(tok, rng, prompts, group_size):
    ids, equal_groups = [], []
    for p in range(prompts):
        if rng.uniform() < 0.3:  # every response of the group identical: all R_i equal
            row = _response_ids(tok, rng)
            ids += [list(row) for _ in range(group_size)]
            equal_groups.append(p)
        else:
            ids += [_response_ids(tok, rng) for _ in range(group_size)]
    comps = [decode_with_offsets(tok, r, [tok.eos_token_id]) for r in ids]
    scores, outcomes = [], []
    for i, c in enumerate(comps):
        if i % group_size and i // group_size in equal_groups:
            scores.append(list(scores[-1]))
            outcomes.append(outcomes[-1])
        else:
            scores.append(_scores(rng, len(blank_line_spans(c.text))))
            outcomes.append(float(rng.integers(0, 2)))
    return ids, comps, scores, outcomes, equal_groups


@pytest.mark.parametrize("rm_coef", [1.0, 0.5, 0.0])
@pytest.mark.parametrize("group_size", [2, 3, 5, 8])
def test_released_variant_matches_the_released_code_per_token(tok, group_size, rm_coef):
    rng = np.random.default_rng([group_size, int(rm_coef * 10), tok.vocab_size])
    prompts = 3
    ids, comps, scores, outcomes, equal_groups = _batch(tok, rng, prompts, group_size)
    ours = process_token_advantages(comps, scores, outcomes, group_size, variant="released", rm_coef=rm_coef)
    ref_rewards, ref, mask = released_pipeline(tok, ids, scores, outcomes, group_size, rm_coef)
    compared = 0
    for i, (row, comp) in enumerate(zip(ids, comps)):
        n = len(row)
        assert ours[i].shape == (n,) and ours[i].dtype == np.float32
        assert comp.text == tok.decode(row, skip_special_tokens=True)  # the texts the two sides read agree
        if i // group_size in equal_groups:
            assert not ours[i].any(), "an all-equal group gets exactly zero advantage"
            continue
        np.testing.assert_allclose(ours[i], ref[i, :n].numpy(), rtol=2e-5, atol=2e-6, err_msg=f"response {i}")
        # where the released reward is zero, the advantage is exactly zero on both sides
        zero = ref_rewards[i, :n].numpy() == 0
        assert not ours[i][zero].any()
        assert not ref[i, n:].any()  # padding
        compared += 1
    assert compared >= group_size  # at least one group really compared
    if rm_coef == 0:  # the shipped grpo_trainer.yaml: advantage on the last response token only
        for a in ours:
            assert not a[:-1].any()


def test_the_random_batches_cover_the_cases(tok):
    """The seeded draws above do exercise repeats, exact-zero scores, both advantage branches, truncation."""
    seen = {
        "zero_score": False,
        "repeat": False,
        "no_eos": False,
        "positive": False,
        "negative": False,
        "above_one": False,
    }
    for group_size in (2, 3, 5, 8):
        for rm_coef in (1.0, 0.5):
            rng = np.random.default_rng([group_size, int(rm_coef * 10), tok.vocab_size])
            ids, comps, scores, outcomes, _ = _batch(tok, rng, 3, group_size)
            ours = process_token_advantages(comps, scores, outcomes, group_size, variant="released", rm_coef=rm_coef)
            for row, s, o, a in zip(ids, scores, outcomes, ours):
                seen["zero_score"] |= 0.0 in s
                seen["repeat"] |= len(set(s)) < len(s)
                seen["no_eos"] |= row[-1] != tok.eos_token_id
                seen["positive"] |= bool((a > 0).any())
                seen["negative"] |= bool((a < 0).any())
                seen["above_one"] |= bool(o == 1.0 and (a > 0).any())
    assert all(seen.values()), seen


def test_separator_tokens_carry_the_next_steps_value(tok):
    """Released: "\\n\\n" tokens after a step's last token take the next step's score; paper: the step's own."""
    texts = [_cocte(CTES[:2], FINALS[0]), _cocte(CTES[2:3], FINALS[2])]
    ids = [tok(t, add_special_tokens=False).input_ids + [tok.eos_token_id] for t in texts]
    comps = [decode_with_offsets(tok, r, [tok.eos_token_id]) for r in ids]
    scores, outcomes = [[0.9, 0.2, 0.6], [0.3, 0.8]], [1.0, 0.0]
    rewards = [
        released_rewards(s, released_step_anchors(c.text, c.offsets), len(c.offsets), o)
        for c, s, o in zip(comps, scores, outcomes)
    ]
    ref_rewards, _, _ = released_pipeline(tok, ids, scores, outcomes, 2, 1.0)
    for i, r in enumerate(rewards):
        np.testing.assert_allclose(r, ref_rewards[i, : len(ids[i])].numpy(), rtol=1e-6)
    c, r = comps[0], rewards[0]
    pieces = [c.text[s:e] for s, e in c.offsets]
    first_sep = c.text.index("\n\n")
    seps = [k for k, (s, e) in enumerate(c.offsets) if first_sep <= s < first_sep + 2]  # tokens starting in it
    sep_in_own_token = bool(seps)
    paper = process_token_advantages(comps, scores, outcomes, 2, variant="paper")[0]
    released = process_token_advantages(comps, scores, outcomes, 2, variant="released")[0]
    assert sep_in_own_token == (tok.backend_tokenizer.pre_tokenizer.__class__.__name__ == "ByteLevel")
    if sep_in_own_token:  # GPT-2 style: "\n" "\n" tokens between ")," and the next step
        assert all(pieces[k] == "\n" for k in seps)
        nxt = seps[-1] + 1  # first token of step 2
        assert all(r[k] == pytest.approx(0.2 + 1.0) for k in seps) and r[seps[0] - 1] == pytest.approx(1.9)
        assert all(released[k] == released[nxt] for k in seps) and released[seps[0] - 1] != released[nxt]
        assert all(paper[k] == paper[seps[0] - 1] for k in seps) and paper[nxt] != paper[seps[0] - 1]
    else:  # Qwen2 style: "),\n\n" is one token, which holds step 1's last char and keeps step 1's score
        k = next(k for k, (s, e) in enumerate(c.offsets) if s < first_sep < e)
        assert pieces[k].endswith("\n\n") and r[k] == pytest.approx(1.9) and r[k + 1] == pytest.approx(1.2)
        assert released[k] == released[k - 1] != released[k + 1]


def test_rm_coef_zero_puts_the_outcome_and_the_advantage_on_the_last_token_only(tok):
    texts = [_cocte(CTES[:2], FINALS[0]), _cocte(CTES[2:3], FINALS[2]), FINALS[3]]
    ids = [tok(t, add_special_tokens=False).input_ids + [tok.eos_token_id] for t in texts]
    ids[2] = ids[2][:-1]  # no EOS: the last sampled token
    comps = [decode_with_offsets(tok, r, [tok.eos_token_id]) for r in ids]
    scores, outcomes = [[0.9, 0.2, 0.6], [0.3, 0.8], [0.5]], [1.0, 0.0, 0.0]
    got = process_token_advantages(comps, scores, outcomes, 3, variant="released", rm_coef=0.0)
    a = (np.array([1.0, 0.0, 0.0]) - 1 / 3) / (np.std([1.0, 0.0, 0.0], ddof=1) + 1e-6)
    assert got[0][-1] == pytest.approx(a[0], rel=1e-6) and not got[0][:-1].any()  # r = 1 (not > 1): r * A
    assert not got[1].any() and not got[2].any()  # r = 0 everywhere: no advantage, even with A < 0
    # rm_coef = 1 spreads the outcome (and the advantage) over every token instead
    assert (process_token_advantages(comps, scores, outcomes, 3, variant="released")[0] != 0).all()


def test_step_level_released_variant_is_the_token_level_one_with_one_token_per_step():
    steps = [[0.5, 0.5, 0.8], [0.0, 0.3], [0.2, 0.0], [0.9, 0.1]]
    out = [0.0, 0.0, 1.0, 1.0]
    for rm in (1.0, 0.5, 0.0):
        adv = process_advantages(steps, out, 2, variant="released", rm_coef=rm)
        rewards = released_token_rewards(
            torch.tensor([[0.5, 0.5, 0.8], [0.0, 0.3, 0.0], [0.2, 0.0, 0.0], [0.9, 0.1, 0.0]]),
            torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 1, 0]]),
            out,
            rm,
        )
        ref = released_grpo_process_advantage(rewards, [0, 0, 1, 1])
        for i, a in enumerate(adv):
            np.testing.assert_allclose(a, ref[i, : len(steps[i])].numpy(), rtol=1e-5, atol=1e-6)
    # rm 1: [0.0, 0.3] fills to [0.3, 0.3]; [0.2, 0.0] + 1 keeps the outcome after its last nonzero score
    r = released_rewards([0.2, 0.0], [0, 1], 2, 1.0)
    assert r.tolist() == pytest.approx([1.2, 1.0])
    assert released_rewards([0.0, 0.3], [0, 1], 2, 0.0).tolist() == pytest.approx([0.3, 0.3])
    assert released_rewards([0.9, 0.4], [0, 1], 2, 1.0, rm_coef=0.0).tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match=">= 0"):
        released_rewards([0.5], [0], 1, 1.0, rm_coef=-1.0)


def test_all_equal_group_is_exactly_zero_where_released_float32_is_not():
    """The deliberate difference: equal R_i -> our advantage is exactly 0; released float32 can be off."""
    steps, out = [[0.37, 0.61]] * 7, [1.0] * 7
    ours = process_advantages(steps, out, 7, variant="released", rm_coef=0.3)
    assert all(not a.any() for a in ours)
    rewards = torch.tensor([[0.3 * 0.37 + 1, 0.3 * 0.61 + 1]] * 7, dtype=torch.float32)
    ref = released_grpo_process_advantage(rewards, [0] * 7)
    assert torch.unique(rewards, dim=0).shape[0] == 1  # truly one response value
    assert ref.abs().max().item() < 0.2  # whatever float32 gives, it is bounded noise, not signal


def test_anchor_helpers():
    assert blank_line_spans("a\n\nb\n\nc", separator="next") == [(0, 1), (1, 4), (4, 7)]
    assert blank_line_spans("a\n\n\n\nb", separator="next") == [(0, 1), (1, 3), (3, 6)]
    assert blank_line_spans("a\n\n\n\nb") == [(0, 3), (3, 5), (5, 6)]
    with pytest.raises(ValueError, match="separator"):
        blank_line_spans("a", separator="start")
    # tokens "a" "\n" "\n" "bc" "\n\n" "d" EOS: anchors are "a", "bc" and EOS
    offsets = [(0, 1), (1, 2), (2, 3), (3, 5), (5, 7), (7, 8), (7, 8)]
    assert released_step_anchors("a\n\nbc\n\nd", offsets).tolist() == [0, 3, 6]
    assert released_step_anchors("abc", [(0, 3), (2, 3)]).tolist() == [1]
    assert released_step_anchors("", []).shape == (0,)


def test_rl_config_and_step_rewards_pass_rm_coef(tok):
    from rewardsql_jax.rl import Rollouts, get_algorithm, train_batch

    released = dict(advantage_variant="released", rm_coef=0.0)
    grpo = get_algorithm("grpo")
    assert grpo.options(RLConfig()).rm_coef == 1.0 and grpo.options(RLConfig(algorithm_options=released)).rm_coef == 0.0
    with pytest.raises(ValueError, match="rm_coef"):
        RunConfig(rl=RLConfig(algorithm_options=dict(advantage_variant="released", rm_coef=-0.5)))

    class FixedPRM:
        def score(self, prompts, responses):
            return [[0.8, 0.3][: len(r.split("\n\n"))] for r in responses]

    texts = [_cocte(CTES[:1], FINALS[1]), FINALS[3]]
    ids = [tok(t, add_special_tokens=False).input_ids + [tok.eos_token_id] for t in texts]
    comps = [decode_with_offsets(tok, i, [tok.eos_token_id]) for i in ids]
    out = Outcomes(
        rewards=np.array([1.0, 0.0], np.float32),
        executable=np.array([True, True]),
        gold_ok=np.array([True, True]),
        results=((None, None), (None, None)),
    )
    ro = Rollouts(
        prompt_ids=[[1, 2], [1, 2]],
        token_ids=ids,
        logprobs=[[-1.0] * len(i) for i in ids],
        records=[{"prompt": "q"}] * 2,
        completions=comps,
        outcomes=out,
        clauses=[None, None],
        tokens=sum(map(len, ids)),
        sample_seconds=1.0,
        wait_seconds=0.0,
    )
    rl = RLConfig(algorithm="grpo", algorithm_options=released, samples_per_prompt=2)
    upd = get_algorithm("grpo").update(ro, FixedPRM().score(None, texts), rl)
    batch = train_batch(ro, upd, field="advantages", group_size=2, length=96, pad_id=0, completion_length=None)
    exp = process_token_advantages(comps, [[0.8, 0.3], [0.8]], [1.0, 0.0], 2, variant="released", rm_coef=0.0)
    for row, e in enumerate(exp):
        np.testing.assert_allclose(batch.advantages[row, 2 : 2 + len(e)], e, rtol=1e-6)
    assert batch.advantages[0].nonzero()[0].tolist() == [2 + len(ids[0]) - 1]  # EOS only
    np.testing.assert_allclose(upd.rewards, [1.0, 0.0])  # rm_coef * PR + OR
