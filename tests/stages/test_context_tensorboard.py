"""RunContext.log / finish: every record goes to log.jsonl, stepped records and final metrics to TensorBoard."""

import json

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rewardsql_jax.stages.context import RunContext
from rewardsql_jax.stages.run_config import RunConfig


def read_scalars(path) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(path))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_run_context_writes_jsonl_and_tensorboard(tmp_path, capsys):
    ctx = RunContext.create(RunConfig(run_dir=str(tmp_path / "run")))
    try:
        ctx.log({"stage": "sft", "step": 0, "loss": 2.5, "grad_norm": 1.0})
        ctx.log({"stage": "sft", "step": 10, "loss": 0.75, "grad_norm": 0.5})
        ctx.log({"stage": "rl", "resumed_at_step": 4})  # no step: JSONL only
        ctx.log({"stage": "rl", "step": 4, "reward": 0.5, "loss_is_finite": True, "tokens": 96})
        ctx.finish(
            "sft",
            {"steps": 11, "final_loss": 0.75, "loss_curve": [[0, 2.5], [10, 0.75]], "heldout": {"accuracy": 0.875}},
        )
    finally:
        ctx.close()
    run = tmp_path / "run"
    records = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert len(records) == 5 and records[2] == {"stage": "rl", "resumed_at_step": 4}
    assert records[4]["loss_curve"] == [[0, 2.5], [10, 0.75]]  # nothing is lost from the JSONL
    assert read_scalars(run / "tensorboard" / "sft") == {
        "loss": [(0, 2.5), (10, 0.75)],
        "grad_norm": [(0, 1.0), (10, 0.5)],
        "final/steps": [(10, 11.0)],
        "final/final_loss": [(10, 0.75)],
        "final/heldout/accuracy": [(10, 0.875)],
    }
    assert read_scalars(run / "tensorboard" / "rl") == {"reward": [(4, 0.5)], "tokens": [(4, 96.0)]}
    out = capsys.readouterr().out
    assert "[sft] step 10: loss=0.75 grad_norm=0.5" in out and "[rl] step 4: reward=0.5 tokens=96" in out
