"""SQLConductor's policy training (Sec. 4.4): token view of trajectories, the online rollout loop, stability-weighted
SFT, curriculum GRPO, the trainers' mesh."""
