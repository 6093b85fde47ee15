"""Host-side SQL engine: sandboxed execution, EX/ExecF1, Chain-of-CTEs, EXPO-SQL clause rewards."""

from .clause_rewards import ClauseRewards, RewardOptions, clause_rewards
from .clauses import Clause, split_clauses
from .cocte import CoCTE, Step, annotate_steps, format_step_result, prefix_sql, split_cocte
from .compare import exec_f1, exec_match, exec_match_batch, result_f1, results_match
from .dedup import cocte_similarity, dedup, distance_matrix, preorder_tokens
from .diff import diff_types
from .execute import ExecResult, execute
from .pool import ExecutorPool
from .to_cocte import CoCTEConversion, convert_to_cocte, to_cocte
