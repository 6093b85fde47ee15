"""One full GRPO iteration (generate + execute SQL + score + update) of rewardsql_jax vs TRL's GRPOTrainer, CPU.

Both sides get the same tiny random Qwen2 (our weights saved with ``save_pretrained`` and loaded by
transformers), the same tokenizer (a BPE trained on the built-in benchmark), the same batch of prompts
(Reward-SQL prompts of built-in questions), the same group size, max new tokens, temperature, clip, KL
coefficient and learning rate, and the same reward function: execution match (BIRD rule) against the gold
SQL through one ``rewardsql_jax.sql.ExecutorPool`` per side (no result cache, so every query really runs).

Ours: ``sampling.generate`` -> decode -> pool execution -> ``rewards.group_advantages`` -> ``GroupedRLBatch``
-> ``training.make_train_step(graphdef, "grpo")``, as the RL stage runs it: the sampler prefills each prompt
once for its group, and the train step computes each prompt once for its G completions
(``models.shared_prefix``; same loss and gradients as the unshared rows, tested). ``--no-shared-prefix``
trains on plain ``RLBatch`` rows instead (prompt recomputed per completion, as TRL does). TRL: ``GRPOTrainer`` with ``per_device_train_batch_size =
prompts x group``, ``num_generations = group``, one generation per optimizer step, so one trainer step is one
iteration of the same size; it is timed from ``on_step_begin`` to ``on_step_end``. TRL's default activation
checkpointing is turned off (our step does not recompute activations either). Warm-up iterations
(our jit compiles, torch allocator) are excluded and our compile time is reported separately.

The same run then times the rollout generation alone on the same model and batch (fixed length, no EOS, so both
sides do equal work): ``transformers`` ``generate`` -- what TRL samples with when vLLM is off -- against our
sampler, so the two headline ratios (iteration vs TRL, sampler vs ``generate``) come from one run.

    python benchmarks/grpo_vs_trl.py            # 4 prompts x 8 samples, 64 new tokens, 3 timed iterations
    python benchmarks/grpo_vs_trl.py --quick    # 2 timed iterations, 32 new tokens
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

from rewardsql_jax.data.builtin import make_builtin_benchmark, train_bpe_tokenizer
from rewardsql_jax.data.prompts import reward_sql_prompt
from rewardsql_jax.data.schema import m_schema
from rewardsql_jax.models import ModelConfig, build_model, from_pretrained, save_pretrained
from rewardsql_jax.models.transformer import count_params
from rewardsql_jax.rewards import group_advantages
from rewardsql_jax.sampling import generate
from rewardsql_jax.sql import ExecutorPool, exec_match_batch
from rewardsql_jax.training.collate import grouped_rl_batch, rl_batch
from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
from rewardsql_jax.training.state import create_train_state
from rewardsql_jax.training.step import make_train_step


@dataclasses.dataclass(frozen=True)
class Setup:
    prompts: int
    group: int
    new_tokens: int
    iterations: int
    warmup: int
    lr: float = 1e-6
    beta: float = 0.001
    clip: float = 0.2
    temperature: float = 1.0
    hidden: int = 128
    layers: int = 2
    shared_prefix: bool = True


@dataclasses.dataclass(frozen=True)
class Timing:
    """Wall and CPU seconds (this process, all its threads; the SQL pool workers are separate processes on both
    sides and not counted) of each timed iteration, the warm-up wall time, and the mean reward."""

    name: str
    iteration_s: tuple
    cpu_s: tuple
    warmup_s: float
    mean_reward: float
    phases: str = ""

    @property
    def median_s(self) -> float:
        return statistics.median(self.iteration_s)

    @property
    def median_cpu_s(self) -> float:
        return statistics.median(self.cpu_s)


def execution_reward(pool, db_paths, sqls, golds) -> np.ndarray:
    """1.0 where the SQL's result set equals the gold's (BIRD EX rule), else 0.0 (errors, timeouts)."""
    ok = exec_match_batch(list(zip(db_paths, sqls, golds)), mode="bird", timeout_s=10.0, pool=pool)
    return np.asarray(ok, np.float32)


def make_task(root: Path, setup: Setup):
    """(tokenizer, model dir, prompt texts, db paths, gold SQL) for ``setup.prompts`` built-in questions."""
    train, _ = make_builtin_benchmark(root / "bench", n_train_dbs=2, n_test_dbs=1, questions_per_db=20)
    examples = train.examples[:: max(1, len(train.examples) // setup.prompts)][: setup.prompts]
    texts = [reward_sql_prompt(m_schema(e.db_path), e.question, e.evidence) for e in examples]
    corpus = [reward_sql_prompt(m_schema(e.db_path), e.question, e.evidence) + e.gold_sql for e in train.examples]
    tok = train_bpe_tokenizer(corpus, 2048, root / "tok")
    cfg = ModelConfig(
        model_type="qwen2",
        vocab_size=len(tok),
        hidden_size=setup.hidden,
        intermediate_size=3 * setup.hidden,
        num_hidden_layers=setup.layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=setup.hidden // 4,
        tie_word_embeddings=True,
        attention_bias=True,
        max_position_embeddings=4096,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.eos_token_id,
    )
    model_dir = root / "model"
    save_pretrained(build_model(cfg, seed=0), model_dir)
    tok.save_pretrained(model_dir)
    return tok, model_dir, cfg, texts, [e.db_path for e in examples], [e.gold_sql for e in examples]


def run_ours(tok, model_dir: Path, texts, dbs, golds, setup: Setup) -> Timing:
    model = from_pretrained(str(model_dir))
    state = create_train_state(
        model, make_optimizer(OptimizerConfig(learning_rate=setup.lr, max_grad_norm=1.0)), with_reference=True
    )
    step_fn = make_train_step(
        state.graphdef,
        "grpo",
        {"clip_eps": setup.clip, "beta": setup.beta, "kl": "k3", "temperature": setup.temperature},
    )
    prompt_ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    g, eos, pad = setup.group, tok.eos_token_id, tok.pad_token_id
    # One fixed row length for every iteration (no recompiles) that is as tight as TRL's per-batch padding; the RL
    # stage buckets it (training.collate.rl_length) to share compiles across prompt sets instead.
    prompt_len = max(map(len, prompt_ids))
    length = prompt_len + setup.new_tokens
    rows_prompt = [p for p in prompt_ids for _ in range(g)]
    rows_db, rows_gold = [d for d in dbs for _ in range(g)], [s for s in golds for _ in range(g)]
    rewards_seen, times, cpu, phases = [], [], [], []
    with ExecutorPool(workers=2, cache_size=0) as pool:
        for it in range(setup.warmup + setup.iterations):
            t0, c0 = time.perf_counter(), time.process_time()
            res = generate(
                state.model(),
                prompt_ids,
                max_new_tokens=setup.new_tokens,
                temperature=setup.temperature,
                num_samples=g,
                eos_token_id=eos,
                pad_id=pad,
                seed=it,
            )
            t1 = time.perf_counter()
            sqls = [
                s.strip()
                for s in tok.batch_decode(
                    [[t for t in row if t != eos] for row in res.tokens], skip_special_tokens=True
                )
            ]
            rewards = execution_reward(pool, rows_db, sqls, rows_gold)
            adv = np.asarray(group_advantages(rewards, g))
            if setup.shared_prefix:
                batch = grouped_rl_batch(
                    prompt_ids,
                    res.tokens,
                    res.logprobs,
                    group=g,
                    prompt_length=prompt_len,
                    completion_length=setup.new_tokens,
                    pad_id=pad,
                    advantages=adv,
                )
            else:
                batch = rl_batch(rows_prompt, res.tokens, res.logprobs, length=length, pad_id=pad, advantages=adv)
            t2 = time.perf_counter()
            state, metrics = step_fn(state, batch)
            jax.block_until_ready(metrics["loss"])
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            phases.append((t1 - t0, t2 - t1, times[-1] - (t2 - t0)))
            rewards_seen.append(float(rewards.mean()))
    gen, score, update = (statistics.median(p[i] for p in phases[setup.warmup :]) for i in range(3))
    return Timing(
        "rewardsql_jax",
        tuple(times[setup.warmup :]),
        tuple(cpu[setup.warmup :]),
        sum(times[: setup.warmup]),
        float(np.mean(rewards_seen)),
        f"generate {gen:.2f} s, execute+score {score:.2f} s, update {update:.2f} s",
    )


def run_trl(tok, model_dir: Path, texts, dbs, golds, setup: Setup, out_dir: Path) -> Timing:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    pool = ExecutorPool(workers=2, cache_size=0)
    rewards_seen: list[float] = []

    def exec_reward(prompts, completions, db_path, gold_sql, **_):
        r = execution_reward(pool, db_path, [c.strip() for c in completions], gold_sql)
        rewards_seen.append(float(r.mean()))
        return r.tolist()

    class Clock(TrainerCallback):
        def __init__(self):
            self.times, self.cpu, self._t, self._c = [], [], 0.0, 0.0

        def on_step_begin(self, args, state, control, **kw):
            self._t, self._c = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kw):
            self.times.append(time.perf_counter() - self._t)
            self.cpu.append(time.process_time() - self._c)

    rows = setup.prompts * setup.group
    config = GRPOConfig(
        output_dir=str(out_dir),
        per_device_train_batch_size=rows,
        gradient_accumulation_steps=1,
        num_generations=setup.group,
        steps_per_generation=1,
        num_iterations=1,
        max_completion_length=setup.new_tokens,
        temperature=setup.temperature,
        top_p=1.0,
        learning_rate=setup.lr,
        lr_scheduler_type="constant",
        max_grad_norm=1.0,
        beta=setup.beta,
        epsilon=setup.clip,
        loss_type="grpo",
        scale_rewards="group",
        max_steps=setup.warmup + setup.iterations,
        logging_steps=10_000,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        fp16=False,
        seed=0,
        dataloader_num_workers=0,
        log_completions=False,
        disable_dropout=True,
        # TRL defaults to activation checkpointing; ours keeps activations, so compare like with like
        gradient_checkpointing=False,
    )
    data = Dataset.from_list([{"prompt": t, "db_path": d, "gold_sql": s} for t, d, s in zip(texts, dbs, golds)])
    clock = Clock()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[exec_reward],
        args=config,
        train_dataset=data,
        processing_class=tok,
        callbacks=[clock],
    )
    try:
        trainer.train()
    finally:
        pool.close()
    return Timing(
        "TRL GRPOTrainer",
        tuple(clock.times[setup.warmup :]),
        tuple(clock.cpu[setup.warmup :]),
        sum(clock.times[: setup.warmup]),
        float(np.mean(rewards_seen)) if rewards_seen else float("nan"),
    )


def run_sampler_pair(tok, model_dir: Path, texts, setup: Setup) -> tuple[float, float]:
    """Median wall seconds of generating this iteration's rollouts alone: ``prompts x group`` rows of exactly
    ``new_tokens`` tokens (no EOS on either side, so the work is equal), T = ``setup.temperature``, with
    ``transformers`` ``generate`` (TRL's generation path without vLLM) and with ``sampling.generate``.
    Returns ``(hf_s, ours_s)``; each side warms up once, then ``setup.iterations`` timed calls."""
    import torch
    from transformers import AutoModelForCausalLM

    prompt_ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    width, pad = max(map(len, prompt_ids)), tok.pad_token_id
    ids = torch.full((len(prompt_ids), width), pad, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, p in enumerate(prompt_ids):  # left padding, as for any decoder-only generate
        ids[i, width - len(p) :], attn[i, width - len(p) :] = torch.tensor(p), 1
    hf_model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    ours_model = from_pretrained(str(model_dir))
    n = setup.new_tokens

    def hf(seed):
        torch.manual_seed(seed)
        with torch.inference_mode():
            return hf_model.generate(
                input_ids=ids,
                attention_mask=attn,
                max_new_tokens=n,
                min_new_tokens=n,
                do_sample=True,
                temperature=setup.temperature,
                top_k=0,
                top_p=1.0,
                num_return_sequences=setup.group,
                pad_token_id=pad,
                eos_token_id=None,
            )

    def ours(seed):
        return generate(
            ours_model,
            prompt_ids,
            max_new_tokens=n,
            temperature=setup.temperature,
            num_samples=setup.group,
            pad_id=pad,
            seed=seed,
        )

    medians = []
    for fn in (hf, ours):
        fn(0)  # warm-up: our jit compile, torch's allocator
        times = []
        for it in range(setup.iterations):
            t0 = time.perf_counter()
            fn(it + 1)
            times.append(time.perf_counter() - t0)
        medians.append(statistics.median(times))
    return medians[0], medians[1]


def machine() -> str:
    import torch
    import trl

    cpu = next(
        (ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
        platform.processor(),
    )
    return (
        f"{cpu}, {os.cpu_count()} cores; jax {jax.__version__} ({jax.default_backend()}), torch {torch.__version__}, "
        f"trl {trl.__version__}"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 timed iterations, 32 new tokens")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=None)
    ap.add_argument("--iterations", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument(
        "--no-shared-prefix",
        action="store_true",
        help="train on unshared prompt+completion rows (RLBatch) instead of GroupedRLBatch",
    )
    args = ap.parse_args(argv)
    setup = Setup(
        prompts=args.prompts,
        group=args.group,
        new_tokens=args.new_tokens or (32 if args.quick else 64),
        iterations=args.iterations or (2 if args.quick else 3),
        warmup=args.warmup,
        shared_prefix=not args.no_shared_prefix,
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tok, model_dir, cfg, texts, dbs, golds = make_task(root, setup)
        n_prompt = [len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
        ours = run_ours(tok, model_dir, texts, dbs, golds, setup)
        trl_t = run_trl(tok, model_dir, texts, dbs, golds, setup, root / "trl")
        hf_gen_s, ours_gen_s = run_sampler_pair(tok, model_dir, texts, setup)
    n_params = count_params(build_model(cfg))
    print(f"GRPO iteration (generate + execute SQL + reward + update), CPU: {machine()}")
    print(
        f"model: Qwen2 {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, vocab {cfg.vocab_size} "
        f"({n_params / 1e6:.2f}M params), fp32; {setup.prompts} prompts x {setup.group} samples, prompt "
        f"{min(n_prompt)}-{max(n_prompt)} tokens, {setup.new_tokens} new tokens, T={setup.temperature}, "
        f"beta={setup.beta}, clip={setup.clip}; {setup.iterations} timed iterations after {setup.warmup} warm-up; "
        f"ours: {'shared-prefix GroupedRLBatch' if setup.shared_prefix else 'unshared RLBatch rows'}"
    )
    print(
        f"{'':18}{'median wall s':>14}{'median CPU s':>14}{'wall s per iteration':>34}{'warm-up s':>11}"
        f"{'mean reward':>13}"
    )
    for t in (ours, trl_t):
        its = ", ".join(f"{x:.2f}" for x in t.iteration_s)
        print(f"{t.name:18}{t.median_s:14.3f}{t.median_cpu_s:14.3f}{its:>34}{t.warmup_s:11.1f}{t.mean_reward:13.3f}")
    print(f"ours per phase (median wall): {ours.phases}")
    print(
        f"speed-up TRL / ours: wall {trl_t.median_s / ours.median_s:.2f}x, CPU {trl_t.median_cpu_s / ours.median_cpu_s:.2f}x "
        f"(goal >= 2x); our warm-up includes the jit compiles of sampler and train step; CPU = this process's "
        f"threads (robust to other load on the host), SQL pool workers excluded on both sides"
    )
    rows = setup.prompts * setup.group
    print(
        f"sampler alone, same model and rollout batch ({rows} rows x exactly {setup.new_tokens} tokens, no EOS): "
        f"transformers generate {hf_gen_s:.3f} s ({rows * setup.new_tokens / hf_gen_s:.0f} tok/s), ours "
        f"{ours_gen_s:.3f} s ({rows * setup.new_tokens / ours_gen_s:.0f} tok/s): {hf_gen_s / ours_gen_s:.2f}x "
        f"(goal >= 3x)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
