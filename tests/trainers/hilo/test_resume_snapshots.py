"""`--resume` trusts no snapshot file: a real learner's snapshot (a tiny PEFT model trained by the
real services on loopback) is damaged or forged in each way below, and every one is refused in one
line naming the problem, with exit 2 and nothing written, by `learner.main` itself.

Forged files carry a digest recomputed over the forged contents (as anyone could): the range and
layout checks must catch them, not the digest. Damaged files keep the old digest.
Cases marked "fits" pass every check that needs no model (`check_resume`) and are refused by
`check_resume_fits` against the built stack, still before the learner writes anything.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from tests.trainers.hilo.cluster import Cluster
from trainers.hilo import learner, stack
from trainers.hilo.learner import SNAPSHOT_FILE, check_resume, check_resume_fits
from trainers.model import replica
from trainers.spec import add_run_args, run_params_from_args

UPDATES = 3
PARAMS = dict(updates=UPDATES, snapshot_every=1, method="powersgd", budget="10%")


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> tuple[bytes, list[str]]:
    """A finished run's learner snapshot (version 3) and the flags of that run."""
    root = tmp_path_factory.mktemp("resume-snapshots")
    with Cluster(root / "run", workers=1, **PARAMS) as c:
        assert c.wait()["complete"], c.log("learner")
        return (c.run_dir / SNAPSHOT_FILE).read_bytes(), c.flags()


def params_of(flags: list[str]):
    import argparse

    p = argparse.ArgumentParser()
    add_run_args(p, required=True)
    return run_params_from_args(p.parse_args(flags))


def parts(blob: bytes) -> tuple[dict, dict]:
    return replica.read_snapshot(blob)[0], dict(st_load(blob))


def forged(blob: bytes, edit) -> bytes:
    """The snapshot with `edit(meta, tensors)` applied and the digest recomputed."""
    meta, tensors = parts(blob)
    edit(meta, tensors)
    meta[replica.DIGEST_KEY] = replica.snapshot_digest(tensors, meta)
    return st_save(tensors, metadata=meta)


def each(prefix: str, fn):
    def edit(meta, tensors):
        for k in [k for k in tensors if k.startswith(prefix)]:
            tensors[k] = fn(tensors[k])
    return edit


def first(prefix: str, fn):
    def edit(meta, tensors):
        k = sorted(k for k in tensors if k.startswith(prefix))[0]
        tensors[k] = fn(tensors[k])
    return edit


def setmeta(key, value):
    return lambda meta, tensors: meta.__setitem__(key, value)


def renamed(old: str, new: str):
    def edit(meta, tensors):
        for k in [k for k in tensors if old in k]:
            tensors[k.replace(old, new)] = tensors.pop(k)
    return edit


def transposed(meta, tensors):
    """Every lora_A adapter tensor, its moments and kept policies transposed: self-consistent, but not
    this model's layout."""
    for k in [k for k in tensors if "lora_A" in k and not k.startswith("extra/compressor/") and not k.startswith("step/")]:
        tensors[k] = tensors[k].t().contiguous()


def flip_last_byte(blob: bytes) -> bytes:
    return blob[:-1] + bytes([blob[-1] ^ 0x10])


def nan(t):
    t = t.clone()
    t.view(-1)[0] = float("nan")
    return t


# (id, how the file is made from the good one, what the one line says, refused before the build)
CASES = [
    ("flipped-data-byte", flip_last_byte, "digest does not match", True),
    ("truncated", lambda b: b[: len(b) // 2], "unreadable replica snapshot", True),
    ("not-safetensors", lambda b: b"\x00" * 64, "unreadable replica snapshot", True),
    ("nan-adapter", lambda b: forged(b, first("adapter/", nan)), "NaN or infinite", True),
    ("inf-exp-avg", lambda b: forged(b, first("exp_avg/", lambda t: t + float("inf"))), "NaN or infinite", True),
    ("nan-compressor-state", lambda b: forged(b, first("extra/compressor/", nan)), "NaN or infinite", True),
    ("step-minus-5", lambda b: forged(b, each("step/", lambda t: torch.full_like(t, -5.0))), "not a whole number", True),
    ("step-fraction", lambda b: forged(b, each("step/", lambda t: t + 0.5)), "not a whole number", True),
    ("steps-differ", lambda b: forged(b, first("step/", lambda t: t + 1)), "step counts differ", True),
    ("negative-exp-avg-sq", lambda b: forged(b, first("exp_avg_sq/", lambda t: t - 1.0)), "negative values", True),
    ("version-2-of-3-steps", lambda b: forged(b, setmeta("version", "2")), "taken 3 steps", True),
    ("version-arabic-indic", lambda b: forged(b, setmeta("version", "\u0663")), "not a plain decimal integer", True),
    ("version-signed", lambda b: forged(b, setmeta("version", "+3")), "not a plain decimal integer", True),
    ("version-past-updates", lambda b: forged(b, lambda m, t: (m.__setitem__("version", "9"),
                                                                each("step/", lambda s: s * 0 + 9)(m, t))),
     "past the run's 3 updates", True),
    ("params-a-list", lambda b: forged(b, setmeta("params", "[1, 2]")), "not a JSON object", True),
    ("params-not-json", lambda b: forged(b, setmeta("params", "{")), "not a JSON object", True),
    ("no-params", lambda b: forged(b, lambda m, t: m.pop("params")), "not a learner snapshot", True),
    ("old-format", lambda b: forged(b, setmeta("format", "replica-v1")), "not a replica-v2 snapshot", True),
    ("optim-not-json", lambda b: forged(b, setmeta("optim", "[")), "optimizer config is not usable", True),
    ("optim-unknown-key", lambda b: forged(b, setmeta("optim", '{"momentum": 1}')), "optimizer config is not usable",
     True),
    ("optim-other-lr", lambda b: forged(b, lambda m, t: m.__setitem__("optim", json.dumps(
        {**json.loads(m["optim"]), "lr": 0.5}))), "not the one these parameters build", True),
    ("missing-exp-avg", lambda b: forged(b, lambda m, t: t.pop(sorted(k for k in t if k.startswith("exp_avg/"))[0])),
     "missing or has the wrong shape", True),
    ("step-two-elements", lambda b: forged(b, first("step/", lambda t: torch.cat([t, t]))), "wrong shape", True),
    ("stray-entry", lambda b: forged(b, lambda m, t: t.__setitem__("bogus/x", torch.zeros(1))), "belongs to no adapter",
     True),
    ("integer-adapter", lambda b: forged(b, first("adapter/", lambda t: t.to(torch.int32))), "not a floating tensor",
     True),
    ("policy-version-not-a-number", lambda b: forged(b, renamed("policy/00000000/", "policy/0000000x/")),
     "not a kept policy", True),
    ("policy-past-version", lambda b: forged(b, renamed("policy/00000000/", "policy/00000099/")),
     "not a kept policy", True),
    ("policy-wrong-shape", lambda b: forged(b, first("extra/policy/", lambda t: torch.zeros(1))), "not a kept policy",
     True),
    # self-consistent files that only the built model and compressor can refuse
    ("adapter-transposed", lambda b: forged(b, transposed), "does not match the adapter", False),
    ("adapter-renamed", lambda b: forged(b, renamed("layers.0.", "layers.7.")), "does not match the adapter", False),
    ("compressor-unknown-entry", lambda b: forged(b, lambda m, t: t.__setitem__("extra/compressor/bogus", torch.zeros(1))),
     "compressor state does not fit", False),
    ("compressor-residual-wrong-shape", lambda b: forged(b, first("extra/compressor/residual/",
                                                                  lambda t: torch.zeros(3, 3))),
     "not the residual of an adapter tensor", False),
]


@pytest.fixture(scope="module")
def built(snapshot):
    return stack.build(params_of(snapshot[1]), teacher=False)


def test_the_good_snapshot_passes_every_check(snapshot, built):
    blob, flags = snapshot
    assert check_resume(blob, params_of(flags)) == UPDATES
    check_resume_fits(blob, built)


@pytest.mark.parametrize("name,make,says,before_build", CASES, ids=[c[0] for c in CASES])
def test_a_malformed_snapshot_is_one_line_and_changes_nothing(tmp_path, snapshot, built, capsys, monkeypatch,
                                                              name, make, says, before_build):
    blob, flags = snapshot
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(make(blob))
    params = params_of(flags)
    if before_build:
        with pytest.raises(ValueError, match=says):
            check_resume(bad.read_bytes(), params)
    else:
        assert check_resume(bad.read_bytes(), params) == UPDATES
        with pytest.raises(ValueError, match=says):
            check_resume_fits(bad.read_bytes(), built)
    if not before_build:
        return  # the learner's own refusal of these builds the model: one end-to-end case below covers it
    monkeypatch.setenv("RUN_TOKEN", "t")
    monkeypatch.delenv("WAN_PARENT_PID", raising=False)
    monkeypatch.setattr(stack, "build", lambda *a, **k: pytest.fail("the model was built for a malformed snapshot"))
    with pytest.raises(SystemExit) as exit_:
        learner.main(["--run-dir", str(tmp_path / "run"), *flags, "--resume", str(bad)])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and says in err[-1] and str(bad) in err[-1], err
    assert len(err[-1]) < 400 and not (tmp_path / "run").exists()


def test_a_snapshot_that_fits_no_model_is_refused_by_the_learner_before_it_writes(tmp_path, snapshot, capsys,
                                                                                 monkeypatch):
    blob, flags = snapshot
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(forged(blob, transposed))
    monkeypatch.setenv("RUN_TOKEN", "t")
    monkeypatch.delenv("WAN_PARENT_PID", raising=False)
    with pytest.raises(SystemExit) as exit_:
        learner.main(["--run-dir", str(tmp_path / "run"), *flags, "--resume", str(bad)])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_.value.code == 2 and "does not match the adapter" in err
    assert not (tmp_path / "run").exists()


def test_a_restore_that_fails_leaves_the_replica_as_it_was(snapshot, built):
    """A bad file is never loaded in part: the replica's state hash is unchanged after a refusal."""
    before = built.replica.state_hash()
    with pytest.raises(ValueError):
        built.replica.restore(forged(snapshot[0], first("exp_avg_sq/", lambda t: t - 1.0)))
    assert built.replica.state_hash() == before
