"""SQLConductor on the built-in benchmark, CPU, small policy and action model trained from scratch."""
from rewardsql_jax.conductor.config import ConductorRunConfig

CONFIG = ConductorRunConfig()
