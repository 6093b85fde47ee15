"""An installed rewardsql_jax carries the Pallas kernels: one interpret-mode flash-attention call against the reference.

    cd /tmp && /path/to/venv/bin/python /path/to/checkout/scripts/check_wheel.py [SITE]

Run it with the interpreter of the environment to check, from a folder outside the checkout (CI: a fresh venv
with ``pip install .``; tests/test_packaging.py: a built wheel and the editable hook). ``rewardsql_jax``, its
``kernels`` package and the kernel modules must all come from SITE (default: that interpreter's site-packages),
never from a top-level ``kernels`` module (another PyPI package owns that name). Prints ``installed kernels ok``.
"""

import importlib
import sys
import sysconfig
from pathlib import Path


def main(argv: list[str]) -> int:
    site = Path(argv[0] if argv else sysconfig.get_paths()["purelib"]).resolve()

    import jax
    import jax.numpy as jnp
    import numpy as np

    fa = importlib.import_module("rewardsql_jax.kernels.flash_attention")
    ref = importlib.import_module("rewardsql_jax.kernels.reference")
    for mod in (fa, ref, sys.modules["rewardsql_jax"], sys.modules["rewardsql_jax.kernels"]):
        assert Path(mod.__file__).resolve().is_relative_to(site), (mod.__name__, mod.__file__, str(site))
    assert "kernels" not in sys.modules  # never a top-level kernels module
    from rewardsql_jax.kernels import flash_attention  # the package re-exports the function

    kq, kk, kv = jax.random.split(jax.random.PRNGKey(0), 3)
    q = jax.random.normal(kq, (2, 20, 4, 16), jnp.float32)
    k = jax.random.normal(kk, (2, 20, 2, 16), jnp.float32)
    v = jax.random.normal(kv, (2, 20, 2, 16), jnp.float32)
    lengths = jnp.array([20, 11])
    out = flash_attention(q, k, v, causal=True, kv_lengths=lengths, block_q=16, block_k=16, interpret=True)
    want = ref.mha_reference(q, k, v, causal=True, kv_lengths=lengths)
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), atol=1e-5, rtol=1e-5)
    print("installed kernels ok", fa.__file__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
