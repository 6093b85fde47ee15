"""Part 1 + 2 of benchmarks/pretrained_135m.py: our sampler against transformers ``generate``, greedy and at a
temperature with N samples a prompt, on the same prompts, batch and new tokens."""

from __future__ import annotations

import numpy as np
import torch
from _bench_timing import alternate, compile_s, ratio
from _default_135m_data import left_pad, lengths, spread

from rewardsql_jax.sampling import generate


def bench_sampler(args, models, data, pad: int, temperature: float) -> list[dict]:
    """Rows of the sampling table: greedy on ``--prompts`` test prompts, T=``temperature`` on ``--sample-prompts`` RL
    prompts x ``--samples``, for every dtype of ``models`` (dtype -> (ours, transformers))."""
    n = args.new_tokens
    greedy = [data.eval_prompts[i] for i in spread(len(data.eval_prompts), args.prompts)]
    sampled = [data.rl_prompts[i] for i in spread(len(data.rl_prompts), args.sample_prompts)]
    print(f"greedy prompts: {len(greedy)} test questions, {lengths(greedy)}")
    print(f"T={temperature} prompts: {len(sampled)} RL questions x {args.samples} samples, {lengths(sampled)}")
    cases = [
        (f"greedy {len(greedy)}", greedy, 1, 0.0),
        (f"T={temperature} {len(sampled)}x{args.samples}", sampled, args.samples, temperature),
    ]
    rows = []
    for dtype, (ours_model, hf_model) in models.items():
        for label, prompts, samples, temp in cases:
            ids, attn = left_pad(prompts, pad)
            kw = (
                dict(do_sample=True, temperature=temp, top_k=0, top_p=1.0, num_return_sequences=samples)
                if temp
                else dict(do_sample=False)
            )

            def hf_run(k, kw=kw, ids=ids, attn=attn, hf_model=hf_model):
                torch.manual_seed(0)
                with torch.inference_mode():
                    out = hf_model.generate(
                        input_ids=ids, attention_mask=attn, max_new_tokens=k, min_new_tokens=k, pad_token_id=pad, **kw
                    )
                return out[:, ids.shape[1] :].numpy()

            def ours_run(prompts=prompts, samples=samples, temp=temp, ours_model=ours_model):
                res = generate(
                    ours_model,
                    prompts,
                    max_new_tokens=n,
                    temperature=temp,
                    num_samples=samples,
                    eos_token_id=None,
                    pad_id=pad,
                )
                return np.asarray(res.tokens)

            times, _, outs = alternate(
                {"ours": ours_run, "hf": lambda hf_run=hf_run: hf_run(n)},
                args.iters,
                warm={"hf": lambda hf_run=hf_run: hf_run(2)},  # transformers' warm-up: allocator, kernels
            )
            ours_tok, hf_tok = outs["ours"], outs["hf"]
            rows_out = len(prompts) * samples
            assert ours_tok.shape == hf_tok.shape == (rows_out, n), (ours_tok.shape, hf_tok.shape)
            rows.append(
                dict(
                    case=label,
                    dtype=dtype,
                    rows=rows_out,
                    tokens=rows_out * n,
                    ours=times["ours"],
                    hf=times["hf"],
                    same=float(np.mean(ours_tok == hf_tok)) if not temp else float("nan"),
                )
            )
            print(f"  done: {label} {dtype}", flush=True)
    return rows


def print_sampler(rows, single_thread: bool, new_tokens: int):
    print(f"\nsampling, {new_tokens} new tokens a row, tok/s = rows x new tokens / median seconds of a call")
    cpu_cols = f"{'HF cpu s':>9}{'ours cpu s':>11}{'cpu ratio':>10}" if single_thread else ""
    print(
        f"{'case':<14}{'dtype':<10}{'rows':>5}{'HF tok/s':>10}{'ours tok/s':>11}{'ours/HF':>9}"
        f"{'HF s':>8}{'ours s':>8}{'compile s':>10}{'same tokens':>12}" + cpu_cols
    )
    for r in rows:
        o, h = r["ours"], r["hf"]
        same = "sampled" if r["same"] != r["same"] else f"{100 * r['same']:.0f}%"
        line = (
            f"{r['case']:<14}{r['dtype']:<10}{r['rows']:>5}{r['tokens'] / h.wall:>10.1f}{r['tokens'] / o.wall:>11.1f}"
            f"{ratio(h.wall, o.wall):>9}{h.wall:>8.2f}{o.wall:>8.2f}{compile_s(o):>10.1f}{same:>12}"
        )
        if single_thread:
            line += f"{h.cpu:>9.2f}{o.cpu:>11.2f}{ratio(h.cpu, o.cpu):>10}"
        print(line)
