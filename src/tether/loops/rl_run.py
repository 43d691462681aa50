"""An RL stage (every algorithm of :mod:`tether.algorithms`, PPO the default) around
:class:`~tether.loops.rl.RLTrainer`, as a body of the stage skeleton
(:func:`tether.loops.stage.run_stage`, which owns the run's start, the run directory and the final
saves): the roles placed, the prompts, then the iterations with resume, metrics and samples,
held-out evaluation, health alarms and checkpoints.

Everything touches the roles through the placement: checkpoints are the roles' own
``save_pretrained`` and ``state_dict``, the evaluator samples through the rollout role.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tether.algorithms import algorithm
from tether.config import RLConfig
from tether.registry.algorithms import DEFAULT_ALGORITHM, algorithm_spec
from tether.runs.checkpoint import load_trainer_state, save_checkpoint, set_rank_rng_state, truncate_jsonl, truncate_metrics
from tether.eval.health import HealthMonitor, append_alarms
from tether.loops.common import announce_resume, progress
from tether.loops.rl import RLTrainer
from tether.loops.rl_setup import build_evaluator, environment_class, load_prompt_set, prompt_limit
from tether.metrics import JsonlWriter, MetricsLogger
from tether.distributed import broadcast_object
from tether.placement import make_placement
from tether.loops.stage import Final, Started, run_stage
from tether.common.runtime import is_main
from tether.runs import fault_point, guarded_run
from tether.types import Experience

SAMPLES_PER_LOG = 4


def tqdm_write(text: str) -> None:
    """Print above the progress bar."""
    from tqdm.auto import tqdm

    if is_main():
        tqdm.write(text, file=sys.stderr)


def sample_rows(iteration: int, exp: Experience, n: int, version: int | None = None) -> list[dict]:
    """A few (prompt, response, score) rows of a rollout for ``samples.jsonl`` and the report;
    ``version``: the weights version that sampled it (asynchronous runs), recorded on each row."""
    ro = exp.rollout
    tag = {} if version is None else {"version": version}
    rows = [
        {"iteration": iteration, "prompt": ro.prompts[i], "response": ro.responses[i],
         "score": float(exp.scores[i]), "ended": bool(ro.ended[i]), **tag}
        for i in range(min(n, len(ro.prompts)))
    ]
    for i, row in enumerate(rows if ro.episodes is not None else []):  # an episode: its whole conversation
        row.update(turns=ro.episodes[i].stats.turns, messages=ro.episodes[i].messages)
    return rows


@dataclass
class RLBody:
    """An RL stage inside the skeleton (:func:`tether.loops.stage.run_stage`): ``algorithm`` on the
    roles ``cfg`` names, run directory ``stage`` (the algorithm's name)."""

    algorithm: object
    name: str = DEFAULT_ALGORITHM
    on_iteration: object = None

    def start(self, cfg, checkpoint: Path | None) -> Started:
        """The roles placed (the actor and critic from ``checkpoint`` when resuming), then the prompts
        (capped to the placed models' context) and the held-out evaluator, checked."""
        placement, tokenizer, contexts = make_placement(cfg, checkpoint)
        try:
            cap = prompt_limit(cfg, contexts)
            prompts = load_prompt_set(cfg.prompts, cfg.prompts_split, tokenizer, cfg.model.chat_template, cap,
                                      environment=environment_class(cfg))
            evaluator = build_evaluator(cfg, tokenizer, cap)
        except BaseException:
            placement.close()
            raise
        return Started(placement, tokenizer, {"rollout.max_prompt_length": cap},
                       {"prompts": prompts, "evaluator": evaluator})

    def train(self, cfg, started: Started, out: Path, checkpoint: Path | None) -> tuple[dict, list[Final]]:
        """The iterations, with evaluation, alarms, samples and checkpoints; the actor (and the critic,
        in ``critic/``) as the final models."""
        stage, prompts, evaluator = self.name, started.state["prompts"], started.state["evaluator"]
        trainer = RLTrainer(cfg, started.placement, prompts, self.algorithm)
        spec = algorithm_spec(cfg.algorithm)
        # Where the kl block is inert (distill: the reference is the teacher), the KL is no leash.
        monitor = HealthMonitor(cfg.health, echo=tqdm_write, kl_leash="kl" not in spec.inert_keys)
        if checkpoint is not None:
            _restore(out, checkpoint, stage, trainer, monitor)
        announce_resume(checkpoint, trainer.iteration, cfg.rl.iterations)
        logger = MetricsLogger(out, stage)
        if checkpoint is None:
            logger.log(0, {"data/prompts": len(prompts.ids), "data/dropped_long": prompts.dropped_long})
        samples = JsonlWriter(out / "samples.jsonl")
        bar = progress(cfg.rl.iterations, stage, cfg.run.progress)
        bar.update(trainer.iteration)
        history, t0 = [], time.perf_counter()
        while trainer.iteration < cfg.rl.iterations:
            fault_point("iteration")
            stats = trainer.step()
            it = trainer.iteration
            last = it == cfg.rl.iterations
            if evaluator is not None and (last or (cfg.eval.every and it % cfg.eval.every == 0)):
                t_eval = time.perf_counter()
                if trainer.pipeline is not None:  # an engine the sampler drives is free once it is idle
                    trainer.pipeline.drain()
                stats.update(evaluator(trainer.rollout, trainer.actor, trainer.reference, trainer.reward))
                stats["timing/eval"] = time.perf_counter() - t_eval
            history.append(stats)
            alarms = monitor.observe(it, stats)
            append_alarms(out / "alarms.jsonl", alarms)
            logger.log_table("alarms", it, [alarm.to_dict() for alarm in alarms])
            if it == 1 or last or it % cfg.run.log_every == 0:
                logger.log(it, stats)
                rows = sample_rows(it, trainer.last_experience, SAMPLES_PER_LOG, trainer.last_version)
                samples.write_many(rows)
                logger.log_table("samples", it, rows)
            bar.update(1)
            bar.set_postfix(progress_postfix(stats, spec))
            if self.on_iteration is not None:
                self.on_iteration(it, stats, trainer)
            if cfg.run.save_every and it % cfg.run.save_every == 0 and not last:
                state = {"trainer": trainer.state_dict(), "monitor": monitor.state_dict()}
                save_checkpoint(out, it, _trained(trainer), started.tokenizer, state, cfg.run.keep_checkpoints)
            if broadcast_object(monitor.should_stop):  # data parallel: rank 0's monitor decides for all
                tqdm_write(f"stopping: {monitor.stop_reason}")
                break
        bar.close()
        logger.close()
        final = {**(history[-1] if history else {}), "iterations": trainer.iteration}
        finals = []
        if trainer.critic is not None:
            finals.append(Final(trainer.critic, {"stage": f"{stage}-critic"}, {"iterations": trainer.iteration},
                                role="critic", subdir="critic"))
        finals.append(Final(trainer.actor, {"stage": stage, "iterations": trainer.iteration,
                                            "stopped_by": monitor.stop_reason}, final))
        result = {"history": history, "trainer": trainer, "time_s": time.perf_counter() - t0,
                  "alarms": [a.to_dict() for a in monitor.alarms], "stopped_by": monitor.stop_reason}
        return result, finals


def progress_postfix(stats: dict, spec) -> dict:
    """The progress bar's numbers: the score (with a reward), the KL to the reference, and its beta
    (where the kl block is read)."""
    shown = {"score": f"{stats['objective/score']:.2f}"} if spec.needs_reward else {}
    shown["kl"] = f"{stats['objective/kl']:.2f}"
    if "kl" not in spec.inert_keys:
        shown["beta"] = f"{stats['objective/kl_coef']:.3f}"
    return shown


@guarded_run
def run_rl(cfg: RLConfig, on_iteration=None, resume: bool = False) -> dict:
    """Run ``cfg.algorithm`` (PPO by default; :mod:`tether.algorithms`); save the final policy at
    ``run.out`` (a critic in ``run.out/critic``). The run directory's stage is the algorithm's name.

    ``resume``: continue from the newest complete checkpoint in ``run.out`` (if any).
    ``on_iteration(iteration, stats, trainer)`` is called after every iteration.
    """
    return run_stage(cfg, RLBody(algorithm(cfg.algorithm, cfg), cfg.algorithm, on_iteration), resume)


def rl_trainer(cfg: RLConfig, roles, prompts) -> RLTrainer:
    """A trainer of ``cfg.algorithm`` over roles built in memory (:func:`tether.roles.build.make_roles`),
    placed in this process (or, under torchrun, on every rank): what the benchmark and the tests
    drive iteration by iteration."""
    from tether.placement import place_roles

    return RLTrainer(cfg, place_roles(cfg, roles), prompts, algorithm(cfg.algorithm, cfg))


def _trained(trainer: RLTrainer) -> dict:
    """The roles a checkpoint holds: the actor, and the critic when there is one."""
    return {"actor": trainer.actor, **({"critic": trainer.critic} if trainer.critic is not None else {})}


def _restore(out: Path, ckpt: Path, stage: str, trainer: RLTrainer, monitor: HealthMonitor) -> None:
    """Optimiser, controller, RNG and monitor state of ``ckpt``; rows logged after it are dropped."""
    state = load_trainer_state(ckpt)
    trainer.load_state_dict(state["trainer"])
    monitor.load_state_dict(state["monitor"])
    set_rank_rng_state(state)
    truncate_metrics(out, trainer.iteration, stage)
    truncate_jsonl(out / "samples.jsonl", trainer.iteration)
    truncate_jsonl(out / "alarms.jsonl", trainer.iteration)
