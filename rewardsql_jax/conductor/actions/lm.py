"""Batched model calls for the conductor: the frozen action model and the orchestration policy.

Both are served through ``rewardsql_jax.sampling.generate``. Batches are padded to a power of two
(repeating the first row) so the sampler compiles a handful of shapes instead of one per batch size.

Action calls are sampled LLM calls (``action.temperature``; 0 = greedy). Inside an episode bound with an id
(``rollout.bind(state, call, episode=...)``) each action prompt is a ``SeededPrompt`` carrying
``(episode id..., call index)``; a sampling server draws it with ``call_seed(server seed, key)``, so a call's answer
depends on the run seed, the episode and its place in the episode alone (not on the batch it was served in), and a
repeated ``generate_sql`` yields a new candidate.
"""

from __future__ import annotations

import hashlib
import itertools

from rewardsql_jax.sampling import generate

from .env import Completion


class SeededPrompt(str):
    """An action prompt (a ``str``) with ``key``: ``(episode id..., call index in the episode)``."""

    key: tuple

    def __new__(cls, text: str, key: tuple):
        self = super().__new__(cls, text)
        self.key = tuple(key)
        return self


def call_seed(seed: int, key: tuple) -> int:
    """A 31-bit sampling seed of one call from the server's seed and the call's key (stable across runs)."""
    digest = hashlib.blake2b(repr((int(seed), *key)).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") & 0x7FFFFFFF


def call_seeds(server, prompts: list):
    """One seed a prompt when ``server`` samples and every prompt is a ``SeededPrompt``, else ``None`` (the
    server's own seed sequence)."""
    if server.temperature == 0 or not all(isinstance(p, SeededPrompt) for p in prompts):
        return None
    return [call_seed(server.seed, p.key) for p in prompts]


def _pad_batch(rows: list) -> list:
    n = 1 << (len(rows) - 1).bit_length()
    return rows + [rows[0]] * (n - len(rows))


class ModelServer:
    """``serve(list of token-id prompts) -> list of (new ids without the stop token, logprobs, stopped)``; a call
    with more than ``max_batch`` prompts is decoded ``max_batch`` at a time (memory grows with the batch)."""

    def __init__(
        self,
        model,
        *,
        stop_ids,
        pad_id: int,
        max_new_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int = 0,
        max_len: int | None = None,
        max_batch: int = 256,
    ):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.model, self.stop_ids, self.pad_id = model, tuple(stop_ids), pad_id
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.max_len = max_len or model.config.max_position_embeddings
        self.seed, self.max_batch = seed, max_batch
        self._seeds = itertools.count(seed * 1_000_003)

    def serve(self, prompts: list, seeds: list | None = None) -> list:
        """``seeds``: one a prompt (each drawn with its own, independent of the batch), else the next of the
        server's seed sequence for each batch of ``max_batch``."""
        out = []
        for start in range(0, len(prompts), self.max_batch):
            end = start + self.max_batch
            out += self._serve(prompts[start:end], None if seeds is None else seeds[start:end])
        return out

    def _serve(self, prompts: list, seeds: list | None) -> list:
        limit = self.max_len - self.max_new_tokens
        prompts = [list(p)[-limit:] for p in prompts]  # keep the most recent context if too long
        seed = _pad_batch(list(seeds)) if seeds is not None else next(self._seeds)
        res = generate(
            self.model,
            _pad_batch(prompts),
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            eos_token_id=list(self.stop_ids),
            seed=seed,
            pad_id=self.pad_id,
        )
        out = []
        for i in range(len(prompts)):
            toks, lps = list(res.tokens[i]), list(res.logprobs[i])
            out.append((toks, lps, bool(res.finished[i])))
        return out


def action_servers(model, *, temperature: float, explore_temperature: float, seed: int, **common) -> dict:
    """An action model's two servers: ``{True: evaluation and RL (temperature, seed), False: exploration
    (explore_temperature, seed + 7)}`` (``common``: the ``ModelServer`` settings both share)."""
    return {
        True: ModelServer(model, temperature=temperature, seed=seed, **common),
        False: ModelServer(model, temperature=explore_temperature, seed=seed + 7, **common),
    }


def action_handler(server: ModelServer, tokenizer, *, encode=None, on_prompts=None):
    """Handler for ``CallBatcher``: action prompts (text) -> ``Completion``s (stop tokens stripped). ``encode``: a
    prompt's token ids (default: ``tokenizer`` without special tokens); ``on_prompts(prompts)`` sees each batch."""
    encode = encode or (lambda prompt: tokenizer(prompt, add_special_tokens=False).input_ids)

    def handle(prompts: list) -> list:
        if on_prompts is not None:
            on_prompts(prompts)
        encoded = [encode(p) for p in prompts]
        outs = server.serve(encoded, call_seeds(server, prompts))
        return [
            Completion(
                tokenizer.decode([t for t in toks if t not in server.stop_ids], skip_special_tokens=True),
                len(ids),
                len(toks),
            )
            for ids, (toks, _, _) in zip(encoded, outs)
        ]

    return handle


def action_handlers(actions, tokenizer) -> dict:
    """``CallBatcher`` handlers of the action models: ``actions`` is a ``ModelServer`` of the built-in model
    (call kind ``"action"``, prompts encoded with ``tokenizer``) or already ``{call kind: handler}`` (the built-in
    model and / or a user's checkpoints, ``models.ActionModels.handlers``)."""
    if isinstance(actions, dict):
        return dict(actions)
    return {"action": action_handler(actions, tokenizer)}
