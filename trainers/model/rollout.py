"""Rollouts: sampled completions for a batch of prompts, and the code that samples them.

`Rollouts` holds a batch of B problems x a group of G samples each, as N = B * G rows.
Row i is one sample:

- `problem_index[i]`: which problem (an index into the problem list the sampler was given,
  or any id the caller chooses). Rows with equal `problem_index` form one GRPO group.
- `prompt_ids[i]`: the prompt tokens (with BOS where the tokenizer uses one), no padding.
- `completion_ids[i]`: the sampled tokens after the prompt, no padding; ends with EOS when
  the model stopped by itself, otherwise it was cut at `max_new_tokens`. May be empty.
- `logprobs[i]`: per completion token, the log-probability under the sampling policy, i.e.
  `log_softmax(logits / temperature)` (float32 values), same length as `completion_ids[i]`.
- `rewards[i]`: the task's reward for the decoded completion.
- `policy_version`: the adapter version that sampled every row (one per batch).
- `temperature`: the sampling temperature; objectives recompute log-probs with the same one.

On the wire (`to_tensors` / `from_tensors`), rows become flat tensors plus offsets, so a
batch is a handful of raw tensors and never needs pickle:

    problem_index      int64   (N,)
    prompt_ids         int64   (sum of prompt lengths,)
    prompt_offsets     int64   (N + 1,)   row i is prompt_ids[off[i]:off[i+1]]
    completion_ids     int64   (sum of completion lengths,)
    completion_offsets int64   (N + 1,)
    logprobs           float32 (sum of completion lengths,)   same offsets as completion_ids
    rewards            float64 (N,)
    policy_version     int64   (1,)
    temperature        float64 (1,)

`from_tensors` validates every key, dtype, shape and offset and raises ValueError naming
the problem; it does not trust its input (it may come from a socket).

`generate_rollouts` samples with a seeded `torch.Generator` (deterministic for a given
model, inputs and thread count), batched over all B * G rows with a KV cache.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from transformers import DynamicCache
from trainers.model.tokenizer import ByteTokenizer

# Bounds on what `from_tensors` accepts: a forged header must not make us allocate wildly.
MAX_ROWS = 1 << 20
MAX_TOKENS = 1 << 28

_TENSOR_SPEC = {
    # key: (dtype, kind) where kind says how its length is checked
    "problem_index": (torch.int64, "rows"),
    "prompt_ids": (torch.int64, "flat"),
    "prompt_offsets": (torch.int64, "offsets"),
    "completion_ids": (torch.int64, "flat"),
    "completion_offsets": (torch.int64, "offsets"),
    "logprobs": (torch.float32, "flat"),
    "rewards": (torch.float64, "rows"),
    "policy_version": (torch.int64, "scalar"),
    "temperature": (torch.float64, "scalar"),
}


@dataclass
class Rollouts:
    """N sampled rows (B problems x G samples); see the module docstring for each field."""
    problem_index: list[int]
    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    logprobs: list[list[float]]
    rewards: list[float]
    policy_version: int = 0
    temperature: float = 1.0
    # Not on the wire: decoded completions, kept for logging and evaluation on the sampler side.
    texts: list[str] = field(default_factory=list, compare=False, repr=False)

    def __post_init__(self):
        self.validate()

    def __len__(self) -> int:
        return len(self.problem_index)

    def validate(self) -> None:
        n = len(self.problem_index)
        for name in ("prompt_ids", "completion_ids", "logprobs", "rewards"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"rollouts: {name} has {len(getattr(self, name))} rows, expected {n}")
        for i, (p, c, lp) in enumerate(zip(self.prompt_ids, self.completion_ids, self.logprobs)):
            if len(c) != len(lp):
                raise ValueError(f"rollouts: row {i} has {len(c)} completion tokens but {len(lp)} logprobs")
            if not p:
                raise ValueError(f"rollouts: row {i} has an empty prompt")
            if min(p) < 0 or (c and min(c) < 0):
                raise ValueError(f"rollouts: row {i} has a negative token id")
        if not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise ValueError(f"rollouts: temperature must be a positive finite number, got {self.temperature}")

    def check_vocab(self, vocab_size: int) -> None:
        """Raise ValueError if any token id is outside the model's vocabulary."""
        top = max((max(row) for rows in (self.prompt_ids, self.completion_ids) for row in rows if row), default=-1)
        if top >= vocab_size:
            raise ValueError(f"rollouts: token id {top} outside the vocabulary of {vocab_size}")

    def num_completion_tokens(self) -> int:
        return sum(len(c) for c in self.completion_ids)

    def groups(self) -> dict[int, list[int]]:
        """Row indices per problem_index, in first-seen order (the GRPO groups)."""
        out: dict[int, list[int]] = {}
        for row, p in enumerate(self.problem_index):
            out.setdefault(p, []).append(row)
        return out

    def to_tensors(self) -> dict[str, torch.Tensor]:
        """Flat tensors + offsets (see the module docstring); safe to frame as raw bytes."""
        return {
            "problem_index": torch.tensor(self.problem_index, dtype=torch.int64).reshape(-1),
            "prompt_ids": _flat(self.prompt_ids, torch.int64),
            "prompt_offsets": _offsets(self.prompt_ids),
            "completion_ids": _flat(self.completion_ids, torch.int64),
            "completion_offsets": _offsets(self.completion_ids),
            "logprobs": _flat(self.logprobs, torch.float32),
            "rewards": torch.tensor(self.rewards, dtype=torch.float64).reshape(-1),
            "policy_version": torch.tensor([self.policy_version], dtype=torch.int64),
            "temperature": torch.tensor([self.temperature], dtype=torch.float64),
        }

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor]) -> "Rollouts":
        """Inverse of `to_tensors`; raises ValueError on any inconsistency (untrusted input)."""
        _check_tensors(tensors)
        p_off = tensors["prompt_offsets"].tolist()
        c_off = tensors["completion_offsets"].tolist()
        prompt = tensors["prompt_ids"].tolist()
        completion = tensors["completion_ids"].tolist()
        logprobs = tensors["logprobs"].tolist()
        n = tensors["problem_index"].numel()
        return cls(
            problem_index=tensors["problem_index"].tolist(),
            prompt_ids=[prompt[p_off[i]:p_off[i + 1]] for i in range(n)],
            completion_ids=[completion[c_off[i]:c_off[i + 1]] for i in range(n)],
            logprobs=[logprobs[c_off[i]:c_off[i + 1]] for i in range(n)],
            rewards=tensors["rewards"].tolist(),
            policy_version=int(tensors["policy_version"].item()),
            temperature=float(tensors["temperature"].item()),
        )


def concat(parts: Sequence[Rollouts]) -> Rollouts:
    """Rows of all `parts` in order. They must share policy_version and temperature, since
    one importance ratio and one temperature apply to the whole batch."""
    if not parts:
        raise ValueError("concat: no rollouts given")
    versions = {r.policy_version for r in parts}
    temps = {r.temperature for r in parts}
    if len(versions) > 1:
        raise ValueError(f"concat: mixed policy versions {sorted(versions)}")
    if len(temps) > 1:
        raise ValueError(f"concat: mixed temperatures {sorted(temps)}")
    def cat(name):
        return [x for r in parts for x in getattr(r, name)]
    texts = cat("texts") if all(len(r.texts) == len(r) for r in parts) else []
    return Rollouts(cat("problem_index"), cat("prompt_ids"), cat("completion_ids"), cat("logprobs"),
                    cat("rewards"), parts[0].policy_version, parts[0].temperature, texts)


def _flat(rows: Sequence[Sequence], dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor([x for row in rows for x in row], dtype=dtype).reshape(-1)


def _offsets(rows: Sequence[Sequence]) -> torch.Tensor:
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.int64)
    return torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])


def _check_tensors(t: dict[str, torch.Tensor]) -> None:
    if not isinstance(t, dict):
        raise ValueError(f"rollouts: expected a dict of tensors, got {type(t).__name__}")
    missing = sorted(set(_TENSOR_SPEC) - set(t))
    extra = sorted(set(t) - set(_TENSOR_SPEC))
    if missing or extra:
        raise ValueError(f"rollouts: missing keys {missing}, unexpected keys {extra}")
    for key, (dtype, _) in _TENSOR_SPEC.items():
        x = t[key]
        if not isinstance(x, torch.Tensor) or x.dtype != dtype or x.dim() != 1:
            raise ValueError(f"rollouts: {key} must be a 1-D {dtype} tensor, got "
                             f"{getattr(x, 'dtype', type(x).__name__)} {tuple(getattr(x, 'shape', ()))}")
    n = t["problem_index"].numel()
    if n > MAX_ROWS:
        raise ValueError(f"rollouts: {n} rows exceeds the limit {MAX_ROWS}")
    for key, (_, kind) in _TENSOR_SPEC.items():
        size = t[key].numel()
        want = {"rows": n, "offsets": n + 1, "scalar": 1}.get(kind)
        if want is not None and size != want:
            raise ValueError(f"rollouts: {key} has {size} elements, expected {want}")
    _check_offsets("prompt", t["prompt_offsets"], t["prompt_ids"].numel())
    _check_offsets("completion", t["completion_offsets"], t["completion_ids"].numel())
    if t["logprobs"].numel() != t["completion_ids"].numel():
        raise ValueError(f"rollouts: {t['logprobs'].numel()} logprobs for "
                         f"{t['completion_ids'].numel()} completion tokens")
    if not torch.isfinite(t["rewards"]).all():
        raise ValueError("rollouts: non-finite reward")
    if torch.isnan(t["logprobs"]).any() or (t["logprobs"] > 0).any():
        raise ValueError("rollouts: logprobs must be <= 0 and not NaN")
    temp = float(t["temperature"].item())
    if not (temp > 0 and math.isfinite(temp)):
        raise ValueError(f"rollouts: temperature must be positive and finite, got {temp}")


def _check_offsets(name: str, off: torch.Tensor, total: int) -> None:
    if total > MAX_TOKENS:
        raise ValueError(f"rollouts: {total} {name} tokens exceeds the limit {MAX_TOKENS}")
    if off[0].item() != 0 or off[-1].item() != total:
        raise ValueError(f"rollouts: {name}_offsets must run from 0 to {total}, "
                         f"got {off[0].item()}..{off[-1].item()}")
    if (off[1:] < off[:-1]).any():
        raise ValueError(f"rollouts: {name}_offsets are not non-decreasing")


# ---------------------------------------------------------------------------------------
# Tokenizer glue: the byte tokenizer of the tiny models, or a Hugging Face tokenizer.

def encode_prompt(tokenizer, text: str) -> list[int]:
    """Prompt ids with BOS (the byte tokenizer) or the tokenizer's own special tokens (HF)."""
    if isinstance(tokenizer, ByteTokenizer):
        return tokenizer.encode(text, add_bos=True)
    return list(tokenizer(text)["input_ids"])


def decode_completion(tokenizer, ids: Sequence[int]) -> str:
    """Completion text, up to (not including) the first EOS."""
    eos = tokenizer.eos_token_id
    ids = list(ids)
    if eos is not None and eos in ids:
        ids = ids[:ids.index(eos)]

    if isinstance(tokenizer, ByteTokenizer):
        return tokenizer.decode(ids)
    return tokenizer.decode(ids, skip_special_tokens=True)


def pad_id(tokenizer) -> int:
    pad = getattr(tokenizer, "pad_token_id", None)
    return int(pad if pad is not None else tokenizer.eos_token_id)


# ---------------------------------------------------------------------------------------
# Sampling.

@torch.no_grad()
def sample(model, prompts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float,
           generator: torch.Generator, eos_id: int, pad: int) -> tuple[list[list[int]], list[list[float]]]:
    """Sample one completion per prompt, all rows at once with a KV cache.

    Prompts are left-padded so every row's next token sits in the last column; position ids
    count real tokens only, so a row's logits do not depend on how much padding it got.
    Returns per row the completion ids (ending with EOS if sampled) and their log-probs
    under softmax(logits / temperature).
    """
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be positive and finite, got {temperature}")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("sample: empty prompt (the model needs at least one token)")
    n = len(prompts)
    if n == 0 or max_new_tokens == 0:
        return [[] for _ in range(n)], [[] for _ in range(n)]
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    ids = torch.full((n, width), pad, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p):] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(1) - 1).clamp(min=0)

    was_training = model.training
    model.eval()
    try:
        out_ids, out_lp = _decode_loop(model, ids, mask, positions, max_new_tokens, temperature,
                                       generator, eos_id, pad)
    finally:
        model.train(was_training)
    return out_ids, out_lp


def _decode_loop(model, ids, mask, positions, max_new_tokens, temperature, generator, eos_id, pad):
    n = ids.shape[0]
    done = torch.zeros(n, dtype=torch.bool, device=ids.device)
    tokens, logps = [], []  # per step: (n,) tensors
    # One cache object, updated in place by every forward; transformers renamed the keyword
    # from `past_key_values` to `cache` in 5.x, so pass whichever this version takes.
    cache = {_cache_keyword(model): DynamicCache()}
    step_ids, step_pos = ids, positions
    for _ in range(max_new_tokens):
        out = model(input_ids=step_ids, attention_mask=mask, position_ids=step_pos,
                    use_cache=True, logits_to_keep=1, **cache)
        logp = torch.log_softmax(out.logits[:, -1, :].float() / temperature, dim=-1)  # (n, V)
        nxt = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(1)  # (n,)
        lp = logp.gather(1, nxt[:, None]).squeeze(1)
        nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
        tokens.append(nxt)
        logps.append(lp)
        live = ~done
        done = done | (nxt == eos_id)
        if bool(done.all()):
            break
        # Finished rows keep feeding pad with mask 0: their cache grows but nobody attends to it.
        mask = torch.cat([mask, live.long()[:, None]], dim=1)
        step_pos = step_pos[:, -1:] + 1
        step_ids = nxt[:, None]
    return _trim(torch.stack(tokens, 1), torch.stack(logps, 1), eos_id)


def _cache_keyword(model) -> str:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    params = inspect.signature(type(base).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _trim(tokens: torch.Tensor, logps: torch.Tensor, eos_id: int):
    """Cut each row after its first EOS (inclusive)."""
    out_ids, out_lp = [], []
    for row_t, row_l in zip(tokens.tolist(), logps.tolist()):
        end = row_t.index(eos_id) + 1 if eos_id in row_t else len(row_t)
        out_ids.append(row_t[:end])
        out_lp.append(row_l[:end])
    return out_ids, out_lp


def generate_rollouts(model, tokenizer, task, problems: Sequence[Any], group_size: int,
                      max_new_tokens: int, temperature: float = 1.0, seed: int = 0,
                      policy_version: int = 0, problem_ids: Sequence[int] | None = None,
                      batch_rows: int | None = None) -> Rollouts:
    """Sample `group_size` completions for each problem and score them with `task`.

    Rows are grouped by problem: rows g*G .. g*G+G-1 belong to `problems[g]`, whose
    `problem_index` is `problem_ids[g]` (default: g). Deterministic in `seed`.
    `batch_rows` bounds the rows sampled at once (memory); default: all rows together.
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    ids = list(range(len(problems))) if problem_ids is None else list(problem_ids)
    if len(ids) != len(problems):
        raise ValueError(f"{len(ids)} problem ids for {len(problems)} problems")
    prompts = [encode_prompt(tokenizer, task.prompt(p)) for p in problems]
    rows_prompt = [prompts[g] for g in range(len(problems)) for _ in range(group_size)]
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    step = batch_rows or max(1, len(rows_prompt))
    comp, lps = [], []
    for start in range(0, len(rows_prompt), step):
        c, lp = sample(model, rows_prompt[start:start + step], max_new_tokens, temperature,
                       generator, tokenizer.eos_token_id, pad_id(tokenizer))
        comp += c
        lps += lp
    texts = [decode_completion(tokenizer, c) for c in comp]
    rows_problem = [problems[g] for g in range(len(problems)) for _ in range(group_size)]
    rewards = [float(task.reward(p, t)) for p, t in zip(rows_problem, texts)]
    return Rollouts(problem_index=[ids[g] for g in range(len(problems)) for _ in range(group_size)],
                    prompt_ids=rows_prompt, completion_ids=comp, logprobs=lps, rewards=rewards,
                    policy_version=policy_version, temperature=temperature, texts=texts)
