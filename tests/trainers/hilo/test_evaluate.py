"""pass@k against the exact combinatorial formula, and the sampling evaluator."""
import math

import pytest
import torch

from trainers.hilo.evaluate import evaluate, gold_probabilities, pass_at_k
from trainers.model.models import build_model, build_tokenizer
from trainers.model.teacher import build_teacher
from trainers.model.rollout import generate_rollouts
from trainers.tasks import get_task

torch.set_num_threads(1)


@pytest.mark.parametrize("n, c, k, expected", [
    (1, 0, 1, 0.0), (1, 1, 1, 1.0), (2, 1, 1, 0.5), (4, 1, 4, 1.0), (5, 0, 3, 0.0),
    (10, 3, 2, 1 - 21 / 45), (10, 1, 5, 0.5), (8, 2, 4, 1 - 15 / 70), (100, 50, 1, 0.5),
])
def test_hand_cases(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_matches_exact_formula_on_a_table():
    for n in range(1, 16):
        for c in range(0, n + 1):
            for k in range(1, n + 1):
                exact = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12), (n, c, k)
    assert pass_at_k(200, 3, 1) == pytest.approx(3 / 200)


@pytest.mark.parametrize("n, c, k", [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5), (4.0, 2, 1)])
def test_rejects_bad_arguments(n, c, k):
    with pytest.raises(ValueError, match="pass_at_k"):
        pass_at_k(n, c, k)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    task = get_task("digits", ops="copy", max_len=3)
    cache = tmp_path_factory.getbasetemp() / "teachers"  # shared with test_objectives_training.py
    cache.mkdir(exist_ok=True)
    return task, build_teacher(task, "micro", steps=300, cache_dir=cache)


def test_evaluator_counts_match_rescoring(trained):
    task, model = trained
    tok = build_tokenizer("micro")
    problems = task.generate(10, seed=321)
    result = evaluate(model, tok, task, problems, n=4, k=2, max_new_tokens=6, temperature=1.0, seed=5,
                      batch_problems=3)
    assert result.num_problems == 10 and len(result.correct) == 10
    # re-derive every figure from the same seeded samples
    correct, rewards = [], []
    for start in range(0, 10, 3):
        chunk = problems[start:start + 3]
        r = generate_rollouts(model, tok, task, chunk, group_size=4, max_new_tokens=6, seed=5 + start)
        correct += [sum(task.is_correct(p, t) for t in r.texts[4 * g:4 * g + 4]) for g, p in enumerate(chunk)]
        rewards += r.rewards
    assert result.correct == correct
    assert result.pass_at_1 == pytest.approx(sum(correct) / 40)
    assert result.pass_at_k == pytest.approx(sum(pass_at_k(4, c, 2) for c in correct) / 10)
    assert result.mean_reward == pytest.approx(sum(rewards) / len(rewards))
    assert 0 < result.pass_at_1 <= result.pass_at_k <= 1  # a trained teacher solves some
    assert set(result.as_dict()) == {"n", "k", "pass_at_1", "pass_at_k", "mean_reward", "num_problems", "reverse_kl",
                                     "gold_prob"}
    assert len(result.gold_probs) == 10 and result.gold_prob == pytest.approx(sum(result.gold_probs) / 10)
    assert result.reverse_kl is None  # no teacher given


def test_untrained_model_scores_nothing_on_copy(trained):
    task, _ = trained
    model = build_model("micro")
    result = evaluate(model, build_tokenizer("micro"), task, task.generate(6, seed=1), n=2, k=2, max_new_tokens=6)
    assert result.pass_at_k == 0.0


def test_evaluator_rejects_bad_arguments(trained):
    task, model = trained
    tok = build_tokenizer("micro")
    with pytest.raises(ValueError, match="k <= n"):
        evaluate(model, tok, task, task.generate(2, seed=0), n=2, k=4)
    with pytest.raises(ValueError, match="no problems"):
        evaluate(model, tok, task, [], n=2, k=1)


@pytest.mark.parametrize("temperature", [1.0, 1.7])
def test_gold_probability_is_the_frequency_of_sampling_the_gold(trained, temperature):
    """P(gold) (one forward pass) against the sampler itself: over 10 problems x 200 samples, the
    count of samples that are exactly gold + EOS lies within 4 binomial sds of sum_i 200 P_i."""
    task, model = trained
    tok = build_tokenizer("micro")
    problems = task.generate(10, seed=77)
    probs = gold_probabilities(model, tok, task, problems, temperature=temperature, max_new_tokens=6,
                               batch_problems=4)
    assert len(probs) == 10 and all(0.0 <= p <= 1.0 for p in probs)
    n = 200
    r = generate_rollouts(model, tok, task, problems, group_size=n, max_new_tokens=6, temperature=temperature,
                          seed=11)
    hits = 0
    for g, p in enumerate(problems):
        gold = list(tok.encode(task.gold(p))) + [tok.eos_token_id]
        hits += sum(c == gold for c in r.completion_ids[g * n:(g + 1) * n])
    expected = n * sum(probs)
    sd = math.sqrt(n * sum(p * (1 - p) for p in probs))
    assert 0.05 < sum(probs) / 10 < 0.999  # a figure that can move in both directions
    assert abs(hits - expected) <= 4 * sd + 1, (hits, expected, sd)


def test_gold_probability_is_zero_when_the_gold_cannot_fit(trained):
    task, model = trained
    tok = build_tokenizer("micro")
    problems = task.generate(4, seed=3)
    width = max(len(tok.encode(task.gold(p))) for p in problems) + 1  # + EOS
    assert all(p > 0 for p in gold_probabilities(model, tok, task, problems, max_new_tokens=width))
    assert gold_probabilities(model, tok, task, problems, max_new_tokens=1) == [0.0] * 4
