"""Host-side SQL engine: sandboxed execution, EX/ExecF1, Chain-of-CTEs, EXPO-SQL clause rewards."""
from .execute import ExecResult, execute
