"""The in-tree tasks' cards (trainers/tasks/*.py implement them; the contract is trainers/tasks/base.py).

A task's options are its card's: `--task-options key=value,...` is parsed, typed and range-checked against
them without importing the task (trainers/tasks/__init__.py parse_task_options), and the task's constructor
takes them as keywords of the same names and defaults (tests/trainers/test_cards.py holds the two equal).
"""
from __future__ import annotations

from trainers.cards import Card, Option

COUNTDOWN = Card("task", "countdown", "trainers.tasks.countdown:Countdown", {
    "count": Option(4, "numbers per problem", type=int, lo=2, hi=5),
    "max_number": Option(99, "largest number drawn", type=int, lo=1, hi=10_000),
    "max_target": Option(100, "largest target", type=int, lo=1, hi=100_000),
    "exactly_once": Option(True, "each number used exactly once (else at most once)", type=bool)})
DIGITS = Card("task", "digits", "trainers.tasks.digits:Digits", {
    # the default leaves add out (trainers/tasks/digits.py DEFAULT_OPS says why)
    "ops": Option(("copy", "reverse"), "operations, each problem picks one", choices=("copy", "reverse", "add"),
                  many=True),
    "min_len": Option(1, "fewest digits per operand", type=int, lo=1, hi=32),
    "max_len": Option(4, "most digits per operand", type=int, lo=1, hi=32, at_least="min_len")})
KNIGHTS_KNAVES = Card("task", "knights_knaves", "trainers.tasks.knights_knaves:KnightsKnaves", {
    "min_people": Option(2, "fewest people per puzzle", type=int, lo=2, hi=8),
    "max_people": Option(4, "most people per puzzle", type=int, lo=2, hi=8, at_least="min_people"),
    # depth 0 (atoms only) never has a unique solution (trainers/tasks/knights_knaves.py says why)
    "depth": Option(2, "nesting depth of a statement", type=int, lo=1, hi=4),
    "width": Option(2, "operands of an and/or", type=int, lo=2, hi=4),
    "names": Option("people", "what the speakers are called", choices=("people", "letters")),
    "style": Option("prose", "how statements are written", choices=("prose", "compact"))})
