"""Knights & Knaves: uniqueness by an independent brute force over the *rendered* puzzle text,
and the documented reward table."""
import itertools
import re

import pytest

from trainers.tasks import get_task
from trainers.tasks.knights_knaves import parse_answer


# --- an independent reader of the prompt: English statement -> predicate over an assignment ---

def _strip_parens(s: str) -> str:
    s = s.strip()
    while s.startswith("(") and _close(s, 0) == len(s) - 1:
        s = s[1:-1].strip()
    return s


def _close(s: str, i: int) -> int:
    depth = 0
    for j in range(i, len(s)):
        depth += {"(": 1, ")": -1}.get(s[j], 0)
        if depth == 0:
            return j
    raise AssertionError(f"unbalanced: {s}")


def _split_top(s: str, sep: str) -> list[str]:
    parts, depth, start, i = [], 0, 0, 0
    while i < len(s):
        depth += {"(": 1, ")": -1}.get(s[i], 0)
        if depth == 0 and s.startswith(sep, i):
            parts.append(s[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    return parts + [s[start:]]


def read(s: str):
    s = _strip_parens(s)
    m = re.fullmatch(r"(\w+) is a (knight|knave)", s) or re.fullmatch(r"(\w+) (knight|knave)", s)  # prose | compact
    if m:
        return lambda a, n=m.group(1), k=m.group(2) == "knight": a[n] == k
    for negation in ("it is not true that ", "not "):
        if s.startswith(negation):
            inner = read(s[len(negation):])
            return lambda a: not inner(a)
    for sep, combine in ((" implies ", lambda xs: (not xs[0]) or xs[1]), (" iff ", lambda xs: xs[0] == xs[1])):
        parts = _split_top(s, sep)  # compact binary operators
        if len(parts) > 1:
            assert len(parts) == 2, s
            preds = [read(p) for p in parts]
            return lambda a, preds=preds, combine=combine: combine([p(a) for p in preds])
    if s.startswith("if "):
        cond, then = _split_top(s[3:], " then ")
        c, t = read(cond), read(then)
        return lambda a: (not c(a)) or t(a)
    for sep, combine in ((" if and only if ", lambda xs: xs[0] == xs[1]), (" and ", all), (" or ", any)):
        parts = _split_top(s, sep)
        if len(parts) > 1:
            preds = [read(p) for p in parts]
            return lambda a, preds=preds, combine=combine: combine([p(a) for p in preds])
    raise AssertionError(f"cannot read statement {s!r}")


def brute_force(prompt: str) -> list[dict[str, bool]]:
    if prompt.startswith("Knights always"):  # style=prose
        names = re.search(r"Inhabitants: (.*?)\. ", prompt).group(1).split(", ")
        says = dict(re.findall(r"(\w+) says: (.*?)\.(?= \w+ says:| Who is)", prompt))
    else:  # style=compact: "A: <statement>. B: <statement>.\nAnswer: "
        assert prompt.endswith("\nAnswer: "), prompt
        says = dict(re.findall(r"(\w+): (.*?)\.(?= \w+:|\n)", prompt))
        names = list(says)
    assert sorted(says) == sorted(names)
    preds = {n: read(says[n]) for n in names}
    out = []
    for roles in itertools.product((True, False), repeat=len(names)):
        a = dict(zip(names, roles))
        if all(preds[n](a) == a[n] for n in names):
            out.append(a)
    return out


@pytest.mark.parametrize("options", [{}, {"min_people": 2, "max_people": 8, "depth": 3, "width": 3},
                                     {"min_people": 5, "max_people": 5, "depth": 1},
                                     {"min_people": 2, "max_people": 8, "depth": 3, "style": "compact"},
                                     {"min_people": 2, "max_people": 5, "names": "letters"},
                                     {"max_people": 2, "depth": 1, "names": "letters", "style": "compact"}])
def test_every_puzzle_has_exactly_one_solution_and_gold_is_it(options):
    task = get_task("knights_knaves", **options)
    for p in task.generate(25, seed=11):
        found = brute_force(task.prompt(p))
        assert len(found) == 1, task.prompt(p)
        gold = dict((n, r == "knight") for n, r in re.findall(r"\(\d+\) (\w+) is a (knight|knave)", task.gold(p)))
        assert gold == found[0]
        assert task.score(p, task.gold(p)).reward == task.max_reward == 1.0


def test_letters_and_compact_change_the_surface_not_the_logic():
    """Same seed, same statements and solutions: only the names and the rendering differ."""
    people = get_task("knights_knaves", max_people=3)
    letters = get_task("knights_knaves", max_people=3, names="letters", style="compact")
    for a, b in zip(people.generate(20, seed=5), letters.generate(20, seed=5)):
        assert (a.statements, a.solution) == (b.statements, b.solution)
        assert b.names == tuple("ABC"[:len(a.names)])
        prompt = letters.prompt(b)
        assert "says" not in prompt and "Knights always" not in prompt and len(prompt) < len(people.prompt(a)) / 2
        assert letters.score(b, letters.gold(b)).correct
    assert letters.options()["names"] == "letters" and letters.options()["style"] == "compact"


def test_people_count_and_determinism():
    task = get_task("knights_knaves", min_people=2, max_people=8)
    problems = task.generate(60, seed=3)
    assert {len(p.names) for p in problems} >= {2, 8}
    assert problems == task.generate(60, seed=3) and problems != task.generate(60, seed=4)


@pytest.fixture
def puzzle():
    task = get_task("knights_knaves", min_people=3, max_people=3)
    return task, task.generate(1, seed=0)[0]


def test_tolerant_in_form(puzzle):
    task, p = puzzle
    clauses = [f"{n} is a {'knight' if k else 'knave'}" for n, k in zip(p.names, p.solution)]
    variants = [" ".join(reversed(clauses)), ",  ".join(c.upper() for c in clauses) + ".",
                "\n".join(f"( {i} )  {c}" for i, c in enumerate(clauses, 1)), "; ".join(clauses[:2]) + " and " + clauses[2]]
    for text in variants:
        s = task.score(p, text)
        assert (s.reward, s.correct) == (1.0, True), (text, s)


def test_wrong_and_missing_score_format_only(puzzle):
    task, p = puzzle
    flipped = [not k if i == 1 else k for i, k in enumerate(p.solution)]
    wrong = " ".join(f"({i}) {n} is a {'knight' if k else 'knave'}" for i, (n, k) in enumerate(zip(p.names, flipped), 1))
    s = task.score(p, wrong)
    assert (s.reward, s.correct) == (0.1, False) and p.names[1] in s.reason
    missing = task.gold(p).split(" (3)")[0]  # the first two clauses only
    s = task.score(p, missing)
    assert (s.reward, s.correct) == (0.1, False) and f"missing {p.names[2]}" in s.reason


@pytest.mark.parametrize("make, reason", [
    (lambda p: "", "no '<name> is a knight/knave' clause"),
    (lambda p: "I think everyone is nice", "no '<name> is a knight/knave' clause"),
    (lambda p: "Zed is a knight", "unknown name 'Zed'"),
    (lambda p: f"{p.names[0]} is a knight {p.names[0]} is a knave", "named twice"),
    (lambda p: "Sure! " + f"{p.names[0]} is a knight", "unexpected text 'Sure!'"),
    (lambda p: f"{p.names[0]} is a knight because reasons", "unexpected text 'because reasons'"),
    (lambda p: "x" * 5000, "answer too long"),
])
def test_malformed_scores_zero(puzzle, make, reason):
    task, p = puzzle
    s = task.score(p, make(p))
    assert (s.reward, s.correct) == (0.0, False) and reason in s.reason


def test_parse_answer_returns_roles():
    assert parse_answer("(1) Ann is a knave (2) bob IS A KNIGHT", ("Ann", "Bob")) == {"Ann": False, "Bob": True}


@pytest.mark.parametrize("options", [{"min_people": 1}, {"max_people": 9}, {"min_people": 4, "max_people": 3},
                                     {"depth": 0}, {"depth": 5}, {"width": 1}, {"names": "greek"},
                                     {"style": "terse"}])
def test_bad_options(options):
    with pytest.raises(ValueError, match="knights_knaves"):
        get_task("knights_knaves", **options)
