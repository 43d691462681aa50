"""The episode engine over the tools environment, with an engine that writes scripted turns: the
sampled ids stay verbatim, observations are context (action mask 0), and every fault of a tool or
of a call (raising, hanging past its timeout, malformed, unknown) is an error observation and a
counter, never an exception out of the rollout."""

from __future__ import annotations

import json

import pytest
import torch

from tether.bench.shapes import sized_tokenizer
from tether.environments.base import EnvironmentSettings
from tether.environments.tool_env import ToolEnvironment
from tether.rollout.base import SamplingParams
from tether.rollout.episode_metrics import episode_metrics
from tether.rollout.episodes import EpisodeEngine
from tether.types import Rollout

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}
TOOLS = [{"type": "function", "function": {"name": name, "description": name, "parameters": params}}
         for name, params in (("add", SCHEMA), ("boom", {"type": "object", "properties": {}}),
                              ("sleepy", {"type": "object", "properties": {}}))]


def call(name: str, **arguments) -> str:
    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


class ScriptedEngine:
    """Samples, for the episode of prompt row i, the i-th script's next turn (its text's ids and the
    stop token), with log-prob -0.5 per token."""

    def __init__(self, tokenizer, scripts: list[list[str]]):
        self.tokenizer, self.scripts, self.calls = tokenizer, scripts, 0
        self.turn = {}
        self.stop = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def generate(self, prompt_ids, prompts, params, chunk_size=None) -> Rollout:
        self.calls += 1
        rows = []
        for prompt in prompts:
            i = int(prompt.split()[-1])
            k = self.turn.get(i, 0)
            self.turn[i] = k + 1
            rows.append(self.tokenizer.encode(self.scripts[i][k], add_special_tokens=False) + [self.stop])
        width = max(map(len, rows))
        ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        return Rollout(prompt_ids=torch.zeros(len(rows), 1, dtype=torch.long), prompt_mask=torch.ones(len(rows), 1),
                       response_ids=ids, response_mask=mask, ended=torch.ones(len(rows), dtype=torch.bool),
                       prompts=list(prompts), responses=[""] * len(rows), sampled_logprobs=-0.5 * mask.float())


SCRIPTS = [
    [call("add", a=2, b=3), "The answer is 5."],
    [call("boom"), "It failed."],
    [call("sleepy"), "Too slow."],
    ['<tool_call>{"name": "add", "arguments": {"a": 2,</tool_call>', "Malformed."],
    [call("nope"), "Unknown."],
    [call("add", a="two", b=3), "Wrong arguments."],
    [call("add", a=1, b=1), call("add", a=2, b=2), call("add", a=3, b=3)],  # still calling at max_turns
]


@pytest.fixture(scope="module")
def tokenizer():
    return sized_tokenizer(2048)


@pytest.fixture
def episodes(tokenizer):
    settings = EnvironmentSettings(max_turns=3, tools={n: f"episode_tools:{n}" for n in ("add", "boom", "sleepy")},
                                   tool_timeout_s=0.3, tool_workers=4)
    made = ToolEnvironment.episodes(settings)
    yield made
    made.close()


def run(tokenizer, episodes, scripts=SCRIPTS, max_tokens=400):
    engine = ScriptedEngine(tokenizer, scripts)
    rows = [{"messages": [{"role": "user", "content": f"question {i}"}], "tools": TOOLS} for i in range(len(scripts))]
    episode_engine = EpisodeEngine(engine, tokenizer, episodes, max_turns=3, max_tokens=max_tokens)
    out = episode_engine.generate([[0]] * len(rows), [f"question {i}" for i in range(len(rows))],
                                  SamplingParams(max_new_tokens=64), rows=rows)
    return out, engine


def test_the_sampled_ids_stay_verbatim_and_observations_are_context(tokenizer, episodes):
    out, _ = run(tokenizer, episodes)
    first = tokenizer.encode(SCRIPTS[0][0], add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    n = len(first)
    assert out.response_ids[0, :n].tolist() == first and out.action_mask[0, :n].tolist() == [1] * n
    obs = out.action_mask[0, n:].tolist().index(1)  # the observation: template text and the tool's answer
    text = tokenizer.decode(out.response_ids[0, n:n + obs])
    assert "<|im_start|>tool" in text and "5" in text and text.endswith("<|im_start|>assistant\n")
    assert out.responses[0] == "The answer is 5."
    assert torch.equal(out.sampled_logprobs * (1 - out.action_mask), torch.zeros_like(out.sampled_logprobs))
    assert torch.equal(out.sampled_logprobs[out.action_mask.bool()], torch.full((int(out.action_mask.sum()),), -0.5))


def test_every_fault_is_an_error_observation_and_a_counter(tokenizer, episodes):
    out, engine = run(tokenizer, episodes)
    records = out.episodes
    assert [r.stats.counters.get("tool_errors", 0) for r in records][:2] == [0, 1]
    assert records[2].stats.counters.get("tool_timeouts") == 1
    assert records[3].stats.counters.get("malformed_calls") == 1
    assert records[4].stats.counters.get("unknown_tools") == 1
    assert records[5].stats.counters.get("bad_arguments") == 1
    for i in range(6):  # each went on to its final answer
        assert records[i].stats.turns == 2 and not records[i].stats.truncated and bool(out.ended[i])
        assert records[i].messages[2]["role"] == "tool"
    assert "error" in records[1].messages[2]["content"]
    assert records[6].stats.truncated and records[6].stats.turns == 3 and not bool(out.ended[6])
    assert engine.calls == 3
    metrics = episode_metrics(out)
    assert metrics["env/tool_errors"] == 1 and metrics["env/tool_timeouts"] == 1
    assert metrics["env/truncated"] == pytest.approx(1 / 7)
    assert 0 < metrics["env/observation_share"] < 1


def test_an_episode_over_its_token_budget_is_truncated(tokenizer, episodes):
    out, _ = run(tokenizer, episodes, scripts=[SCRIPTS[0]], max_tokens=30)
    assert out.episodes[0].stats.truncated and not bool(out.ended[0])
    assert int(out.response_mask.sum()) <= 30
