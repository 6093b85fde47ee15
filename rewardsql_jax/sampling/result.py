"""The value ``generate`` returns."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class GenerationResult:
    """Generated continuations, prompt-major (all ``num_samples`` rows of prompt 0, then prompt 1, ...).

    ``tokens[i]``: new token ids of row ``i``, cut after the first EOS; the EOS token itself is
    included (as in HF ``generate``). ``logprobs[i]``: log-probability of each of those tokens under
    the temperature-scaled, unfiltered distribution ``log_softmax(logits / T)`` (``T = 1`` for greedy).
    ``prompt_lengths[i]``: length of the prompt row ``i`` continues. ``finished[i]``: True if row ``i``
    stopped on an EOS token (False if it ran out of ``max_new_tokens``). ``steps``: token positions the
    decode loop produced (it exits early once every row has finished, so ``steps`` can be below
    ``max_new_tokens``).
    """

    tokens: list
    logprobs: list
    prompt_lengths: list
    finished: list
    num_samples: int = 1
    steps: int = 0

    def __len__(self) -> int:
        return len(self.tokens)

    def for_prompt(self, prompt_index: int) -> list:
        """The ``num_samples`` token lists generated for prompt ``prompt_index``."""
        start = prompt_index * self.num_samples
        return self.tokens[start : start + self.num_samples]
