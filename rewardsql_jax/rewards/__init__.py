from .advantages import group_advantages
from .process import PROCESS_VARIANTS, process_advantages, steps_to_tokens
from .returns import (
    ReinforcePPReturns,
    discounted_returns,
    kl_penalized_rewards,
    masked_whiten,
    outcome_token_rewards,
    reinforce_pp_returns,
)
from .rollout_rewards import (
    DecodedCompletion,
    Outcomes,
    batch_clause_rewards,
    clause_token_rewards,
    decode_with_offsets,
    execution_outcomes,
    outcome_advantages,
    process_token_advantages,
)
from .token_align import (
    TokenValues,
    batch_cocte_token_values,
    batch_token_values,
    blank_line_spans,
    clause_token_values,
    cocte_step_spans,
    cocte_token_values,
    pad_token_arrays,
    spans_to_token_values,
    token_span_ids,
)
