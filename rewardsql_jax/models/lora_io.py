"""LoRA adapters in ``peft``'s directory format: ``adapter_config.json`` + ``adapter_model.safetensors``.

What ``peft.PeftModel.from_pretrained(transformers_model, dir)`` reads and ``PeftModel.save_pretrained`` writes for a
causal LM: tensors ``base_model.model.<HF module>.lora_A.weight`` ``[r, d_in]`` and ``.lora_B.weight`` ``[d_out, r]``
(torch ``nn.Linear`` layout: the transposes of our ``A [d_in, r]`` and ``B [r, d_out]``), and a config naming
``r``, ``lora_alpha``, ``lora_dropout`` and the ``target_modules`` (``q_proj`` ... ``down_proj``). Only plain LoRA
is read: DoRA, rsLoRA, per-module ranks, biases or extra trained modules are refused by name.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
from flax import nnx
from safetensors import safe_open
from safetensors.numpy import save_file

from .adapters import add_adapters, has_adapters
from .architecture import LINEARS, MLP_LINEARS
from .config import ModelConfig
from .lora import TARGETS, LoRAConfig, LoRAParam
from .registry import architecture_of
from .transformer import CausalLM

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."  # PeftModelForCausalLM.base_model (LoraModel).model (the transformers model)
# settings of a peft LoraConfig this reader follows only at their plain-LoRA values
_PLAIN = {
    "use_dora": False,
    "use_rslora": False,
    "bias": "none",
    "fan_in_fan_out": False,
    "modules_to_save": None,
    "layers_to_transform": None,
    "rank_pattern": {},
    "alpha_pattern": {},
    "lora_bias": False,
    "layer_replication": None,
}


def _peft_module(target: str) -> str:
    return f"{target}_proj"


def _adapter_rows(cfg: ModelConfig):
    """``(peft key prefix, LoRA module path)`` of every adapter of ``cfg``'s model, in checkpoint order."""
    names = architecture_of(cfg.model_type).hf_names
    for i in range(cfg.num_hidden_layers):
        for module in (*LINEARS, *MLP_LINEARS):
            if cfg.lora.on(module.split(".")[1].removesuffix("_proj")) is not None:
                key = f"{PEFT_PREFIX}{names.layer.format(i=i)}.{names.modules[module]}"
                yield key, ("layers", i, *module.split("."), "lora")


def save_adapters(model: CausalLM, path, *, base_model_name_or_path: str | None = None) -> Path:
    """Write ``model``'s LoRA adapters (Hu et al. 2021, Eq. 3: h = W0 x + B A x, scaled by alpha / r) as a peft
    adapter directory that ``PeftModel.from_pretrained`` puts on the transformers base model. Tensors keep the
    parameter dtype; each is gathered to host on its own (single-process)."""
    if not has_adapters(model):
        raise ValueError("the model has no LoRA adapters to save (model.config.lora.rank is 0)")
    cfg = model.config
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    flat = dict(nnx.to_flat_state(nnx.state(model, LoRAParam)))
    tensors = {}
    for key, module in _adapter_rows(cfg):
        for name, matrix in (("lora_A", "a"), ("lora_B", "b")):
            arr = np.asarray(jax.device_get(flat[(*module, matrix)].get_value()))
            tensors[f"{key}.{name}.weight"] = np.ascontiguousarray(arr.T)
    save_file(tensors, str(path / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model_name_or_path,
        "r": cfg.lora.rank,
        "lora_alpha": cfg.lora.alpha,
        "lora_dropout": cfg.lora.dropout,
        "target_modules": sorted(_peft_module(t) for t in cfg.lora.targets),
        "init_lora_weights": True,
        "inference_mode": True,
        "revision": None,
        **_PLAIN,
    }
    (path / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    return path


def _targets(modules, where: Path) -> tuple:
    if modules == "all-linear":
        return TARGETS
    if isinstance(modules, str) or not modules:
        raise ValueError(
            f"{where}: target_modules={modules!r}; only a list of module names (or 'all-linear') is read, "
            f"of {', '.join(_peft_module(t) for t in TARGETS)}"
        )
    by_name = {_peft_module(t): t for t in TARGETS}
    unknown = sorted(m for m in modules if m.rsplit(".", 1)[-1] not in by_name)
    if unknown:
        raise ValueError(f"{where}: target_modules {unknown} are not among {', '.join(by_name)}")
    return tuple(t for t in TARGETS if _peft_module(t) in {m.rsplit(".", 1)[-1] for m in modules})


def read_adapter_config(path) -> LoRAConfig:
    """The ``LoRAConfig`` of a peft adapter directory (refusing what plain LoRA does not cover, by name)."""
    path = Path(path)
    missing = [name for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS) if not (path / name).exists()]
    if missing:
        raise FileNotFoundError(
            f"{path} is not a peft adapter directory: it lacks {' and '.join(missing)} "
            f"(peft's save_pretrained writes both; adapter_model.bin is not read, save with safetensors)"
        )
    d = json.loads((path / ADAPTER_CONFIG).read_text())
    where = path / ADAPTER_CONFIG
    if d.get("peft_type") != "LORA":
        raise ValueError(f"{where}: peft_type={d.get('peft_type')!r}; only LORA adapters are read")
    odd = {k: d[k] for k, plain in _PLAIN.items() if d.get(k) and d[k] != plain}
    if odd:
        plain = {k: _PLAIN[k] for k in odd}
        raise ValueError(f"{where}: {odd} are not supported; plain LoRA has {plain}")
    return LoRAConfig(
        rank=int(d["r"]),
        alpha=float(d["lora_alpha"]),
        dropout=float(d.get("lora_dropout") or 0.0),
        targets=_targets(d.get("target_modules"), where),
    )


def load_adapters(model: CausalLM, path) -> CausalLM:
    """``model`` with the LoRA adapters of the peft directory ``path`` (written by peft or ``save_adapters``).

    A model without adapters gets them as the file configures them; a model with adapters must have the file's
    rank, alpha and target modules (a clear error names the difference) and keeps its own dropout. Every adapter
    tensor must be in the file with the shape of the model's projection, and the file may hold no other tensor.
    The base weights are shared with ``model``; a sharded model's adapters are placed in their shardings.
    """
    path = Path(path)
    lora = read_adapter_config(path)
    if has_adapters(model):
        own = model.config.lora
        mismatch = {
            name: (getattr(own, name), getattr(lora, name))
            for name in ("rank", "alpha")
            if getattr(own, name) != getattr(lora, name)
        }
        if set(own.targets) != set(lora.targets):
            mismatch["targets"] = (own.targets, lora.targets)
        if mismatch:
            detail = ", ".join(f"{k}: model {a!r}, file {b!r}" for k, (a, b) in mismatch.items())
            raise ValueError(f"the adapters in {path} do not fit the model's ({detail})")
    else:
        model = add_adapters(model, lora)
    graphdef, adapters, *rest = nnx.split(model, LoRAParam, ...)
    flat = dict(nnx.to_flat_state(adapters))
    with safe_open(path / ADAPTER_WEIGHTS, framework="numpy") as fh:
        stored = set(fh.keys())
        expected = {}
        for key, module in _adapter_rows(model.config):
            for name, matrix in (("lora_A", "a"), ("lora_B", "b")):
                expected[f"{key}.{name}.weight"] = (*module, matrix)
        missing, extra = sorted(expected.keys() - stored), sorted(stored - expected.keys())
        if missing or extra:
            raise ValueError(
                f"{path / ADAPTER_WEIGHTS} does not match the model's adapters: "
                + "; ".join(
                    f"{label} {keys[:3]}" + (f" (and {len(keys) - 3} more)" if len(keys) > 3 else "")
                    for label, keys in (("missing", missing), ("unexpected", extra))
                    if keys
                )
            )
        for key, p in expected.items():
            var = flat[p]
            arr = fh.get_tensor(key).T
            want = tuple(var.get_value().shape)
            if arr.shape != want:
                raise ValueError(
                    f"shape mismatch for {key!r}: the file has {tuple(reversed(arr.shape))}, the model needs "
                    f"{tuple(reversed(want))} (rank {lora.rank}); the adapters were trained on another model"
                )
            value = var.get_value()  # placed by add_adapters as a sharded model's adapters are
            flat[p] = var.replace(jax.device_put(np.ascontiguousarray(arr, dtype=value.dtype), value.sharding))
    return nnx.merge(graphdef, nnx.from_flat_state(flat), *rest)
