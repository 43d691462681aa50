"""`tether compare --pareto`'s settings (demo/pareto.py): --vary lists zipped into settings, their
names, and the front of each objective picked from the means over seeds."""

from __future__ import annotations

import pytest

from tether.common.errors import ConfigError
from tether.demo.pareto import front_labels, parse_vary, setting_label


def test_vary_lists_are_zipped_and_read_as_yaml():
    settings = parse_vary(["reward.terms[1].limit=null,0.35, 0.25", "reward.terms[1].weight=0,1,1"])
    assert settings == [{"reward.terms[1].limit": None, "reward.terms[1].weight": 0},
                        {"reward.terms[1].limit": 0.35, "reward.terms[1].weight": 1},
                        {"reward.terms[1].limit": 0.25, "reward.terms[1].weight": 1}]
    assert [setting_label(s) for s in settings] == ["limit=null,weight=0", "limit=0.35,weight=1",
                                                    "limit=0.25,weight=1"]
    # the same last part twice: the whole keys name the setting
    same = parse_vary(["reward.terms[0].weight=1,2", "reward.terms[1].weight=3,4"])
    assert setting_label(same[0]) == "reward.terms[0].weight=1,reward.terms[1].weight=3"


@pytest.mark.parametrize("items, needle", [
    ([], "at least one --vary"), (["x=1"], "at least 2"), (["x=1,2", "y=1"], "same length"),
    (["x"], "expected KEY=V1,V2"), (["x=1,2", "x=3,4"], "twice"),
])
def test_bad_vary_lists_are_named(items, needle):
    with pytest.raises(ConfigError, match=needle):
        parse_vary(items)


def test_each_objective_has_its_own_front():
    def stat(mean):
        return {"mean": mean}

    data = {"methods": {  # (gold, proxy, '!' rate)
        "free": {"gold_score": stat(0.30), "proxy_score": stat(1.2), "spurious_rate": stat(0.80)},
        "loose": {"gold_score": stat(0.25), "proxy_score": stat(0.9), "spurious_rate": stat(0.40)},
        "tight": {"gold_score": stat(0.20), "proxy_score": stat(0.6), "spurious_rate": stat(0.45)},
    }}
    fronts = front_labels(data)
    assert fronts["proxy_score"] == ["free"]  # most gold and most proxy
    assert fronts["spurious_rate"] == ["free", "loose"]  # tight: less gold and more '!' than loose
