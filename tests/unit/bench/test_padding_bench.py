"""`tether bench --stage`: the padded vs packed step bench's lengths, token counts and report."""

from __future__ import annotations

import json
import statistics

import pytest

from tether.bench import lengths, padding
from tether.bench.lengths import Lengths, longtail_lengths, padded_tokens, padding_fraction
from tether.cli import main


def test_longtail_lengths_are_seeded_and_clipped():
    a = longtail_lengths("sft", 500, seed=3)
    assert a == longtail_lengths("sft", 500, seed=3)
    assert a != longtail_lengths("sft", 500, seed=4)
    every = a.prompts + a.responses
    assert min(every) >= 8 and max(every) <= 1024
    assert 100 <= statistics.median(every) <= 160  # median e^mu = 128
    assert max(every) > 4 * statistics.median(every)  # a long tail
    pairs = longtail_lengths("dpo", 50, seed=0)
    assert pairs.rejected is not None and len(pairs.rejected) == 50


def test_rl_lengths_repeat_each_prompt_over_its_group():
    rl = longtail_lengths("grpo", 5, group=4, seed=0)
    assert len(rl.prompts) == len(rl.responses) == 20
    assert all(len(set(rl.prompts[i:i + 4])) == 1 for i in range(0, 20, 4))


def test_demo_lengths_come_from_the_demo_task():
    sft = lengths.demo_lengths("sft", 8, seed=0)
    assert sft == lengths.demo_lengths("sft", 8, seed=0)
    assert all(p > 0 for p in sft.prompts) and all(1 < r <= 64 for r in sft.responses)  # ends with EOS
    pairs = lengths.demo_lengths("rm", 4, seed=0)
    assert len(pairs.rejected) == 4


def test_padded_tokens_of_each_stage_by_hand():
    # SFT rows (10, 5), (20, 15): 50 real tokens of 2 x 35.
    assert padded_tokens("sft", Lengths([10, 20], [5, 15])) == (50, 70)
    # RM: sequences 3+2, 5+4, 3+1, 5+6 = 5, 9, 4, 11 -> 29 real of 4 x 11.
    assert padded_tokens("rm", Lengths([3, 5], [2, 4], [1, 6])) == (29, 44)
    # DPO: 4 sequences, prompts left-padded to 5, responses right-padded to 6: 4 x 11.
    assert padded_tokens("dpo", Lengths([3, 5], [2, 4], [1, 6])) == (29, 44)
    # RL: prompts to 5, responses to 4: 2 x 9.
    assert padded_tokens("ppo", Lengths([3, 5], [2, 4])) == (14, 18)
    assert padding_fraction(50, 70) == pytest.approx(20 / 70)
    assert padding_fraction(0, 0) == 0.0


def _fixed(lengths):
    return lambda kind, stage, rows, group=1, seed=0: lengths


@pytest.mark.parametrize("stage,lengths,expected", [
    ("sft", Lengths([10, 20], [5, 15]), 20 / 70),
    ("ppo", Lengths([3, 5], [2, 4]), 4 / 18),
])
def test_report_keys_speedup_and_measured_padding(monkeypatch, stage, lengths, expected):
    monkeypatch.setattr(padding, "step_lengths", _fixed(lengths))
    report = padding.run_padding_bench(stage, "demo", "micro", rows=2, iterations=2, threads=1)
    json.dumps(report)
    for mode in ("padded", "packed"):
        assert {"tokens_per_s", "padding_fraction", "step_s"} <= set(report[mode])
        assert len(report[mode]["steps_s"]) == 2
    assert report["speedup"] == pytest.approx(report["packed"]["tokens_per_s"] / report["padded"]["tokens_per_s"])
    # Counted at the first transformer layer: the padded batch's shapes, hand-computed above.
    assert report["padded"]["padding_fraction"] == pytest.approx(expected)
    if report["setup"]["packing_core"]:
        assert report["packed"]["padding_fraction"] == pytest.approx(0.0)
    setup = report["setup"]
    assert setup["real_tokens_per_step"] == sum(lengths.prompts) + sum(lengths.responses)
    assert {"stage", "lengths", "size", "rows", "seed", "threads", "torch_threads"} <= set(setup)
    if stage == "ppo":
        assert set(report["padded"]["passes_s"]) == {"logprobs", "ref_logprobs", "values", "reward", "total"}
        assert report["padded"]["passes_padding_fraction"] == pytest.approx(expected)
        assert report["passes_speedup"] > 0


def test_cli_stage_prints_one_json_object(capsys, tmp_path):
    out = tmp_path / "bench.json"
    code = main(["bench", "--stage", "grpo", "--lengths", "longtail", "--size", "micro", "--batch", "2",
                 "--iterations", "1", "--threads", "1", "--out", str(out)])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report == json.loads(out.read_text())
    assert report["stage"] == "grpo" and report["lengths"] == "longtail"
    assert report["setup"]["sequences"] == 8  # 2 prompts x GRPO's group of 4
    assert set(report) >= {"padded", "packed", "speedup"}


@pytest.mark.parametrize("argv", [["--lengths", "demo"], ["--stage", "sft", "--epochs", "2"],
                                  ["--stage", "ppo", "--algorithm", "grpo"]])
def test_cli_refuses_flags_that_do_not_go_together(capsys, argv):
    assert main(["bench", *argv]) == 2
    assert "--stage" in capsys.readouterr().err
