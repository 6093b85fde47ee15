"""What the RL stage reports: the online summary (curves, first vs last OR rate, phase times, throughput) and the
learning-curve plot ``rl/learning_curve.png``."""

from __future__ import annotations

import numpy as np

from rewardsql_jax.rl import get_algorithm, options_dict, policy_loss


def smoothed(values, window: int) -> np.ndarray:
    """Trailing mean over ``window`` steps (fewer at the start), the curve a reader can see a trend in."""
    c = np.concatenate([[0.0], np.cumsum(np.asarray(values, np.float64))])
    end = np.arange(1, len(c))
    begin = np.maximum(end - window, 0)
    return (c[end] - c[begin]) / (end - begin)


def plot_learning_curve(history: list, path, *, title: str = "rl") -> None:
    """OR rate and reward per RL step (points) with their trailing means (lines) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in history]
    window = max(1, len(history) // 8)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for ax, key, label in zip(axes, ("or_rate", "reward"), ("OR rate of the rollouts", "mean reward")):
        values = [h[key] for h in history]
        ax.plot(steps, values, ".", alpha=0.4, label="per step")
        ax.plot(steps, smoothed(values, window), "-", label=f"mean of the last {window}")
        ax.set_xlabel("RL step")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylim(-0.02, 1.02)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def online_metrics(rl, history: list, *, resumed_from: int, dropped: int) -> dict:
    """Summary of the online run: curves, OR rate of the first vs last steps, time and rollout throughput."""
    k = max(1, len(history) // 4)
    seconds = sum(h["step_seconds"] for h in history)
    sample_s = sum(h["sample_seconds"] for h in history)
    return {
        "algorithm": rl.algorithm,
        "loss_name": policy_loss(rl)[0],
        "algorithm_options": options_dict(get_algorithm(rl.algorithm).options(rl)),  # with the defaults
        "uses_prm": get_algorithm(rl.algorithm).uses_prm(rl),  # False: no PRM was loaded or run
        "steps": len(history),
        "resumed_from_step": resumed_from,
        "dropped_too_long": dropped,
        "reward_curve": [(h["step"], h["reward"]) for h in history],
        "or_rate_curve": [(h["step"], h["or_rate"]) for h in history],
        "or_rate_first": float(np.mean([h["or_rate"] for h in history[:k]])),
        "or_rate_last": float(np.mean([h["or_rate"] for h in history[-k:]])),
        "reward_first": float(np.mean([h["reward"] for h in history[:k]])),
        "reward_last": float(np.mean([h["reward"] for h in history[-k:]])),
        "final_loss": history[-1]["loss"],
        "final_kl": history[-1]["kl"],
        "nonfinite_steps": sum(not h["loss_is_finite"] for h in history),
        "seconds": seconds,
        "rollout_tokens": sum(h["tokens"] for h in history),
        "rollout_tokens_per_s": sum(h["tokens"] for h in history) / max(sample_s, 1e-9),
        # without the first step of this history, whose sampling time includes the sampler's compilation
        "rollout_tokens_per_s_warm": (
            sum(h["tokens"] for h in history[1:]) / max(sum(h["sample_seconds"] for h in history[1:]), 1e-9)
        ),
        "host_wait_seconds": sum(h["host_wait_seconds"] for h in history),
        "phase_seconds": {
            p: sum(h.get("phase_seconds", {}).get(p, 0.0) for h in history)
            for p in ("generate", "execute", "reward", "advantage", "update")
        },
        # share of the steps' wall time (after the first, which compiles) with no sampling, PRM scoring or
        # training running: host decoding, batch assembly and waiting for SQL results
        "device_idle_fraction": float(
            np.mean(
                [h["device_idle_fraction"] for h in history[1:]]
                if len(history) > 1
                else [history[0]["device_idle_fraction"]]
            )
        ),
    }
