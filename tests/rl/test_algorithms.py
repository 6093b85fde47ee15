"""Each registered online algorithm on hand-made rollouts: which reward feeds which batch field; the registry,
loss resolution and the algorithms' config checks."""

import jax.numpy as jnp
import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from rewardsql_jax import losses
from rewardsql_jax.rewards.rollout_rewards import Outcomes, decode_with_offsets, process_token_advantages
from rewardsql_jax.rl import Rollouts, get_algorithm, policy_loss, train_batch
from rewardsql_jax.sql.clause_rewards import ClauseRewards
from rewardsql_jax.sql.clauses import Clause
from rewardsql_jax.stages.run_config import MeshConfig, RLConfig, RunConfig

TEXTS = ["WITH t AS (SELECT a FROM x)\n\nSELECT a FROM t", "SELECT a FROM x"]


@pytest.fixture(scope="module")
def tok():
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.train_from_iterator(
        TEXTS * 5,
        trainers.BpeTrainer(
            vocab_size=280, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    return PreTrainedTokenizerFast(tokenizer_object=t, eos_token="<eos>")


class FixedPRM:
    """Test double of PRMScorer: one score per "\\n\\n" block, 0.8 then 0.3."""

    def score(self, prompts, responses):
        return [[0.8, 0.3][: len(r.split("\n\n"))] for r in responses]


class StepRewards:
    """An algorithm's update of the rollouts and the train batch it becomes."""

    def __init__(
        self, algorithm, variant, ro, *, group_size, scorer, length, pad_id, completion_length=None, rm_coef=1.0
    ):
        options = dict(advantage_variant=variant, rm_coef=rm_coef) if algorithm == "grpo" else {}
        rl = RLConfig(algorithm=algorithm, algorithm_options=options, samples_per_prompt=group_size)
        algo = get_algorithm(algorithm)
        self.step_scores = (
            scorer.score([r["prompt"] for r in ro.records], [c.text for c in ro.completions])
            if algo.uses_prm(rl)
            else None
        )
        update = algo.update(ro, self.step_scores, rl)
        self.rewards = update.rewards
        self.batch = train_batch(
            ro,
            update,
            field=algo.batch_field,
            group_size=group_size,
            length=length,
            pad_id=pad_id,
            completion_length=completion_length,
        )


step_rewards = StepRewards


def _rollouts(tok):
    ids = [tok(t, add_special_tokens=False).input_ids + [tok.eos_token_id] for t in TEXTS]
    comps = [decode_with_offsets(tok, i, [tok.eos_token_id]) for i in ids]
    out = Outcomes(
        rewards=np.array([1.0, 0.0], np.float32),
        executable=np.array([True, True]),
        gold_ok=np.array([True, True]),
        results=((None, None), (None, None)),
    )
    clauses = [ClauseRewards("correct", (Clause("SELECT", 0, len(TEXTS[0]), 1.5),), frozenset(), 2), None]
    return Rollouts(
        prompt_ids=[[1, 2], [1, 2]],
        token_ids=ids,
        logprobs=[[-1.0] * len(i) for i in ids],
        records=[{"prompt": "q"}] * 2,
        completions=comps,
        outcomes=out,
        clauses=clauses,
        tokens=sum(map(len, ids)),
        sample_seconds=1.0,
        wait_seconds=0.0,
    )


def test_outcome_grpo_uses_per_sequence_z_scores(tok):
    sr = step_rewards("grpo_outcome", "paper", _rollouts(tok), group_size=2, scorer=None, length=64, pad_id=0)
    z = 1.0 / (np.std([1.0, 0.0], ddof=1) + 1e-4) * 0.5
    np.testing.assert_allclose(sr.batch.advantages, [z, -z], rtol=1e-6)
    assert sr.batch.token_rewards is None and sr.rewards.tolist() == [1.0, 0.0]


@pytest.mark.parametrize("algorithm,variant", [("grpo", "paper"), ("grpo", "released"), ("grpo_deepseekmath", "paper")])
def test_process_grpo_puts_step_advantages_on_completion_tokens(tok, algorithm, variant):
    ro = _rollouts(tok)
    sr = step_rewards(algorithm, variant, ro, group_size=2, scorer=FixedPRM(), length=64, pad_id=0)
    want_variant = variant if algorithm == "grpo" else "deepseekmath"
    expected = process_token_advantages(ro.completions, [[0.8, 0.3], [0.8]], [1.0, 0.0], 2, variant=want_variant)
    for row, exp in enumerate(expected):
        np.testing.assert_allclose(sr.batch.advantages[row, 2 : 2 + len(exp)], exp, rtol=1e-6)
        assert not sr.batch.advantages[row, 2 + len(exp) :].any() and not sr.batch.advantages[row, :2].any()
    pr = np.array([0.55, 0.8])
    np.testing.assert_allclose(sr.rewards, pr + [1.0, 0.0] if algorithm == "grpo" else pr, rtol=1e-6)
    assert sr.step_scores == [[0.8, 0.3], [0.8]]


def test_released_grpo_without_prm_weight_reads_no_prm_and_trains_on_what_the_prm_path_gives(tok):
    """rl.algorithm_options.rm_coef=0 with the released advantages (the released recipe) places no PRM value: the stage loads no
    PRM (``uses_prm`` False) and the update without step scores equals the update from PRM scores."""
    from rewardsql_jax.rl.algorithms.grpo import process_update

    ro = _rollouts(tok)
    rl = RLConfig(
        algorithm="grpo", algorithm_options=dict(advantage_variant="released", rm_coef=0.0), samples_per_prompt=2
    )
    grpo = get_algorithm("grpo")
    assert not grpo.uses_prm(rl)
    assert grpo.uses_prm(RLConfig(algorithm="grpo", algorithm_options=dict(advantage_variant="released", rm_coef=0.5)))
    # the paper's advantage ignores rm_coef
    assert grpo.uses_prm(RLConfig(algorithm="grpo", algorithm_options=dict(advantage_variant="paper", rm_coef=0.0)))
    assert not get_algorithm("grpo_outcome").uses_prm(rl) and not get_algorithm("reinforce_pp").uses_prm(rl)
    assert get_algorithm("dpo").uses_prm(rl) and get_algorithm("grpo_deepseekmath").uses_prm(rl)
    without = grpo.update(ro, None, rl)
    scores = FixedPRM().score(["q"] * 2, [c.text for c in ro.completions])
    with_prm = process_update(ro, scores, rl, variant="released", with_outcome=True)
    np.testing.assert_array_equal(without.rewards, with_prm.rewards)
    assert len(without.token_values) == len(with_prm.token_values) == 2
    for a, b in zip(without.token_values, with_prm.token_values):
        np.testing.assert_array_equal(a, b)
    assert np.count_nonzero(without.token_values[0]) == 1  # the outcome's advantage on the last token only
    sr = step_rewards("grpo", "released", ro, group_size=2, scorer=None, length=64, pad_id=0, rm_coef=0.0)
    assert sr.step_scores is None and sr.rewards.tolist() == [1.0, 0.0]


def test_reinforce_pp_fills_token_rewards_from_clauses(tok):
    ro = _rollouts(tok)
    sr = step_rewards("reinforce_pp", "paper", ro, group_size=2, scorer=None, length=64, pad_id=0)
    n0, n1 = len(ro.token_ids[0]), len(ro.token_ids[1])
    assert sr.batch.advantages is None
    assert (sr.batch.token_rewards[0, 2 : 2 + n0] == 1.5).all()  # one clause over the whole text (EOS included)
    assert (sr.batch.token_rewards[1, 2 : 2 + n1] == -1.5).all()  # no clauses: the execution-error reward
    assert sr.rewards.tolist() == [1.5, -1.5]


def test_loss_options_follow_the_config():
    name, opts = policy_loss(RLConfig(algorithm="grpo", clip_eps=0.3, kl_beta=0.01, temperature=0.7))
    assert name == "grpo" and opts == {"clip_eps": 0.3, "beta": 0.01, "kl": "k3", "temperature": 0.7}
    name, opts = policy_loss(RLConfig(algorithm="reinforce_pp", kl_beta=0.01))
    assert name == "reinforce_pp" and opts["kl_coef"] == 0.01 and opts["gamma"] == 0.0
    dpo = RLConfig(algorithm="dpo", algorithm_options={"beta": 0.3})
    assert policy_loss(dpo) == ("dpo", {"beta": 0.3, "temperature": 1.0})
    # n = 1 is EXPO-SQL's setting
    RunConfig(rl=RLConfig(algorithm="reinforce_pp", samples_per_prompt=1), mesh=MeshConfig(micro_batches=1))


def test_rl_loss_swaps_the_loss_and_its_options():
    rl = RLConfig(algorithm="grpo_outcome", loss="grpo", loss_options={"agg": "dr_grpo"}, clip_eps=0.3)
    assert policy_loss(rl) == (
        "grpo",
        {"clip_eps": 0.3, "beta": 0.001, "kl": "k3", "temperature": 1.0, "agg": "dr_grpo"},
    )
    # another loss of the family: only its own options (the grpo-specific ones are not passed to it)
    assert policy_loss(RLConfig(algorithm="grpo_outcome", loss="reinforce_pp", loss_options={"gamma": 1.0})) == (
        "reinforce_pp",
        {"temperature": 1.0, "gamma": 1.0},
    )


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(algorithm="grpoo"), "unknown rl.algorithm 'grpoo'.*grpo_outcome"),
        (dict(loss="nope"), "unknown loss 'nope'"),
    ],
)
def test_unknown_names_list_the_registered_ones(kw, match):
    with pytest.raises(ValueError, match=match):
        RLConfig(**kw)


@pytest.mark.parametrize(
    "rl,mesh,match",
    [
        (dict(algorithm="grpo_outcome", loss="dpo"), {}, "rl.loss='dpo' is a preference loss"),
        (dict(algorithm="reinforce_pp", loss="grpo"), {}, "only its own loss"),
        (dict(algorithm="grpo_outcome", loss="reinforce_pp"), {}, "fills advantages but the reinforce_pp loss reads"),
        (dict(algorithm="reinforce_pp", entropy_coef=0.001), {}, "no entropy bonus"),
        (dict(algorithm="grpo", samples_per_prompt=1), {}, "samples_per_prompt >= 2"),
        (dict(temperature=0.0), {}, "temperature > 0"),
        (dict(prompts_per_step=3), dict(micro_batches=2), "must divide rl.prompts_per_step=3"),
        (dict(prompts_per_step=4, mini_batches=2), dict(micro_batches=4), "must divide the prompts of one optimizer"),
        (dict(algorithm="grpo_outcome", algorithm_options={"x": 1}), {}, "takes no rl.algorithm_options"),
    ],
)
def test_cross_field_rl_checks_fail_when_the_config_is_built(rl, mesh, match):
    """Checked by RunConfig (after every override), before any stage runs."""
    with pytest.raises(ValueError, match=match):
        RunConfig(rl=RLConfig(**rl), mesh=MeshConfig(**mesh))
    RunConfig(rl=RLConfig(**rl), mesh=MeshConfig(**mesh), stages=("cold_start", "sft"))  # no rl stage: not checked


@pytest.mark.parametrize(
    "algorithm,field", [("grpo_outcome", "advantages"), ("grpo", "advantages"), ("reinforce_pp", "token_rewards")]
)
def test_shared_prefix_batch_holds_the_same_values_completion_aligned(tok, algorithm, field):
    ro = _rollouts(tok)
    kw = dict(group_size=2, scorer=FixedPRM(), length=64, pad_id=0)
    flat = step_rewards(algorithm, "paper", ro, **kw)
    grouped = step_rewards(algorithm, "paper", ro, completion_length=32, **kw)
    g = grouped.batch
    assert g.prompt_ids.shape == (1, 32) and g.completion_ids.shape == (1, 2, 32)
    np.testing.assert_array_equal(g.prompt_ids[0, -2:], [1, 2])
    np.testing.assert_array_equal(grouped.rewards, flat.rewards)
    f_values, g_values = getattr(flat.batch, field), getattr(g, field)
    for row, ids in enumerate(ro.token_ids):
        n = len(ids)
        np.testing.assert_array_equal(g.completion_ids[0, row, :n], ids)
        np.testing.assert_array_equal(g.old_logprobs[0, row, :n], flat.batch.old_logprobs[row, 2 : 2 + n])
        want = f_values[row] if f_values.ndim == 1 else f_values[row, 2 : 2 + n]
        got = g_values[0, row] if g_values.ndim == 2 else g_values[0, row, :n]
        np.testing.assert_array_equal(got, want)


def test_a_policy_gradient_loss_declares_the_batch_field_it_reads():
    assert [losses.spec(n).reads for n in ("grpo", "reinforce_pp")] == ["advantages", "token_rewards"]

    def my_returns_loss(logprobs, old_logprobs, token_rewards, mask):  # a plugin's REINFORCE-style loss
        return jnp.sum(token_rewards * mask), {}

    losses.register("my_returns_test_loss", family="policy_gradient", reduction="custom", override=True)(
        my_returns_loss
    )
    assert losses.spec("my_returns_test_loss").reads == "token_rewards"


def test_an_algorithm_without_update_cannot_be_registered():
    from rewardsql_jax.rl import OnlineAlgorithm, register_algorithm

    class Incomplete(OnlineAlgorithm):
        name = "incomplete_for_test"
        loss = "grpo"

    with pytest.raises(TypeError, match="update"):
        register_algorithm(Incomplete)
