"""SQLConductor's online evaluation (Algorithm 3): EX, calls, tokens with bootstrap evidence; the printed table and
the workflow-length figure."""
