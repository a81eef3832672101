"""The student's pre-trained base: keyed cache, built once, bit-identical on every process, and
better than the random base on held-out problems; task options from the run spec."""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainers.tasks.heldout import heldout_problems
from trainers.model.models import build_base_model, build_tokenizer
from trainers import tasks
from trainers.model.pretrained import build_base, gold_batch, gold_nll
from trainers.hilo.stack import base_for
from trainers.spec import RunParams
from trainers.tasks import get_task, parse_task_options

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[3]
STEPS = 60  # micro, digits copy: enough to move the gold NLL far from the random base's
TINY_STEPS = 4  # the run's base (tiny: micro is never pre-trained in a run); only the bits matter here


def state_hash(model) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def task():
    return get_task("digits", ops="copy", max_len=3)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("bases")


@pytest.fixture(scope="module")
def base(task, cache):
    return build_base(task, "micro", steps=STEPS, cache_dir=cache)


def test_cached_once_and_reused_bit_identically(task, cache, base):
    files = list(cache.glob("digits-micro-*.safetensors"))
    assert len(files) == 1
    mtime = files[0].stat().st_mtime_ns
    again = build_base(task, "micro", steps=STEPS, cache_dir=cache)
    assert state_hash(again) == state_hash(base)
    assert files[0].stat().st_mtime_ns == mtime  # loaded, not rebuilt
    assert not any(p.requires_grad for p in again.parameters())


def test_a_changed_option_or_step_count_is_another_file(task, cache, base):
    before = set(cache.glob("*.safetensors"))
    other = build_base(get_task("digits", ops="copy", max_len=2), "micro", steps=STEPS, cache_dir=cache)
    longer = build_base(task, "micro", steps=STEPS + 1, cache_dir=cache)
    after = set(cache.glob("*.safetensors"))
    assert len(after - before) == 2
    assert state_hash(other) != state_hash(base) != state_hash(longer)


def test_zero_steps_is_the_random_base(task, cache):
    n = len(list(cache.glob("*")))
    assert state_hash(build_base(task, "micro", steps=0, cache_dir=cache)) == state_hash(build_base_model("micro"))
    assert len(list(cache.glob("*"))) == n  # nothing cached


def test_pretrained_base_beats_the_random_base_on_held_out_gold(task, base):
    batch = gold_batch(build_tokenizer("micro"), task, heldout_problems(task, 64))
    with torch.no_grad():
        trained, random = gold_nll(base, *batch).item(), gold_nll(build_base_model("micro"), *batch).item()
    # Measured on the 2-core box: random 5.61 nats/token (about ln 259), 60 steps 3.19 (0.57 x);
    # 0.75 x leaves room for other BLAS builds.
    assert trained < 0.75 * random, (trained, random)


CHILD = """
import sys, torch
torch.set_num_threads(1)
from trainers.hilo.methods import get_method
from trainers.hilo.stack import build_replica
from trainers.spec import RunParams
params = RunParams(method="full", model="tiny", task="digits", task_options="ops=copy,max_len=3",
                   base_steps=%d, seed=3)
model, replica = build_replica(params, get_method("full"))
print("HASH", replica.policy_hash(), sum(float(p.double().sum()) for p in model.parameters()))
""" % TINY_STEPS


def test_two_processes_started_at_once_build_one_base_and_equal_students(tmp_path):
    env = dict(os.environ, WAN_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-c", CHILD], cwd=ROOT, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e[-2000:] for _, e in outs]
    hashes = [next(line for line in o.splitlines() if line.startswith("HASH")) for o, _ in outs]
    assert hashes[0] == hashes[1]
    trained = [e.count(f"step {TINY_STEPS}/{TINY_STEPS}") for _, e in outs]
    assert sorted(trained) == [0, 1]  # one process trained, the other waited on the lock and loaded
    assert len(list((tmp_path / "bases").glob("*.safetensors"))) == 1


def test_task_options_parse_and_type_like_the_constructor():
    assert parse_task_options("knights_knaves", "min_people=2, max_people=3") == {"min_people": 2, "max_people": 3}
    assert parse_task_options("countdown", "count=3,max_number=9,exactly_once=no") == \
        {"count": 3, "max_number": 9, "exactly_once": False}
    assert parse_task_options("digits", "ops=copy,reverse,max_len=3") == {"ops": ("copy", "reverse"), "max_len": 3}
    assert parse_task_options("digits", "") == {}
    assert RunParams(task="countdown", task_options="count=3").task_options == "count=3"


@pytest.mark.parametrize("task_name, text, message", [
    ("digits", "width=3", "digits has no option 'width'; valid: ops=copy,reverse (any of copy|reverse|add), "
                          "min_len=1 (1..32), max_len=4 (1..32)"),
    ("knights_knaves", "max_people=three", "max_people='three' is not an integer"),
    ("knights_knaves", "max_people=9", "knights_knaves max_people='9' is outside [2, 8]"),
    ("knights_knaves", "max_people=3,min_people=4", "knights_knaves max_people=3 is below min_people=4"),
    ("countdown", "count=3,count=4", "'count' given twice"),
    ("countdown", "exactly_once=maybe", "is not true or false"),
    ("digits", "copy", "'copy' is not key=value"),
])
def test_bad_task_options_are_one_line_errors(task_name, text, message):
    with pytest.raises(ValueError) as e:
        tasks.check_task_options(task_name, text)
    assert str(e.value).startswith("--task-options: ") and message in str(e.value)
    assert "\n" not in str(e.value)


def test_micro_runs_keep_the_random_base_from_the_run_seed():
    params = RunParams(method="full", model="micro", base_steps=300, seed=3)
    assert state_hash(base_for(params, tasks.build_task(params.task, params.task_options))) == state_hash(build_base_model("micro", seed=3))


def test_run_params_mode_builds_the_runs_base_and_teacher_once(tmp_path):
    """What `harness run` calls before its first cell: both files built, then a cache hit that
    trains nothing; bad parameters are a one-line error with exit 2 and build nothing."""
    params = RunParams(method="full", model="tiny", base_steps=TINY_STEPS, teacher_steps=TINY_STEPS + 1,
                       objective="distill", task="digits", task_options="ops=copy,max_len=2")
    env = dict(os.environ, WAN_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-m", "trainers.hilo.stack", "--run-params", json.dumps(params.to_json())]
    first = subprocess.run(argv, cwd=ROOT, env=env, text=True, capture_output=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    assert f"step {TINY_STEPS}/{TINY_STEPS}" in first.stderr and f"step {TINY_STEPS + 1}/{TINY_STEPS + 1}" in first.stderr
    files = sorted((tmp_path / "bases").glob("*.safetensors"))
    assert len(files) == 2  # the base and the teacher (the same recipe, more steps)
    again = subprocess.run(argv, cwd=ROOT, env=env, text=True, capture_output=True, timeout=300)
    assert again.returncode == 0 and "[pretrain]" not in again.stderr
    assert sorted((tmp_path / "bases").glob("*.safetensors")) == files
    bad = subprocess.run(argv[:-1] + ['{"model": "tiny", "lr": "fast"}'], cwd=ROOT, env=env, text=True,
                         capture_output=True, timeout=120)
    last = bad.stderr.strip().splitlines()[-1]
    assert bad.returncode == 2 and "error:" in last and "lr" in last, bad.stderr[-2000:]


def test_cache_files_are_readable_by_every_user(cache, base):
    # the containers' services (uid 1000) load caches that root (a host run, the controller) built
    for f in cache.glob("*.safetensors"):
        assert f.stat().st_mode & 0o777 == 0o644, f


def test_the_progress_line_names_the_role(task, tmp_path, capsys):
    build_base(task, "micro", steps=2, cache_dir=tmp_path, role="teacher")
    err = capsys.readouterr().err
    assert "[pretrain] teacher digits micro, 2 steps: step 2/2" in err, err


@pytest.mark.root
def test_an_unreadable_cache_file_is_named_with_its_mode(task, base, cache):
    if os.geteuid() != 0:
        pytest.skip("needs root: the file is root's, read as uid 1000")
    import tempfile
    folder = Path(tempfile.mkdtemp(prefix="wh-cache-"))
    folder.chmod(0o755)
    for src in cache.glob("digits-micro-*.safetensors"):   # the base's file among other tests' models
        (folder / src.name).write_bytes(src.read_bytes())
        (folder / src.name).chmod(0o600)   # what mkstemp left before the cache was made readable
    read, write = os.pipe()
    pid = os.fork()   # a child of this interpreter as uid 1000 (a new one could not reach /root's python)
    if pid == 0:
        os.close(read)
        message = "no error"
        try:
            os.setgid(1000)
            os.setuid(1000)
            build_base(task, "micro", steps=STEPS, cache_dir=folder)
        except BaseException as err:  # noqa: BLE001 - whatever it is goes back to the test
            message = f"{type(err).__name__}: {err}"
        os.write(write, message.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as fh:
        message = fh.read()
    os.waitpid(pid, 0)
    subprocess.run(["rm", "-rf", str(folder)], check=True)
    assert message.startswith(f"PermissionError: cannot read the cached model {folder}/digits-micro-"), message
    assert "(mode 0600, owner uid 0) as uid 1000" in message, message
