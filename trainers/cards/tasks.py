"""The in-tree tasks' cards (trainers/tasks/*.py implement them; the contract is trainers/tasks/base.py).
A task's options are its constructor's keywords (`--task-options key=value,...`, typed like each keyword's
default and range-checked by the constructor: trainers/tasks/__init__.py parse_task_options)."""
from __future__ import annotations

from trainers.cards import Card

COUNTDOWN = Card("task", "countdown", "trainers.tasks.countdown:Countdown")
DIGITS = Card("task", "digits", "trainers.tasks.digits:Digits")
KNIGHTS_KNAVES = Card("task", "knights_knaves", "trainers.tasks.knights_knaves:KnightsKnaves")
