from .advantages import group_advantages
from .process import PROCESS_VARIANTS, process_advantages, steps_to_tokens
from .returns import (ReinforcePPReturns, discounted_returns, kl_penalized_rewards, masked_whiten,
                      outcome_token_rewards, reinforce_pp_returns)
