"""JAX KV-cache sampler: jitted prefill + decode loop, greedy / temperature / top-k / top-p."""

from .logits_processing import filter_logits, sample_tokens, top_k_filter, top_p_filter
from .result import GenerationResult
from .sampler import generate
