"""The judge reward kind end to end (docs/judges.md).

- GRPO rewarded by a judge that `tether serve` serves (a tiny model that learned to answer
  ``Score: 8``, tests/judge_model.py), beside a normalised gold term and a cost
  constraint: the dry run asks the judge, the run logs what it did and every objective.
- GRPO rewarded by a loopback judge that leaves some answers without a score: each failure
  counted, the run going on; SIGKILLed inside a checkpoint write and resumed, it ends bit for bit
  where the uninterrupted run does (the normaliser's moments and the multiplier included).
- A judge that answers garbage stops the run at the first batch, with a message naming it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
import torch
from judge_model import RUBRIC, build
from judge_server import FakeJudge
from safetensors.torch import load_file

from tether.cli import main
from tether.metrics.logger import read_metrics
from tether.runs.checkpoint import complete_checkpoints

pytestmark = pytest.mark.slow


def grpo_args(task, out, judge: str, iterations: int = 2) -> list[str]:
    terms = (f"reward.terms=[{{name: helpful, judge: {judge}}}, "
             "{name: gold, callable: 'tether.tasks.arith.judge:gold_reward', normalize: true}, "
             "{name: bang, regex: '!', limit: 0.0, multiplier_lr: 0.5}]")
    return ["grpo", f"run.out={out}", "run.progress=false", "run.log_every=1", "run.seed=0", "run.threads=1",
            f"model.name_or_path={task / 'base_model'}", f"prompts={task / 'ppo_prompts.jsonl'}", terms,
            f"rl.iterations={iterations}", "rollout.batch_size=2", "group.size=2", "rl.minibatch_size=4",
            "rollout.max_new_tokens=6", "rl.epochs=1", "rl.on_invariant=error", "run.save_every=1"]


@pytest.fixture(scope="module")
def judge_model(tmp_path_factory):
    """The tiny judge's directory and a rubric file of the prompts it learned."""
    root = tmp_path_factory.mktemp("judge")
    rubric = root / "rubric.txt"
    rubric.write_text(RUBRIC)
    return build(root / "judge"), rubric


@pytest.fixture(scope="module")
def served_judge(judge_model):
    """`tether serve` with the tiny judge, in a child process: (url, rubric file)."""
    model, rubric = judge_model
    root = model.parent
    log = root / "serve.log"
    cmd = [sys.executable, "-m", "tether.cli", "serve", "--model", str(model), "--model-name", "tiny-judge",
           "--port", "0", "--threads", "1", "--seed", "0", "--default-max-tokens", "8"]
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", "TETHER_API_KEY": ""})
    try:
        deadline = time.monotonic() + 120
        while "Uvicorn running on" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        port = re.search(r"on http://127\.0\.0\.1:(\d+)", log.read_text()).group(1)
        yield f"http://127.0.0.1:{port}", rubric
    finally:
        proc.terminate()
        proc.wait(60)


def test_grpo_with_a_judge_served_by_tether_serve(tiny_task, served_judge, tmp_path, capsys):
    url, rubric = served_judge
    judge = f"{{url: '{url}', model: tiny-judge, rubric: '{rubric}', max_tokens: 8}}"
    out = tmp_path / "run"
    assert main([*grpo_args(tiny_task["dir"], out, judge), "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert f"helpful (x 1): the judge 'tiny-judge' at {url} (answered)" in plan and str(rubric) in plan
    assert main(grpo_args(tiny_task["dir"], out, judge)) == 0
    rows = [r for r in read_metrics(out / "metrics.jsonl") if "objective/score_raw" in r]
    assert len(rows) == 2
    for row in rows:
        assert row["reward/helpful"] == 8.0 and row["judge/helpful/score_mean"] == 8.0  # every answer parsed
        assert row["judge/helpful/judged"] == 4 and row["judge/helpful/failure_rate"] == 0.0
        assert row["judge/helpful/completion_tokens"] > 0 and row["judge/helpful/latency_mean_s"] > 0
        assert "objective/gold/mean" in row and "constraint/bang/violation" in row
    assert rows[0]["constraint/bang/multiplier"] == 0.0
    # the multiplier climbs by 0.5 x the first batch's '!' rate (its limit is 0)
    assert rows[1]["constraint/bang/multiplier"] == pytest.approx(0.5 * rows[0]["reward/bang"])


def test_grpo_with_a_judge_loaded_in_process(tiny_task, judge_model, tmp_path, capsys):
    model, rubric = judge_model
    out = tmp_path / "run"
    args = grpo_args(tiny_task["dir"], out, f"{{path: '{model}', rubric: '{rubric}', max_tokens: 8}}")
    assert main([*args, "--dry-run"]) == 0
    assert f"helpful (x 1): the judge {model} in process: Qwen2ForCausalLM" in capsys.readouterr().out
    assert main(args) == 0
    rows = [r for r in read_metrics(out / "metrics.jsonl") if "objective/score_raw" in r]
    assert [r["reward/helpful"] for r in rows] == [8.0, 8.0]
    assert all(r["judge/helpful/failure_rate"] == 0.0 and r["judge/helpful/judged"] == 4 for r in rows)


def test_an_in_process_judge_counts_what_its_context_cannot_hold(judge_model):
    from tether.roles.local_judge import LocalJudge

    model, _ = judge_model
    ask = [{"role": "user", "content": RUBRIC.replace("{prompt}", "what is 1 + 1 ?").replace("{response}", "2")}]
    assert LocalJudge(str(model), max_tokens=8).ask([ask]) == ["Score: 8"]
    wide = LocalJudge(str(model), max_tokens=500)  # prompt + 500 > the judge's 512 positions
    assert wide.ask([ask, ask]) == [None, None]
    assert wide.stats.too_long == 1 and wide.stats.cache_hits == 1 and wide.stats.failures() == 1


def verdict(text: str) -> str:
    """9 for an answer with '!', 4 for one without; no score for an answer of an odd length."""
    answer = text.split("A: ", 1)[1].rsplit("\n", 1)[0]
    if len(answer) % 2:
        return "hard to say"
    return "Score: 9" if "!" in answer else "Score: 4"


def comparable(run_dir) -> list[dict]:
    """The metrics a resumed run must repeat: the judge's cache is per process, so its requests,
    cache hits and latency (and every timing) are left out."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    skip = ("timing/", "perf/", "judge/helpful/requests", "judge/helpful/cache_hits", "judge/helpful/latency",
            "judge/helpful/answered", "judge/helpful/prompt_tokens", "judge/helpful/completion_tokens")
    return [{k: v for k, v in r.items() if k != "time" and not k.startswith(skip)} for r in rows]


def test_failures_are_counted_and_a_killed_run_resumes_bit_for_bit(tiny_task, tmp_path):
    server = FakeJudge(answer=verdict)
    judge = f"{{url: '{server.url}', model: judge-1, rubric: '{tmp_path / 'rubric.txt'}', max_failure_rate: 1.0}}"
    (tmp_path / "rubric.txt").write_text(RUBRIC)
    try:
        whole, killed = tmp_path / "whole", tmp_path / "killed"
        assert main(grpo_args(tiny_task["dir"], whole, judge, iterations=4)) == 0
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "TETHER_FAULT": "checkpoint-write:3"}
        run = subprocess.run([sys.executable, "-m", "tether.cli", *grpo_args(tiny_task["dir"], killed, judge, 4)],
                             env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == -9, run.stderr[-3000:]
        assert [p.name for p in complete_checkpoints(killed)][-1] == "step-000002"
        resumed = subprocess.run([sys.executable, "-m", "tether.cli", "grpo", "--resume", str(killed)],
                                 env={**os.environ, "PYTHONUNBUFFERED": "1"}, capture_output=True, text=True,
                                 timeout=300)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
    finally:
        server.close()
    rows = [r for r in read_metrics(whole / "metrics.jsonl") if "objective/score_raw" in r]
    failed = sum(r["judge/helpful/unparseable"] for r in rows)
    assert 0 < failed < 16 and all(r["judge/helpful/failed"] == 0 for r in rows)  # counted, and the run went on
    assert sum(r["constraint/bang/multiplier"] > 0 for r in rows) >= 1
    assert comparable(killed) == comparable(whole)
    a, b = load_file(str(whole / "model.safetensors")), load_file(str(killed / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_judge_answering_garbage_stops_the_run_naming_it(tiny_task, tmp_path, capsys):
    server = FakeJudge(answer=lambda text: "I am not sure what you mean.")
    try:
        code = main(grpo_args(tiny_task["dir"], tmp_path / "run", f"{{url: '{server.url}', model: judge-1}}"))
    finally:
        server.close()
    err = capsys.readouterr().err
    assert code != 0
    assert "4 of 4 judgements of this batch failed, more than reward.terms[0].judge.max_failure_rate=0.5" in err
    assert "'I am not sure what you mean.'" in err and "Traceback" not in err


def shorter_wins(text: str) -> str:
    """A pairwise judge that prefers the shorter answer (a tie at equal length)."""
    a = text.split("A: ", 1)[1].split("\nB: ", 1)[0]
    b = text.split("\nB: ", 1)[1].rsplit("\n", 1)[0]
    return "Winner: tie" if len(a) == len(b) else f"Winner: {'A' if len(a) < len(b) else 'B'}"


@pytest.mark.parametrize("algorithm", ["online_dpo", "rs"])
def test_a_pairwise_judge_ranks_the_groups_of_online_dpo_and_rejection_sampling(tiny_task, tmp_path, capsys,
                                                                                 algorithm):
    server = FakeJudge(answer=shorter_wins)
    (tmp_path / "pair.txt").write_text("Q: {prompt}\nA: {response_a}\nB: {response_b}\n")
    task, out = tiny_task["dir"], tmp_path / "run"
    judge = f"{{url: '{server.url}', model: judge-1, mode: pairwise, rubric: '{tmp_path / 'pair.txt'}'}}"
    args = [algorithm, f"run.out={out}", "run.progress=false", "run.log_every=1", "run.seed=0", "run.threads=1",
            f"model.name_or_path={task / 'base_model'}", f"prompts={task / 'ppo_prompts.jsonl'}",
            f"reward.terms=[{{name: short, judge: {judge}}}]", "rl.iterations=2", "rollout.batch_size=2",
            "group.size=3", "rl.minibatch_size=6", "rollout.max_new_tokens=6", "rl.epochs=1",
            f"eval.prompts={task / 'eval_prompts.jsonl'}", "eval.max_prompts=4",
            "eval.judge=tether.tasks.arith.judge:gold_score"]
    try:
        assert main(args) == 0
    finally:
        server.close()
    rows = [r for r in read_metrics(out / "metrics.jsonl") if "objective/score_raw" in r]
    assert len(rows) == 2
    # Held out, one sample per prompt: the pairwise judge cannot score it alone, so no proxy score (said once).
    assert "eval/gold_score" in rows[-1] and "eval/proxy_score" not in rows[-1]
    assert "eval/proxy_score is not logged: reward term short judges" in capsys.readouterr().err
    for row in rows:
        assert row["judge/short/judged"] == 2 * 3 and row["judge/short/requests"] <= 12  # 3 pairs a group, 2 orders
        assert row["judge/short/failure_rate"] == 0.0 and row["judge/short/order_disagreement"] == 0.0
        assert row["reward/short"] == pytest.approx(0.5)  # win rates within a group average to a half


def test_tether_pairs_has_the_judge_label_what_it_sampled(tiny_task, tmp_path, capsys):
    server = FakeJudge(answer=lambda text: "Winner: B")
    task, pairs, labels = tiny_task["dir"], tmp_path / "pairs.jsonl", tmp_path / "labels.jsonl"
    try:
        assert main(["pairs", "--policy", str(task / "base_model"), "--prompts", str(task / "ppo_prompts.jsonl"),
                     "--out", str(pairs), "--max-prompts", "4", "--max-new-tokens", "6", "--judge-url", server.url,
                     "--judge-model", "judge-1", "--labels", str(labels)]) == 0
    finally:
        server.close()
    sampled = [json.loads(line) for line in pairs.read_text().splitlines()]
    said = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    judged = said["judge"]
    # "Winner: B" in both orders names each response once: position bias, a tie
    assert judged["tie"] == judged["position_bias"] == len(sampled) > 0 and judged["failed"] == 0
    ties = (tmp_path / "labels.jsonl.ties.jsonl").read_text().splitlines()
    assert len(ties) == judged["tie"] and all('"annotator": "judge:judge-1"' in t for t in ties)
