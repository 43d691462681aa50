"""The supervised and preference objectives: SFT, the reward model, DPO and IPO, SimPO, ORPO and KTO."""
