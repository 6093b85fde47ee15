"""Worker of test_mesh.py: SQLConductor's SFT and policy server on a mesh of 2 simulated CPU devices against one
device (XLA_FLAGS must precede the jax import). Prints one JSON line."""

import os

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"

import json
import sys
import tempfile

import jax
import numpy as np
from flax import nnx

from rewardsql_jax.conductor.actions.lm import ModelServer
from rewardsql_jax.conductor.training.mesh import trainer_mesh
from rewardsql_jax.conductor.training.sft import SFTSample, new_model, train_conductor_sft
from rewardsql_jax.conductor.training.tokenizer import build_tokenizer, stop_ids
from rewardsql_jax.stages.run_config import MeshConfig, ModelConfigSection
from rewardsql_jax.training.collate import encode_pair

SHAPE = ModelConfigSection(
    vocab_size=330, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1, max_len=256
)


def main() -> int:
    texts = [
        "question: How many singers are from Brazil?\n<reasoning>Write a first SQL query.</reasoning>"
        "<call>generate_sql()</call><results>sql: SELECT COUNT(*) FROM singer\nok, 1 rows</results>"
    ] * 20
    tok = build_tokenizer(texts, 320, tempfile.mkdtemp())
    samples = [
        SFTSample(*encode_pair(tok, f"question: q{i}?\n", "<reasoning>x</reasoning><call>generate_sql()</call>"))
        for i in range(4)
    ]
    mesh = trainer_mesh(MeshConfig(fsdp=-1))

    def sft(mesh, micro_batches=1):
        return train_conductor_sft(
            new_model(SHAPE, tok, 0),
            samples,
            steps=3,
            batch_size=4,
            lr=1e-2,
            pad_id=tok.pad_token_id,
            warmup_steps=1,
            mesh=mesh,
            micro_batches=micro_batches,
        )[0]

    one, sharded = sft(None), sft(mesh, micro_batches=2)
    params = [jax.tree.leaves(nnx.state(m, nnx.Param)) for m in (one, sharded)]
    diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(*params))
    served = []
    for model in (one, sharded):
        server = ModelServer(model, stop_ids=stop_ids(tok), pad_id=tok.pad_token_id, max_new_tokens=8, max_len=256)
        served.append([toks for toks, _, _ in server.serve([samples[0].ids[:5], samples[1].ids[:7]])])
    print(
        json.dumps(
            {
                "devices": len(jax.local_devices()),
                "mesh": dict(mesh.shape),
                "max_param_diff": diff,
                "sharded": not all(x.sharding.is_fully_replicated for x in params[1]),
                "same_greedy": served[0] == served[1],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
