"""Rollouts: wire round trip, validation of untrusted tensors, deterministic cached sampling."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trainers.model.models import LoraSpec, build_model, build_tokenizer
from trainers.objectives.base import completion_logprobs, pack
from trainers.model.rollout import MAX_ROWS, Rollouts, concat, generate_rollouts
from trainers.tasks import get_task

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model():
    return build_model("micro", LoraSpec(rank=4, init="random"), seed=0)


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer("micro")


def small_rollouts(version=3) -> Rollouts:
    return Rollouts(problem_index=[0, 0, 1], prompt_ids=[[257, 1, 2], [257, 1, 2], [257, 9]],
                    completion_ids=[[5, 258], [], [7, 8, 9]],
                    logprobs=[[-0.5, -1.25], [], [-2.0, -0.125, -3.5]],
                    rewards=[1.0, 0.1, 0.0], policy_version=version, temperature=0.7)


rows = st.lists(st.tuples(st.integers(0, 50), st.lists(st.integers(0, 258), min_size=1, max_size=6),
                          st.lists(st.tuples(st.integers(0, 258), st.floats(-30, 0, width=32)), max_size=6),
                          st.floats(-5, 5)), max_size=8)


@settings(max_examples=50, deadline=None)
@given(rows, st.integers(0, 2**40))
def test_tensor_round_trip(data, version):
    r = Rollouts([d[0] for d in data], [d[1] for d in data], [[t for t, _ in d[2]] for d in data],
                 [[lp for _, lp in d[2]] for d in data], [d[3] for d in data], version, 1.0)
    t = r.to_tensors()
    assert all(v.dim() == 1 for v in t.values())
    assert Rollouts.from_tensors(t) == r


def corrupt(key, value):
    t = small_rollouts().to_tensors()
    t[key] = value
    return t


@pytest.mark.parametrize("tensors, message", [
    (corrupt("prompt_offsets", torch.tensor([1, 3, 6, 8])), "prompt_offsets must run from 0"),
    (corrupt("prompt_offsets", torch.tensor([0, 5, 3, 8])), "not non-decreasing"),
    (corrupt("completion_offsets", torch.tensor([0, 2, 2, 6])), "completion_offsets must run"),
    (corrupt("completion_offsets", torch.tensor([0, 2, 5])), "completion_offsets has 3 elements"),
    (corrupt("logprobs", torch.zeros(4)), "4 logprobs for 5 completion tokens"),
    (corrupt("logprobs", torch.tensor([0.5, -1, -1, -1, -1])), "logprobs must be <= 0"),
    (corrupt("rewards", torch.tensor([1.0, float("nan"), 0.0], dtype=torch.float64)), "non-finite reward"),
    (corrupt("rewards", torch.tensor([1.0, 0.0, 0.0])), "rewards must be a 1-D torch.float64"),
    (corrupt("problem_index", torch.zeros((3, 1), dtype=torch.int64)), "problem_index must be a 1-D"),
    (corrupt("temperature", torch.tensor([0.0], dtype=torch.float64)), "temperature must be positive"),
    (corrupt("policy_version", torch.tensor([1, 2])), "policy_version has 2 elements"),
    (corrupt("extra", torch.zeros(1)), "unexpected keys ['extra']"),
    ({k: v for k, v in small_rollouts().to_tensors().items() if k != "rewards"}, "missing keys ['rewards']"),
    (corrupt("prompt_ids", [1, 2, 3]), "prompt_ids must be a 1-D"),
    ([("a", 1)], "expected a dict"),
    (corrupt("prompt_offsets", torch.tensor([0, 0, 6, 8])), "row 0 has an empty prompt"),
    (corrupt("completion_ids", torch.tensor([5, 258, 7, -8, 9])), "row 2 has a negative token id"),
])
def test_from_tensors_rejects(tensors, message):
    with pytest.raises(ValueError) as e:
        Rollouts.from_tensors(tensors)
    assert message in str(e.value)


def test_from_tensors_rejects_too_many_rows():
    n = MAX_ROWS + 1
    t = {"problem_index": torch.zeros(n, dtype=torch.int64), "prompt_ids": torch.zeros(0, dtype=torch.int64),
         "prompt_offsets": torch.zeros(n + 1, dtype=torch.int64), "completion_ids": torch.zeros(0, dtype=torch.int64),
         "completion_offsets": torch.zeros(n + 1, dtype=torch.int64), "logprobs": torch.zeros(0),
         "rewards": torch.zeros(n, dtype=torch.float64), "policy_version": torch.zeros(1, dtype=torch.int64),
         "temperature": torch.ones(1, dtype=torch.float64)}
    with pytest.raises(ValueError, match="exceeds the limit"):
        Rollouts.from_tensors(t)


def test_constructor_checks_lengths():
    with pytest.raises(ValueError, match="row 0 has 2 completion tokens but 1 logprobs"):
        Rollouts([0], [[1]], [[1, 2]], [[-1.0]], [0.0])
    with pytest.raises(ValueError, match="rewards has 2 rows"):
        Rollouts([0], [[1]], [[1]], [[-1.0]], [0.0, 1.0])


def test_concat_and_groups():
    a, b = small_rollouts(), small_rollouts()
    b.problem_index = [5, 5, 6]
    c = concat([a, b])
    assert len(c) == 6 and c.completion_ids[3:] == b.completion_ids
    assert c.groups() == {0: [0, 1], 1: [2], 5: [3, 4], 6: [5]}
    with pytest.raises(ValueError, match="mixed policy versions"):
        concat([small_rollouts(1), small_rollouts(2)])
    with pytest.raises(ValueError, match="no rollouts"):
        concat([])


def test_generation_is_seeded_and_grouped(model, tok):
    task = get_task("digits")
    problems = task.generate(3, seed=0)
    a = generate_rollouts(model, tok, task, problems, group_size=4, max_new_tokens=12, seed=5, policy_version=7)
    b = generate_rollouts(model, tok, task, problems, group_size=4, max_new_tokens=12, seed=5, policy_version=7)
    c = generate_rollouts(model, tok, task, problems, group_size=4, max_new_tokens=12, seed=6)
    assert a == b and a.completion_ids != c.completion_ids
    assert a.problem_index == [0] * 4 + [1] * 4 + [2] * 4 and a.policy_version == 7
    for g, p in enumerate(problems):
        assert a.prompt_ids[4 * g] == [tok.bos_token_id] + list(task.prompt(p).encode())
    for ids, text, reward, p in zip(a.completion_ids, a.texts, a.rewards, [p for p in problems for _ in range(4)]):
        assert tok.eos_token_id not in ids[:-1]  # EOS only ever ends a completion
        assert ids[-1:] == [tok.eos_token_id] or len(ids) == 12
        assert reward == task.reward(p, text)


def test_cached_logprobs_match_a_full_forward(model, tok):
    """The KV-cached, left-padded sampler and the learner's right-padded forward agree."""
    task = get_task("knights_knaves")  # prompts of very different lengths: real left padding
    r = generate_rollouts(model, tok, task, task.generate(3, seed=1), group_size=2, max_new_tokens=10,
                          temperature=0.8, seed=0)
    assert len({len(p) for p in r.prompt_ids}) > 1
    packed = pack(r)
    with torch.no_grad():
        lp = completion_logprobs(model, packed, r.temperature)
    assert torch.allclose(lp, packed.old_logprobs, atol=1e-4)
    assert packed.mask.sum() == r.num_completion_tokens()


def test_generation_rejects_bad_arguments(model, tok):
    task = get_task("digits")
    with pytest.raises(ValueError, match="group_size"):
        generate_rollouts(model, tok, task, task.generate(1, 0), group_size=0, max_new_tokens=4)
    with pytest.raises(ValueError, match="temperature"):
        generate_rollouts(model, tok, task, task.generate(1, 0), group_size=1, max_new_tokens=4, temperature=0)


def test_workers_rows_of_one_batch_form_one_group_per_problem():
    """The learner concatenates every worker's rollouts for a batch; GRPO groups by problem id,
    so ids must be unique across workers (worker-local 0..P-1 would merge unrelated problems)."""
    from trainers.spec import RunParams
    from trainers.hilo.worker import global_problem_ids

    p = RunParams(workers=3, problems_per_worker=2, group_size=2, model="micro", objective="grpo")
    parts = []
    for w in (1, 2, 3):
        ids = global_problem_ids(p, w, batch=5)
        rows = [i for i in ids for _ in range(p.group_size)]
        parts.append(Rollouts(problem_index=rows, prompt_ids=[[1]] * len(rows), completion_ids=[[2]] * len(rows),
                              logprobs=[[-1.0]] * len(rows), rewards=[0.0] * len(rows)))
    groups = concat(parts).groups()
    assert len(groups) == p.workers * p.problems_per_worker
    assert all(len(rows) == p.group_size for rows in groups.values())
    assert set(global_problem_ids(p, 1, 5)).isdisjoint(global_problem_ids(p, 1, 6))
