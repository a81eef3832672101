"""Held-out learning curves of full sync, simulated in one process (the CPU recipe's evidence).

One policy (the cached pre-trained base + a seeded LoRA adapter) is trained as the learner does
with method `full`: every update, each of W simulated workers samples rollouts on its
`training_problems` (seeded like trainers.hilo.worker), the objective's loss over their concatenated
rows is back-propagated, and the replica's AdamW steps on the LoRA gradients. Every E updates
(and at 0) the policy is evaluated on `heldout_problems`: n samples per problem, pass@1 and
pass@k (unbiased), mean reward, the exact P(gold) (trainers/hilo/evaluate.py), and for distill the
reverse KL to the teacher on those samples.

    python -m tests.benchmarks.heldout_curves --task knights_knaves --task-options max_people=2 \\
        --objective distill --seeds 1,2,3 --out /tmp/kk.json

Prints one row per (seed, update) and a mean/sd table per update; `--out` writes every row as JSON.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", default="digits")
    p.add_argument("--task-options", default="")
    p.add_argument("--objective", default="distill", choices=("distill", "grpo"))
    p.add_argument("--model", default="tiny")
    p.add_argument("--base-steps", type=int, default=300)
    p.add_argument("--teacher-steps", type=int, default=600)
    p.add_argument("--lora-rank", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--updates", type=int, default=20)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--problems-per-worker", type=int, default=4)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--eval-problems", type=int, default=64)
    p.add_argument("--eval-n", type=int, default=8)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


def held_out_eval(policy, teacher, tok, task, problems, a, objective) -> dict:
    """pass@1, pass@k, mean reward, exact P(gold) over held-out problems; reverse KL to the teacher (distill)."""
    from trainers.hilo.evaluate import gold_probabilities, pass_at_k
    from trainers.model.rollout import generate_rollouts

    correct, rewards, kls = [], [], []
    for start in range(0, len(problems), 16):
        chunk = problems[start:start + 16]
        r = generate_rollouts(policy, tok, task, chunk, group_size=a.eval_n, max_new_tokens=a.max_new_tokens,
                              temperature=a.temperature, seed=10_007 + start)
        for g, prob in enumerate(chunk):
            correct.append(sum(task.is_correct(prob, t) for t in r.texts[g * a.eval_n:(g + 1) * a.eval_n]))
        rewards += r.rewards
        if teacher is not None:
            with torch.no_grad():
                kls.append(objective.loss(policy, r)[1]["kl"])
    out = {"pass@1": statistics.fmean(pass_at_k(a.eval_n, c, 1) for c in correct),
           f"pass@{a.k}": statistics.fmean(pass_at_k(a.eval_n, c, a.k) for c in correct),
           "reward": statistics.fmean(rewards),
           "gold_prob": statistics.fmean(gold_probabilities(policy, tok, task, problems, a.temperature,
                                                            a.max_new_tokens, 16))}
    if kls:
        out["kl"] = statistics.fmean(kls)
    return out


def run_seed(a, seed: int) -> list[dict]:
    from trainers.tasks.heldout import heldout_problems, training_problems
    from trainers.model.models import LoraSpec, attach_lora, build_tokenizer, lora_gradients, lora_parameters
    from trainers.objectives import get_objective
    from trainers.model.pretrained import build_base
    from trainers.model.replica import OptimConfig, Replica
    from trainers.model.rollout import concat, generate_rollouts
    from trainers.hilo.stack import rollout_seed
    from trainers.tasks import get_task, parse_task_options

    task = get_task(a.task, **parse_task_options(a.task, a.task_options))
    tok = build_tokenizer(a.model)
    policy = attach_lora(build_base(task, a.model, steps=a.base_steps), LoraSpec(rank=a.lora_rank, seed=seed))
    replica = Replica(lora_parameters(policy), OptimConfig(lr=a.lr))
    teacher = None
    if a.objective == "distill":
        teacher = build_base(task, a.model, steps=a.teacher_steps)  # = trainers.model.pretrained.teacher_for
        objective = get_objective("distill", teacher=teacher)
    else:
        objective = get_objective("grpo")
    heldout = heldout_problems(task, a.eval_problems)
    rows, t0 = [], time.monotonic()

    def record(update, train):
        ev = held_out_eval(policy, teacher, tok, task, heldout, a, objective)
        row = {"seed": seed, "update": update, **ev, **train, "s": round(time.monotonic() - t0, 1)}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)

    record(0, {})
    for t in range(a.updates):
        parts = []
        for w in range(1, a.workers + 1):
            rs = rollout_seed(seed, w, t + 1)
            problems = training_problems(task, a.problems_per_worker, rs)
            ids = [(w - 1) * a.problems_per_worker + i for i in range(len(problems))]  # global GRPO groups
            parts.append(generate_rollouts(policy, tok, task, problems, a.group_size, a.max_new_tokens,
                                           temperature=a.temperature, seed=rs, policy_version=t, problem_ids=ids))
        batch = concat(parts)
        policy.zero_grad(set_to_none=True)
        loss, metrics = objective.loss(policy, batch)
        loss.backward()
        replica.step(lora_gradients(policy))
        if (t + 1) % a.eval_every == 0 or t + 1 == a.updates:
            record(t + 1, {"train_reward": round(metrics.get("reward_mean", 0.0), 4)})
    return rows


def summarise(rows: list[dict], k: int) -> str:
    keys = ["pass@1", f"pass@{k}", "gold_prob", "reward"] + (["kl"] if "kl" in rows[0] else [])
    lines = ["update  " + "  ".join(f"{key:>15}" for key in keys) + "   s"]
    for u in sorted({r["update"] for r in rows}):
        at = [r for r in rows if r["update"] == u]
        cells = []
        for key in keys:
            xs = [r[key] for r in at]
            sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
            cells.append(f"{statistics.fmean(xs):7.3f}+-{sd:5.3f}")
        lines.append(f"{u:6d}  " + "  ".join(f"{c:>15}" for c in cells) + f"   {max(r['s'] for r in at):.0f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    a = parse(argv)
    torch.set_num_threads(1)  # as every service; and a shared 2-core box
    rows = []
    for seed in [int(s) for s in a.seeds.split(",")]:
        rows += run_seed(a, seed)
    print(json.dumps(vars(a)))
    print(summarise(rows, a.k))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"args": vars(a), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
