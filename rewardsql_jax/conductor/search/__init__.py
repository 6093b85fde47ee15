"""SQLConductor's workflow search (Sec. 4.2-4.3): MCTS exploration, curation with stability weights, reasoning
augmentation."""
