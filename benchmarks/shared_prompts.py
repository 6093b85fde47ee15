"""What the sampler and the PRM scorer save on prompts that share a database's schema (issue 31), measured on
SmolLM2-135M-Instruct and the default's real held-out prompts, each arm beside the one without the saving, in
one run (arms alternate; the best of ``--repeats`` calls after a warm-up call that compiles):

- greedy, ``--prompts`` questions of one database, 128 new tokens: ``generate(share_prefix=False)`` (every
  prompt prefilled whole, read whole at every decode step) vs the default (the schema prefilled once and read
  once per decode step, ``DecodeState.common_cache``);
- T = 0.7, 16 questions x 8 samples: neither saving / the shared schema / the shared schema and dropping ended
  rows between 16-step segments (``sampler.keep_rows``);
- PRM step scores of 8 candidates for each of 4 questions: each row whole vs the prompt run once per question.

    python benchmarks/shared_prompts.py            # ~10 min on a 2-core CPU
    python benchmarks/shared_prompts.py --policy runs/default/sft/policy   # a policy that ends its SQL with EOS

Dropping ended rows only pays when rows end at different times: the instruct model out of the wheel, given the
raw M-Schema prompt, rarely stops within 128 tokens; an SFT policy (``--policy``) ends its SQL with EOS.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_timing import machine
from _default_135m_data import default_data

from rewardsql_jax.config import load_config
from rewardsql_jax.data.tokenizer import load_tokenizer
from rewardsql_jax.models.pretrained import from_pretrained
from rewardsql_jax.rewards import prm_scoring
from rewardsql_jax.sampling import generate, sampler
from rewardsql_jax.sampling.inputs import pad_id

# name -> (share_prefix, drop ended rows)
ARMS = {"each prompt whole": (False, False), "schema once": (True, False), "schema once + drop ended": (True, True)}


def best_time(fn, repeats: int) -> float:
    fn()  # compiles
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def sampling_arms(model, prompts, eos, pad, *, samples: int, temperature: float, arms: dict, repeats: int):
    """Seconds of each arm (``name -> (share_prefix, drop_ended_rows)``) on the same prompts and seeds."""
    out = {}
    for name, (share, drop) in arms.items():
        sampler.MIN_ROWS = 8 if drop else 10**9  # never shrink the batch when ``drop`` is off

        def run(share=share):
            return generate(
                model,
                prompts,
                max_new_tokens=128,
                temperature=temperature,
                num_samples=samples,
                seed=list(range(len(prompts))),
                eos_token_id=eos,
                pad_id=pad,
                share_prefix=share,
            )

        out[name] = best_time(run, repeats)
    sampler.MIN_ROWS = 8
    return out


def prm_arms(model, tok, texts_by_prompt, repeats: int) -> dict:
    scorer = prm_scoring.PRMScorer(model, tok)
    share = prm_scoring.shared_prefix_length

    def score_all():
        return [scorer.score([p] * len(ts), ts) for p, ts in texts_by_prompt]

    out = {"prompt once per question": best_time(score_all, repeats)}
    prm_scoring.shared_prefix_length = lambda enc: 0
    try:
        out["each row whole"] = best_time(score_all, repeats)
    finally:
        prm_scoring.shared_prefix_length = share
    return out


def report(title: str, times: dict, base: str) -> None:
    print(f"\n{title}")
    for name, t in times.items():
        print(f"  {name:34s} {t:7.2f} s   {times[base] / t:5.2f}x")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/default.py")
    ap.add_argument("--prompts", type=int, default=32, help="greedy prompts (one database)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--policy", default="", help="a saved policy directory (default: the config's model.path)")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    print(machine())
    print(f"policy: {args.policy or cfg.model.path}")
    tok = load_tokenizer(cfg.model.path)
    with tempfile.TemporaryDirectory() as tmp:
        data = default_data(cfg, tok, Path(tmp))
    model = from_pretrained(args.policy or cfg.model.path)
    eos, pad = [tok.eos_token_id], pad_id(tok)
    prompts = data.eval_prompts  # the held-out questions, a database's questions side by side
    greedy = sampling_arms(
        model,
        prompts[: args.prompts],
        eos,
        pad,
        samples=1,
        temperature=0.0,
        arms=ARMS,
        repeats=args.repeats,
    )
    report(f"greedy, {args.prompts} prompts of one database, 128 new tokens", greedy, "each prompt whole")
    sampled = sampling_arms(
        model,
        prompts[:16],
        eos,
        pad,
        samples=8,
        temperature=0.7,
        arms=ARMS,
        repeats=args.repeats,
    )
    report("T = 0.7, 16 prompts x 8 samples, 128 new tokens", sampled, "each prompt whole")
    texts = [tok.decode(p, skip_special_tokens=True) for p in prompts[:4]]
    candidates = [tok.decode(t[:-1]) for t in data.rl_targets[:8]]
    report(
        "PRM step scores, 4 questions x 8 candidates",
        prm_arms(model, tok, [(p, candidates) for p in texts], args.repeats),
        "each row whole",
    )


if __name__ == "__main__":
    main()
