"""HF checkpoint directory <-> NNX model (safetensors, one or many shards).

Loading never materialises the whole model on host: the model is built abstractly
(``nnx.eval_shape``), then each parameter is read from its safetensors file on its own (``loading``). With a mesh,
each device's shard is read straight from the file (``jax.make_array_from_callback`` over a lazy
safetensors slice), so a host holds at most one shard of one tensor at a time.

Unexpected checkpoint keys (tensors the model has no parameter for) raise an error by default,
because they usually mean a wrong architecture; ``strict=False`` turns this into a warning.
Known weight-free buffers (``rotary_emb.inv_freq``) are skipped silently; a redundant
``lm_head.weight`` in a tied-embedding checkpoint is skipped with a warning.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh
from safetensors import safe_open
from safetensors.numpy import save_file

from .adapters import merge_adapters
from .architecture import KeyMap
from .config import ModelConfig, resolve_dtype
from .loading import load_parameters
from .registry import config_from_json, config_to_hf, hf_key_table
from .sharding import AxisRules
from .transformer import CausalLM

INDEX_NAME = "model.safetensors.index.json"
# Checkpoint entries that carry no learned weight (buffers some older exports include); skipped silently.
IGNORED_HF_SUFFIXES = ("rotary_emb.inv_freq",)
SINGLE_NAME = "model.safetensors"


class MissingTensorError(KeyError):
    """A tensor the config requires is absent from the checkpoint files."""

    def __str__(self):
        return str(self.args[0])


def _weight_map(path: Path) -> dict[str, Path]:
    """HF key -> safetensors file, from the index when sharded or by listing the file(s)."""
    index = path / INDEX_NAME
    if index.exists():
        wm = json.loads(index.read_text()).get("weight_map")
        if not isinstance(wm, dict):
            raise ValueError(f"{index} has no 'weight_map'; it is not a valid safetensors index")
        by_name = {name: path / name for name in set(wm.values())}
        for f in by_name.values():
            if not f.exists():
                raise FileNotFoundError(f"{index} lists {f.name}, which is missing from {path}")
        return {key: by_name[name] for key, name in wm.items()}
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(
            f"no *.safetensors files in {path}; save the model with safetensors (not pytorch_model.bin)"
        )
    out = {}
    for f in files:
        with safe_open(f, framework="numpy") as fh:
            for key in fh.keys():
                out[key] = f
    return out


def _check_keys(table: tuple[KeyMap, ...], weight_map: dict[str, Path], path: Path, strict: bool, tied: bool):
    expected = {row.key for row in table}
    missing = [row.key for row in table if row.key not in weight_map]
    if missing:
        raise MissingTensorError(
            f"checkpoint {path} is missing tensor {missing[0]!r}"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
            + f"; the files hold {len(weight_map)} tensors ({sorted({f.name for f in weight_map.values()})}) "
            "but config.json describes a model that needs it"
        )
    extra = sorted(k for k in weight_map if k not in expected and not k.endswith(IGNORED_HF_SUFFIXES))
    if tied and "lm_head.weight" in extra:
        # some exporters write the tied copy anyway; the model reads embed_tokens, so it is redundant
        extra.remove("lm_head.weight")
        warnings.warn(
            f"checkpoint {path} stores lm_head.weight although tie_word_embeddings=true; "
            "using model.embed_tokens.weight as the output projection",
            stacklevel=3,
        )
    if extra:
        msg = f"checkpoint {path} has {len(extra)} tensor(s) the model does not use, e.g. {extra[:3]}"
        if strict:
            raise ValueError(
                msg + "; check config.json (e.g. tie_word_embeddings, attention_bias) or pass strict=False"
            )
        warnings.warn(msg + "; ignored", stacklevel=3)


def _read_tensor(row: KeyMap, file: Path, target_shape, target_dtype, sharding):
    """Read one checkpoint tensor into a jax array of ``target_shape``/``dtype`` (sharded if given)."""
    with safe_open(file, framework="numpy") as fh:
        sl = fh.get_slice(row.key)
        hf_shape = tuple(sl.get_shape())
        expect = tuple(reversed(target_shape)) if row.transpose else tuple(target_shape)
        if hf_shape != expect:
            raise ValueError(
                f"shape mismatch for {row.key!r} in {file.name}: checkpoint has {hf_shape}, "
                f"config.json implies {expect}; the config and the weights disagree"
            )

        def read(index):
            # index is over the target layout; a transposed tensor reads the mirrored HF slice.
            idx = tuple(index) if index is not None else tuple(slice(None) for _ in target_shape)
            if row.transpose:
                arr = np.asarray(sl[tuple(reversed(idx))]).T
            else:
                arr = np.asarray(sl[idx] if idx else sl[:])
            return np.ascontiguousarray(arr, dtype=target_dtype)  # one copy at most (layout + dtype together)

        if sharding is None:
            return jax.device_put(read(None))
        return jax.make_array_from_callback(tuple(target_shape), sharding, read)


def load_hf_dir(
    path: Path, *, dtype: str, compute_dtype: str, mesh: Mesh | None, rules: AxisRules, strict: bool
) -> CausalLM:
    """A HF Qwen2/Llama directory (``config.json`` + ``*.safetensors``) as an NNX model (``pretrained.from_pretrained``
    is the public entry point)."""
    cfg = config_from_json(path, param_dtype=dtype, dtype=compute_dtype)
    table = hf_key_table(cfg)
    weight_map = _weight_map(path)
    _check_keys(table, weight_map, path, strict, cfg.tie_word_embeddings)

    def read(row, shape, target_dtype, sharding):
        return _read_tensor(row, weight_map[row.key], shape, target_dtype, sharding)

    return load_parameters(cfg, table, read, mesh=mesh, rules=rules, desc=f"loading {path.name}")


def _parse_size(size) -> int:
    if isinstance(size, int):
        return size
    units = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "B": 1}
    s = str(size).strip().upper()
    for unit in sorted(units, key=len, reverse=True):
        if s.endswith(unit):
            return int(float(s[: -len(unit)]) * units[unit])
    raise ValueError(f"max_shard_size {size!r} not understood; use bytes (int) or a string like '5GB' / '500MB'")


def save_pretrained(model: CausalLM, path, *, dtype=None, max_shard_size="5GB") -> Path:
    """Write ``config.json`` + safetensors that ``transformers.AutoModelForCausalLM`` loads.

    Tensors are stored in the parameter dtype (or ``dtype``), in HF layout. Above ``max_shard_size``
    bytes the weights are split into ``model-0000i-of-0000n.safetensors`` with an index. Each
    tensor is gathered to host on its own (single-process); only one shard file is held at a time.
    A LoRA model is written merged, ``W + A B * alpha / r`` (``adapters.merge_adapters``); its adapters alone
    are ``lora_io.save_adapters``.
    """
    model = merge_adapters(model)
    cfg: ModelConfig = model.config
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    out_dtype = resolve_dtype(dtype) if dtype is not None else cfg.weight_dtype
    limit = _parse_size(max_shard_size)
    hf_cfg = config_to_hf(cfg)
    hf_cfg["torch_dtype"] = jnp.dtype(out_dtype).name
    hf_cfg["dtype"] = jnp.dtype(out_dtype).name
    (path / "config.json").write_text(json.dumps(hf_cfg, indent=2) + "\n")

    flat = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))
    table = hf_key_table(cfg)
    # plan shards by byte size before reading any tensor
    groups: list[list] = []
    current: list = []
    current_bytes = 0
    for row in table:
        nbytes = flat[row.path].get_value().size * jnp.dtype(out_dtype).itemsize
        if current and current_bytes + nbytes > limit:
            groups.append(current)
            current, current_bytes = [], 0
        current.append(row)
        current_bytes += nbytes
    groups.append(current)

    for stale in list(path.glob("*.safetensors")) + [path / INDEX_NAME]:
        stale.unlink(missing_ok=True)
    names = (
        [SINGLE_NAME]
        if len(groups) == 1
        else [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
    )
    weight_map, total = {}, 0
    for name, group in zip(names, groups):
        tensors = {}
        for row in group:
            arr = np.asarray(jax.device_get(flat[row.path].get_value().astype(out_dtype)))
            tensors[row.key] = np.ascontiguousarray(arr.T if row.transpose else arr)
            weight_map[row.key] = name
            total += arr.nbytes
        save_file(tensors, str(path / name), metadata={"format": "pt"})
    if len(groups) > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (path / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
    return path
