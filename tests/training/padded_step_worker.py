"""Run by tests/training/test_padded_step.py in a fresh process with 8 simulated CPU devices.

Batches whose rows do not divide the mesh's data x fsdp devices (issue 21 item 5): every loss family's train
step on a 4- or 8-way mesh (padded rows) against the same batch on one device (no mesh, no padding), and the
sampler and the PRM scorer on a sharded model against the unsharded ones. Prints one JSON report on stdout.
"""

import os

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import json
import sys
from pathlib import Path

import jax
import numpy as np

from rewardsql_jax.models import build_model
from rewardsql_jax.models.sharding import make_mesh, shard_model
from rewardsql_jax.sampling import generate
from rewardsql_jax.training.collate import grouped_rl_batch
from rewardsql_jax.training.padding import pad_batch
from rewardsql_jax.training.sharding import shard_state
from rewardsql_jax.training.step import make_train_step

sys.path.insert(0, str(Path(__file__).parent))
from _train_tiny import V, preference_batch, prm_batch, rl_batch, rs_batch, sft_batch, tiny_config, tiny_state

MESHES = {"d2f2t2": dict(data=2, fsdp=2, tensor=2), "f8": dict(data=1, fsdp=8, tensor=1)}


def _grouped(prompts: int = 3, group: int = 2):
    """A GroupedRLBatch (the RL stage's shared-prefix GRPO batch) of ``prompts`` prompts x ``group`` samples."""
    rng = np.random.default_rng(5)
    heads = [list(rng.integers(1, V, n)) for n in (5, 9, 3, 7, 4)[:prompts]]
    lengths = rng.integers(1, 7, prompts * group)
    completions = [list(rng.integers(1, V, n)) for n in lengths]
    logprobs = [list(-4.9 + 0.3 * rng.normal(size=n)) for n in lengths]
    adv = rng.normal(size=prompts * group).astype(np.float32)
    return grouped_rl_batch(
        heads, completions, logprobs, group=group, prompt_length=12, completion_length=8, pad_id=0, advantages=adv
    )


# name -> (loss, options, batch, reference in the state, micro_batches)
CASES = {
    "sft_token_mean": ("sft", {}, sft_batch(seed=1, b=6), False, 1),
    "sft_sequence_mean_micro2": ("sft", {"reduction": "sequence_mean"}, sft_batch(seed=2, b=6), False, 2),
    "prm": ("prm", {"tag_token_ids": (3, 7)}, prm_batch(seed=3, b=5), False, 1),
    "grpo_agg_grpo_kl": ("grpo", {"beta": 0.04, "agg": "grpo"}, rl_batch(seed=4, b=6, with_ref=False), True, 1),
    "grpo_dr_grpo": ("grpo", {"agg": "dr_grpo"}, rl_batch(seed=5, b=3, per_token=False), False, 1),
    "grpo_grouped": ("grpo", {"beta": 0.04}, _grouped(), True, 1),
    "reinforce_pp": ("reinforce_pp", {"kl_coef": 0.01}, rl_batch(seed=6, b=6, with_ref=False), True, 1),
    "dpo": ("dpo", {"beta": 0.1}, preference_batch(seed=7, b=3), True, 1),
    "rs": ("rs", {"threshold": 0.5}, rs_batch(seed=8, b=6), False, 2),
}


def _step(mesh, loss, opts, batch, reference, micro_batches):
    state = tiny_state(seed=0, with_reference=reference)
    if mesh is not None:
        state = shard_state(state, mesh)
    before = [np.asarray(x) for x in jax.tree.leaves(state.params)]
    step = make_train_step(state.graphdef, loss, opts, mesh=mesh, micro_batches=micro_batches)
    state, metrics = step(state, batch)
    params = [np.asarray(x) for x in jax.tree.leaves(state.params)]
    moved = max(float(np.max(np.abs(x - y))) for x, y in zip(params, before))
    return params, {k: float(v) for k, v in metrics.items()}, moved


def _compare(a, b):
    """Largest parameter difference after the step, largest metric difference (relative to max(1, |value|):
    DPO's summed log-probs are ~40), the loss difference, and how far the step moved the parameters."""
    (pa, ma, moved), (pb, mb, _) = a, b
    return {
        "max_param_diff": max(float(np.max(np.abs(x - y))) for x, y in zip(pa, pb)),
        "max_metric_diff": max(abs(ma[k] - mb[k]) / max(1.0, abs(ma[k])) for k in ma),
        "same_metric_names": sorted(ma) == sorted(mb),
        "loss_diff": abs(ma["loss"] - mb["loss"]),
        "loss": ma["loss"],
        "moved": moved,
        "finite": ma["loss_is_finite"] == mb["loss_is_finite"] == 1.0,
    }


# The 8-way mesh runs the layouts whose padding differs most (micro-batches, prompt groups, preference pairs).
ON_F8 = ("sft_sequence_mean_micro2", "grpo_grouped", "dpo")


def train_cases():
    out, single = {}, {}
    for mesh_name, axes in MESHES.items():
        mesh = make_mesh(**axes)
        for name, (loss, opts, batch, reference, m) in CASES.items():
            if mesh_name == "f8" and name not in ON_F8:
                continue
            if name not in single:
                single[name] = _step(None, loss, opts, batch, reference, m)
            padded = _step(mesh, loss, opts, batch, reference, m)
            row = _compare(single[name], padded)
            row["rows"], row["shards"] = batch.batch_size, mesh.shape["data"] * mesh.shape["fsdp"]
            out[f"{mesh_name}/{name}"] = row
    # control: the same masked padding trained as if its rows were real changes the row-averaged loss (so the
    # comparisons above would see padding that leaked into the loss)
    mesh = make_mesh(**MESHES["d2f2t2"])
    loss, opts, batch, reference, m = CASES["grpo_agg_grpo_kl"]
    leaked = _step(mesh, loss, opts, pad_batch(batch, m, 4), reference, m)
    out["control_padding_as_rows"] = _compare(single["grpo_agg_grpo_kl"], leaked)
    return out


# (mesh, number of prompts, sampler options): 3 prompts on 4 devices and 1 prompt on 8, greedy and sampled
SAMPLER_CASES = (
    ("d2f2t2", 3, dict(temperature=0.0)),
    ("d2f2t2", 3, dict(temperature=1.0, num_samples=2, seed=3, top_p=0.9)),
    ("f8", 1, dict(temperature=1.0, num_samples=2, seed=3, top_p=0.9)),
    ("f8", 3, dict(temperature=0.0)),
)


def sampler_cases():
    cfg = tiny_config(vocab_size=V)
    prompts = [[5, 9, 17, 3], [8, 2], [40, 41, 42, 43, 44, 45], [7]]
    out, unsharded = {}, build_model(cfg, seed=1)
    for mesh_name, n_prompts, kw in SAMPLER_CASES:
        args = dict(max_new_tokens=6, eos_token_id=[11, 12], **kw)
        ref = generate(unsharded, prompts[:n_prompts], **args)
        model = shard_model(build_model(cfg, seed=1), make_mesh(**MESHES[mesh_name]))
        got = generate(model, prompts[:n_prompts], **args)
        lp_diff = max((abs(a - b) for ra, rb in zip(ref.logprobs, got.logprobs) for a, b in zip(ra, rb)), default=0.0)
        out[f"{mesh_name}/{n_prompts}/T{kw['temperature']}"] = {
            "same_tokens": ref.tokens == got.tokens,
            "rows": [len(ref.tokens), len(got.tokens)],
            "same_finished": ref.finished == got.finished,
            "same_lengths": ref.prompt_lengths == got.prompt_lengths,
            "same_steps": ref.steps == got.steps,
            "max_logprob_diff": lp_diff,
            "params_sharded": not model.embed_tokens.get_value().sharding.is_fully_replicated,
        }
    return out


def _step_tokenizer():
    """A byte-level BPE whose step tag " и" and labels " +" / " -" are single tokens (what the PRM scorer reads)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    texts = ["SELECT name FROM singer WHERE age > 20", "WITH a AS (SELECT id FROM t) SELECT * FROM a"] * 5
    trainer = trainers.BpeTrainer(
        vocab_size=200, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    t.train_from_iterator(texts, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=t, eos_token="<eos>")
    tok.add_tokens([" и", " +", " -"])
    return tok


def prm_scorer_cases():
    """The PRM scorer on a model sharded over 8 devices (rows spread over them, the batch rounded up to a
    multiple of 8) against the unsharded scorer."""
    from rewardsql_jax.models.sharding import placement
    from rewardsql_jax.rewards.prm_scoring import PRMScorer

    tok = _step_tokenizer()
    cfg = tiny_config(vocab_size=len(tok))
    prompts = ["question: singers over 20\n"] * 3
    responses = ["SELECT name\n\nFROM singer", "WITH a AS (SELECT id FROM t)\n\nSELECT * FROM a\n\nx", "SELECT 1"]
    ref = PRMScorer(build_model(cfg, seed=2), tok, batch_size=3).score(prompts, responses)
    model = shard_model(build_model(cfg, seed=2), make_mesh(**MESHES["f8"]))
    scorer = PRMScorer(model, tok, batch_size=3)
    got = scorer.score(prompts, responses)
    return {
        "steps": [[len(a), len(b)] for a, b in zip(ref, got)],
        "max_diff": max(abs(x - y) for a, b in zip(ref, got) for x, y in zip(a, b)),
        "batch_size": scorer.batch_size,
        "placement": placement(scorer.model),
    }


def main():
    assert jax.device_count() == 8, jax.devices()
    print(json.dumps({"train": train_cases(), "sampler": sampler_cases(), "prm_scorer": prm_scorer_cases()}))


if __name__ == "__main__":
    main()
