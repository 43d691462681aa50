"""tether: PPO-based RLHF (SFT → Bradley-Terry reward model → PPO) that runs on a laptop CPU."""

__version__ = "0.1.0"
