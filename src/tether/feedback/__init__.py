"""Humans in the loop: comparison pairs to label, the labelling page, agreement, and the
iterative SFT → label → RM → PPO loop (docs/human_feedback.md)."""
