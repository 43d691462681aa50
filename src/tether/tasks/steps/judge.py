"""The multi-step world's gold judges: the share of a response's steps that are correct, and
whether its final answer is right (:mod:`tether.tasks.steps.world`)."""

from __future__ import annotations

from tether.tasks.steps import world


def _problem_prompt(prompt) -> str | None:
    """The world's question of a prompt (a string, or chat messages: the last user message)."""
    if isinstance(prompt, list):
        users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        prompt = users[-1] if users else ""
    return prompt if world.parse_prompt(str(prompt)) is not None else None


def is_correct(prompt, response: str) -> bool:
    """The response's last number is the problem's answer."""
    question = _problem_prompt(prompt)
    return question is not None and world.last_number(response) == world.correct_answer(question)


def gold_score(prompt, response: str, ended: bool = True) -> float:
    """Process gold: the share of the problem's two steps the response gets right (a response with
    more or fewer steps is scored over two), 0 for a response cut at the length cap."""
    question = _problem_prompt(prompt)
    if question is None or not ended:
        return 0.0
    return sum(world.step_labels(question, response)) / 2


def gold_reward(prompts: list, responses: list[str]) -> list[float]:
    """``reward.callable``'s form: final-answer correctness, 1.0 or 0.0."""
    return [float(is_correct(p, r)) for p, r in zip(prompts, responses)]


def answer_score(prompt, response: str, ended: bool = True) -> float:
    """``tether eval --judge``'s form of final-answer correctness: 1.0 when the response ended and
    its last number is the answer, else 0.0."""
    return float(ended and is_correct(prompt, response))
