"""Tree search: generic MCTS / PUCT (SQLConductor workflows) and OmegaPRM step labelling (Reward-SQL PRM data)."""

from .mcts import (
    MCTSConfig,
    MCTSResult,
    Node,
    SearchProblem,
    mcts_search,
    principal_variation,
    puct_exploration,
    puct_score,
    random_rollout,
    uct_score,
)
from .omega_prm import (
    LabelledRollout,
    MCRequest,
    OmegaPRMConfig,
    OmegaPRMResult,
    PrefixEstimate,
    Rollout,
    label_rollouts,
    omega_prm_search,
    rollout_value,
    run_searches,
    selection_score,
    step_labels,
)
