"""The supervised and preference objectives, one module per method: SFT (:mod:`.sft`), the reward
model (:mod:`.reward_model`), the generative judge (:mod:`.genrm`), DPO and IPO (:mod:`.dpo`), SimPO
(:mod:`.simpo`), ORPO (:mod:`.orpo`) and KTO (:mod:`.kto`). Each reads top to bottom: its data, its loss (the maths in
:mod:`tether.algos`), its role, its :class:`~tether.loops.stage.StageBody` and its ``run_*``.

No method imports another: what several share (the held-out split, preference pairs, the
chosen/rejected forwards, the reference pass, the trained policy's builder) is in :mod:`.shared`;
the control they run inside is in :mod:`tether.loops` (:mod:`tether.loops.stage`,
:mod:`tether.loops.supervised`).
"""
