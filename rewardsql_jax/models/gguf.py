"""GGUF checkpoint (llama.cpp, Ollama, LM Studio) -> NNX model, one dequantised tensor at a time.

The file is memory-mapped (``gguf.GGUFReader``); its ``<arch>.*`` metadata become the ``ModelConfig`` through the
architecture (``registry.architecture_of_gguf``). Each tensor is dequantised to fp32 with the ``gguf`` package,
reordered (llama.cpp permutes the Q/K rows of llama-architecture models for its interleaved RoPE; the architecture says
whether), cast to the parameter dtype and placed in its sharding before the next one is read, so loading never
holds a second copy of the model on the host. The quantisation error stays in the weights: fine-tuning starts
from the dequantised values as fp32 master weights.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from jax.sharding import Mesh

from .architecture import Architecture, KeyMap
from .config import ModelConfig
from .loading import load_parameters, place
from .registry import architecture_of_gguf
from .sharding import AxisRules
from .transformer import CausalLM

# Tensor types this loader dequantises (the float types and llama.cpp's legacy and K-quants).
SUPPORTED_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
GGUF_MAGIC = b"GGUF"


def find_gguf_file(path) -> Path | None:
    """The GGUF file ``path`` names: the file itself, or the one ``*.gguf`` in a directory without ``config.json``
    (a HF directory is not a GGUF checkpoint: None). Two or more GGUF files in such a directory is an error."""
    path = Path(path)
    if path.is_file():
        with path.open("rb") as fh:
            return path if fh.read(4) == GGUF_MAGIC or path.suffix == ".gguf" else None
    if not path.is_dir() or (path / "config.json").exists():
        return None
    files = sorted(path.glob("*.gguf"))
    if len(files) > 1:
        raise ValueError(
            f"directory {path} holds {len(files)} GGUF files ({', '.join(f.name for f in files)}); "
            "pass the one to load as the path (e.g. model.path=<dir>/<file>.gguf)"
        )
    return files[0] if files else None


def open_gguf(path: Path):
    """A memory-mapped ``gguf.GGUFReader`` of ``path``, or one clear error for a file that is not GGUF or is cut."""
    import gguf

    size = path.stat().st_size
    with path.open("rb") as fh:
        magic = fh.read(4)
    if magic != GGUF_MAGIC:
        raise ValueError(f"{path} is not a GGUF file (it starts with {magic!r}, not {GGUF_MAGIC!r})")
    try:
        reader = gguf.GGUFReader(path, "r")
    except Exception as e:  # the reader's own errors on a cut header are struct/numpy errors without the path
        raise ValueError(
            f"GGUF file {path} ({size:,} bytes) cannot be read ({type(e).__name__}: {e}); it is truncated or "
            "damaged: download or export it again"
        ) from e
    for t in reader.tensors:
        end = int(t.data_offset) + int(t.n_bytes)
        if end > size or t.data.nbytes != int(t.n_bytes):
            raise ValueError(
                f"GGUF file {path} is truncated: tensor {t.name!r} ends at byte {end:,} but the file has "
                f"{size:,} bytes; download or export it again"
            )
    return reader


def gguf_metadata(reader) -> dict[str, Any]:
    """Every metadata key of the file with its value (strings, numbers, lists)."""
    return {name: field.contents() for name, field in reader.fields.items()}


def gguf_config(path, **overrides) -> ModelConfig:
    """The ``ModelConfig`` of a GGUF file (its metadata, through its architecture), without reading
    tensor data."""
    path = Path(path)
    _, fields = _architecture_and_fields(open_gguf(path), path)
    return ModelConfig(**(fields | overrides))


def _architecture_and_fields(reader, path: Path) -> tuple[Architecture, dict]:
    meta = gguf_metadata(reader)
    architecture = meta.get("general.architecture")
    arch = architecture_of_gguf(str(architecture), path)
    return arch, arch.parse_gguf(meta, frozenset(t.name for t in reader.tensors))


def dequantise(tensor, path: Path) -> np.ndarray:
    """One GGUF tensor as fp32 in numpy's order (ggml's ``ne`` reversed: ``[out, in]`` for a projection)."""
    from gguf import GGMLQuantizationType, quants

    qtype = GGMLQuantizationType(int(tensor.tensor_type))
    if qtype.name not in SUPPORTED_TYPES:
        raise ValueError(
            f"tensor {tensor.name!r} of {path} is stored as {qtype.name}, which rewardsql_jax does not dequantise; "
            f"supported types: {', '.join(SUPPORTED_TYPES)} (re-quantise the file with llama.cpp's llama-quantize)"
        )
    shape = tuple(int(n) for n in reversed(tensor.shape.tolist()))
    return np.asarray(quants.dequantize(tensor.data, qtype), dtype=np.float32).reshape(shape)


def unpermute_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row order (``convert_hf_to_gguf.py`` ``LlamaModel.permute``): within each head, rows
    ``[x0, x1, ..., y0, y1, ...]`` (rotate-half) were stored as ``[x0, y0, x1, y1, ...]`` (interleaved RoPE pairs)."""
    half = w.shape[0] // heads // 2
    return w.reshape(heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _check_tensors(table: tuple[KeyMap, ...], tensors: Mapping[str, Any], path: Path, strict: bool) -> None:
    missing = [row.key for row in table if row.key not in tensors]
    if missing:
        raise ValueError(
            f"GGUF file {path} has no tensor {missing[0]!r}"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
            + "; its metadata describe a model that needs it (an incomplete or mislabelled export)"
        )
    extra = sorted(set(tensors) - {row.key for row in table})
    if extra:
        msg = f"GGUF file {path} has {len(extra)} tensor(s) the model does not use, e.g. {extra[:3]}"
        if strict:
            raise ValueError(msg + " (an architecture variant rewardsql_jax does not implement); pass strict=False")
        warnings.warn(msg + "; ignored", stacklevel=3)


def load_gguf(
    path: Path, *, dtype: str, compute_dtype: str, mesh: Mesh | None, rules: AxisRules, strict: bool
) -> CausalLM:
    """A GGUF file as an NNX model (``pretrained.from_pretrained`` is the public entry point)."""
    reader = open_gguf(path)
    arch, fields = _architecture_and_fields(reader, path)
    cfg = ModelConfig(**(fields | dict(param_dtype=dtype, dtype=compute_dtype)))
    tensors = {t.name: t for t in reader.tensors}
    table = arch.gguf_keys(cfg)
    _check_tensors(table, tensors, path, strict)
    permuted_heads = {"q_proj": cfg.num_attention_heads, "k_proj": cfg.num_key_value_heads}

    def read(row: KeyMap, shape, target_dtype, sharding):
        w = dequantise(tensors[row.key], path)
        expect = tuple(reversed(shape)) if row.transpose else tuple(shape)
        if w.shape != expect:
            raise ValueError(
                f"shape mismatch for {row.key!r} in {path.name}: the file stores {w.shape}, its metadata imply "
                f"{expect}; the file is inconsistent"
            )
        if arch.gguf_qk_permuted and len(row.path) > 1 and row.path[-2] in permuted_heads:
            w = unpermute_rows(w, permuted_heads[row.path[-2]])
        return place(np.ascontiguousarray(w.T if row.transpose else w, dtype=target_dtype), sharding)

    return load_parameters(cfg, table, read, mesh=mesh, rules=rules, desc=f"loading {path.name}")
