"""A third-party environment kind, as a user would write it outside tether's source: one file with
the environment and its registry entry. It asks ``questions`` follow-up questions (``args:
[questions=N]``) and rewards each turn that holds a number with 1.0 (a per-turn reward)."""

from tether.environments.base import Episodes, Step, opening_messages
from tether.registry.environments import EnvironmentSpec, register_environment

FOLLOW_UP = "what is 1 + 1 ?"


class QuizEnvironment:
    tools: list[dict] = []

    def __init__(self, questions: int):
        self.questions, self.left = questions, 0

    @classmethod
    def episodes(cls, settings) -> Episodes:
        return Episodes(lambda: cls(int(settings.args.get("questions", 1))))

    @staticmethod
    def check_row(row, where="the prompt row"):
        opening_messages(row, where)

    def reset(self, row, where="the prompt row"):
        self.left = self.questions
        return opening_messages(row, where)

    def step(self, text: str) -> Step:
        reward = 1.0 if any(word.lstrip("-").isdigit() for word in text.split()) else 0.0
        if self.left == 0:
            return Step([], reward, done=True)
        self.left -= 1
        return Step([{"role": "user", "content": FOLLOW_UP}], reward, done=False)


register_environment(EnvironmentSpec("quiz", f"{__name__}:QuizEnvironment",
                                     "follow-up questions, a reward for each turn that answers with a number",
                                     ("prompt", "messages")))
