"""The overlap of sampling and training in an asynchronous run, from its metrics, and its report section."""

from __future__ import annotations

import pytest

from tether.plots.overlap import overlap_summary
from tether.plots.report import build_report

from tests.unit.plots.test_report import make_run, ppo_rows, write_jsonl


def async_rows() -> list[dict]:
    """Four iterations: the worker sampled 1.0 s each; the trainer waited 1.0 s for the first rollout
    (nothing was sampled ahead yet), then 0.1, 0.0 and 0.3 s."""
    waits = [1.0, 0.1, 0.0, 0.3]
    return [{"step": i + 1, "timing/engine_generate": 1.0, "timing/rollout_wait": w, "timing/engine_wait": 0.5,
             "rollout/staleness_mean": float(min(i, 1)), "rollout/staleness_max": float(min(i, 1)),
             "timing/iteration": 2.0} for i, w in enumerate(waits)]


def test_overlap_is_the_share_of_sampling_the_trainer_did_not_wait_for():
    got = overlap_summary(async_rows())
    assert got["iterations"] == 4
    assert got["sampling_s"] == pytest.approx(4.0)
    assert got["trainer_wait_s"] == pytest.approx(1.4)
    assert got["overlap"] == pytest.approx(1 - 0.4 / 3.0)  # after the first iteration, which cannot overlap
    assert got["trainer_wait_s_median"] == pytest.approx(0.2)
    assert got["engine_wait_s"] == pytest.approx(2.0)
    assert (got["staleness_mean"], got["staleness_max"]) == (0.75, 1.0)


def test_a_synchronous_run_has_no_overlap_to_show(tmp_path):
    assert overlap_summary(ppo_rows(5)) is None
    text = build_report(make_run(tmp_path / "sync")).read_text(encoding="utf-8")
    assert "Asynchronous rollouts" not in text


def test_the_report_shows_the_overlap_of_an_asynchronous_run(tmp_path):
    run = make_run(tmp_path / "async")
    rows = ppo_rows(4)
    for row, extra in zip(rows[1:], async_rows()):
        row.update({k: v for k, v in extra.items() if k != "step"})
    write_jsonl(run / "metrics.jsonl", rows)
    text = build_report(run).read_text(encoding="utf-8")
    assert "Asynchronous rollouts" in text
    assert "sampling hidden behind training" in text and "0.867" in text
    assert "0.75 / 1" in text
    assert text.count("data:image/png;base64,") == 2  # the training curves and the overlap panels
