"""SQLConductor's action space and what runs it (Sec. 4.1): the registry, orchestration state, tagged format,
episodes, schema linking, value retrieval, the frozen action models and batched model calls."""
