"""The task contract: what every training task offers the rollout, objective and evaluator code.

A task is a deterministic generator of problems plus a scorer of completions. Problems are
generated locally from a seed (no downloads) and are plain frozen dataclasses, so that the
same `(task options, seed, n)` gives the same problems on every replica.

Contract (every task in `trainers/tasks/` implements all of it):

- `generate(n, seed) -> list[problem]`: `n` problems, a pure function of `(options, n, seed)`.
  `generate(n, seed)[:m] == generate(m, seed)` is NOT promised; use one `n` per stream.
- `prompt(problem) -> str`: the text the model is conditioned on. It ends where the answer
  begins; the model's completion is everything it samples after it, up to end-of-sequence.
- `gold(problem) -> str`: a correct completion in the canonical answer format (used by the
  tests, by the teacher warm-up in `trainers.objectives.distill`, and as a format example).
  `score(p, gold(p))` always has `correct=True` and the top reward `max_reward`.
- `score(problem, completion) -> Score`: the reward, whether the answer is correct, and a
  short reason (why the format was rejected, which part was wrong). Never raises on model
  output, however malformed: bad text scores low with a reason.
- `canonical(problem) -> str`: the problem's LOGICAL identity, the key of the held-out split
  (`trainers.tasks.heldout`): two problems with the same canonical form are the same question
  however they are worded (the same answer set), so one of them may not be trained on while the
  other is evaluated. The default is the prompt text; a task whose prompts can word one problem
  several ways (names, order of numbers, operands of a commutative op) must override it.
- `fields(problem) -> dict`: the problem's structured content as plain JSON values (what
  `harness data` prints next to the prompt and gold).
- `reward(problem, completion) -> float` and `is_correct(problem, completion) -> bool`:
  shorthands for `score(...).reward` and `score(...).correct`.
- `unique_gold` (class attribute, default True): every correct completion is the gold answer
  (digits: one output string; knights_knaves: one solution, one canonical listing). Then the
  exact P(one sample is the gold) is the held-out quality itself and `--quality-metric auto` reads
  it; a task with many right answers (countdown: any expression that hits the target) sets False
  and `auto` reads pass@1 instead (harness/results/quality.py).

Rewards lie in [0, max_reward] (max_reward = 1.0 for every task here) and separate format
from correctness: a well-formed wrong answer earns a small format reward, a correct one 1.0.
Each task documents its exact reward table in its module docstring.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Sequence

# Cap on the completion text a scorer looks at (characters): a runaway sample must not make
# scoring slow or memory-hungry; anything longer is judged malformed.
MAX_COMPLETION_CHARS = 4096


@dataclass(frozen=True)
class Score:
    """The verdict on one completion: reward in [0, 1], exact correctness, and why."""

    reward: float
    correct: bool
    reason: str = ""


class Task(ABC):
    """A problem generator and scorer; see the module docstring for the full contract."""

    name: str = ""
    max_reward: float = 1.0
    unique_gold: bool = True  # the gold is the only right answer: P(gold) is the quality (see above)

    @abstractmethod
    def generate(self, n: int, seed: int) -> list[Any]:
        """`n` problems, deterministic in `(options, n, seed)`."""

    @abstractmethod
    def prompt(self, problem: Any) -> str:
        """The conditioning text; the completion starts right after it."""

    @abstractmethod
    def gold(self, problem: Any) -> str:
        """A correct completion in the canonical format."""

    @abstractmethod
    def score(self, problem: Any, completion: str) -> Score:
        """Reward, correctness and reason for `completion`; never raises on malformed text."""

    def canonical(self, problem: Any) -> str:
        """The logical identity of `problem` (the held-out split's key); the prompt by default."""
        return self.prompt(problem)

    def fields(self, problem: Any) -> dict[str, Any]:
        """The problem's structured content as JSON values; the dataclass's fields by default."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in vars(problem).items()}

    def reward(self, problem: Any, completion: str) -> float:
        return self.score(problem, completion).reward

    def is_correct(self, problem: Any, completion: str) -> bool:
        return self.score(problem, completion).correct

    def rewards(self, problems: Sequence[Any], completions: Sequence[str]) -> list[float]:
        return [self.reward(p, c) for p, c in zip(problems, completions, strict=True)]

    def options(self) -> dict[str, Any]:
        """The options this task was built with (recorded in run configs and cache keys)."""
        return {}


def check_count(n: int) -> None:
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"number of problems must be a non-negative int, got {n!r}")
