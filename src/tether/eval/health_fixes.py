"""What to do about each health alarm (:mod:`tether.eval.health`): the reference texts' advice,
mapped to tether's config keys. Printed under each alarm and written with it to ``alarms.jsonl``."""

#: Suggested fixes: the reference texts' advice, mapped to tether's config keys.
FIXES = {
    "kl_barely_moved": (
        "The policy has barely changed from SFT (ref. 003: KL < 1 -> 'decrease beta or train longer'; "
        "ref. 004: 'reward does not move -> lower beta or increase LR'). Lower kl.coef (or raise "
        "kl.target with the adaptive controller), raise optim.lr, or run more rl.iterations."
    ),
    "kl_drifting": (
        "The policy is drifting far from SFT (ref. 003: KL > 10 -> 'increase beta or reduce LR'). "
        "Raise kl.coef (or use kl.controller=adaptive with a kl.target in the healthy band) or "
        "lower optim.lr; read samples.jsonl for degenerate text."
    ),
    "kl_catastrophic": (
        "Catastrophic divergence from SFT (ref. 003: KL > 20 -> 'stop, debug'; ref. 004: garbled "
        "output from severe reference drift -> 'increase beta, lower LR'). Stop the run, inspect "
        "samples, then raise kl.coef and lower optim.lr before restarting from the SFT model."
    ),
    "reward_hacking": (
        "Reward rises while length and repetition rise together: reward hacking (ref. 004: 'pause "
        "PPO and go back to check RM data, length penalties, and adversarial samples'). Compare with "
        "a gold judge or read samples; fix the reward (length penalty, recalibrate or ensemble the "
        "RM: reward.models + reward.combine=min), raise kl.coef."
    ),
    "entropy_collapse": (
        "Policy entropy is collapsing: mode collapse (ref. 004: 'policy entropy too low -> add entropy "
        "regularization, lower LR'). Set rl.entropy_coef > 0, lower optim.lr, raise kl.coef."
    ),
    "value_loss_exploding": (
        "The critic's loss is exploding; actor updates become unstable with it (ref. 004; ref. 003 "
        "'value function lag'). Lower critic.optim.lr, keep ppo.value_clip on, normalise the reward "
        "(reward.normalize, reward.clip), use ppo.critic_warmup_iters, check optim/critic_grad_norm."
    ),
    "clipfrac_zero": (
        "Almost no token hits the PPO clip: updates are tiny (ref. 004: clip fraction 'approaching 0' "
        "is a danger signal). Raise optim.lr or rl.epochs; check the actor is being trained "
        "(ppo/actor_trained, ppo.critic_warmup_iters)."
    ),
    "clipfrac_high": (
        "A large share of tokens is clipped every iteration: updates are too aggressive (ref. 004: "
        "'persistently very high'). Lower optim.lr, use fewer rl.epochs or larger minibatches, "
        "or set rl.target_approx_kl to stop epochs early."
    ),
    "eos_collapse": (
        "Responses stop ending: they run into the length cap (ref. 004: 'responses keep getting "
        "longer -> add length penalty, recalibrate RM'). Keep reward.eos_penalty on, raise kl.coef, "
        "check the reward's correlation with length."
    ),
    "nothing_to_learn": (
        "Every update of the actor had a zero gradient: the run spends its time and trains nothing. "
        "Give the reward something to tell apart: raise rollout.max_new_tokens or lower reward.eos_penalty "
        "when no response ends, lower selection.min_score, set a kl.coef above 0 for online DPO, check "
        "reward.terms' weights and the reward source on a few samples (tether eval)."
    ),
    "off_policy_drift": (
        "The engine that samples no longer matches the actor: many tokens' importance weights hit "
        "rollout.is_cap, so the correction is discarding signal. Check the weight sync "
        "(rollout.vllm.check_sync=true), run the engine in the actor's precision (rollout.vllm.dtype), "
        "or lower optim.lr."
    ),
}
