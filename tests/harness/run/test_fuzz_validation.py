"""Property-based fuzzing of what users type: run-spec values (flags, grid YAML) and WAN profile
documents. Whatever the input, validation either accepts it or raises its own one-line usage
error; it never lets another exception through (which the CLI would print as a traceback), and
anything it accepts can be planned without error."""
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.run import config

from harness.net import plan, profiles, topology
from trainers import spec

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
                    st.sampled_from(["1.6%", "0%", "1e-30%", "62.5mbit", "1e30tbit", "0.001bit", "20ms", "-1",
                                     "nan", "inf", "1,2", "1,1", "micro", "full", "spar", "/etc/passwd", "none",
                                     "100%", "99.999%", "10s", "11s", "true", "0x10", " 3 ", "3.0"]))
values = st.one_of(scalars, st.lists(scalars, max_size=4))


def _one_line(err: Exception) -> None:
    text = str(err)
    assert text and "\n" not in text and len(text) < 600, text


@SETTINGS
@given(st.sampled_from(spec.PARAMS), values)
def test_every_parameter_accepts_or_names_the_problem(p, raw):
    try:
        spec.parse_value(p.name, raw)
    except spec.SpecError as err:
        _one_line(err)
        assert str(err).startswith(p.flag) or "--budget" in str(err)


@SETTINGS
@given(st.dictionaries(st.sampled_from([p.name for p in spec.PARAMS if p.name not in ("model", "task")]
                                       + ["colour"]), values, max_size=5))
def test_a_run_config_builds_or_fails_with_one_line(given_values):
    try:
        cfg = config.build(**given_values)
    except ValueError as err:
        _one_line(err)
        return
    assert cfg.variants and cfg.seeds
    plan.build_plan(cfg.load_profile(), topology.Topology.plan("f0f0", min(cfg.workers, 4)), "fallback")


link_keys = st.sampled_from(["rate", "delay", "jitter", "loss", "limit", "burst_loss", "up", "down", "bogus"])
link_values = st.one_of(scalars, st.sampled_from(["10mbit", "1gbit", "35ms", "1ms", "0.5%", "5%", 100, 1000]),
                        st.dictionaries(st.sampled_from(["p", "r", "bad_loss", "good_loss", "rate", "delay"]),
                                        st.one_of(scalars, st.sampled_from(["1%", "50%", "10mbit"])), max_size=3))
links = st.dictionaries(link_keys, link_values, max_size=4)
documents = st.fixed_dictionaries({}, optional={
    "name": st.just("fz"), "description": scalars, "defaults": st.one_of(links, scalars),
    "learner": st.one_of(links, scalars),
    "workers": st.one_of(st.dictionaries(st.sampled_from(["w1", "w2", "w9", "x1"]), links, max_size=3), scalars),
    "schedule": st.one_of(st.lists(st.fixed_dictionaries({"at": st.sampled_from(["1s", "30s", -1, "x"]),
                                                          "target": st.sampled_from(["workers", "learner", "w1",
                                                                                     "nobody"])},
                                                         optional={"up": links, "down": links, "rate": link_values}),
                                   max_size=2), scalars),
    "colour": scalars})


@SETTINGS
@given(documents)
def test_a_profile_document_validates_or_fails_with_one_line(doc):
    try:
        prof = profiles.from_doc(doc, "fz")
    except profiles.ProfileError as err:
        _one_line(err)
        return
    topo = topology.Topology.plan("f0f0", 2)
    for backend in ("fallback", "netem"):
        plan.build_plan(prof, topo, backend)
        for change in prof.schedule:
            plan.build_plan(prof, topo, backend, at_s=change.at_s)


@pytest.mark.parametrize("doc", [[], "text", 3, None])
def test_a_profile_that_is_not_a_mapping_is_one_line(doc):
    with pytest.raises(profiles.ProfileError) as err:
        profiles.from_doc(doc, "fz")
    _one_line(err.value)


# ---- the inputs that broke (profile YAML, project numbers, run folders, grids) -------------


@pytest.mark.parametrize("text, reason", [
    ("a: " + "[" * 20000 + "]" * 20000 + "\n", "nested too deeply"),
    ("schedule: [{at: 1e300s, target: workers, rate: 1mbit}]\n", "within 604800 s"),
    ("workers: {w1: null}\n", "must be a mapping"),
    ("defaults: {up: null}\n", "must be a mapping"),
    ("x: '" + "a" * (1 << 20) + "'\n", "larger than"),
])
def test_a_bad_profile_file_is_one_line(tmp_path, text, reason):
    path = tmp_path / "fz.yaml"
    path.write_text(text)
    with pytest.raises(profiles.ProfileError) as err:
        profiles.load(path)
    _one_line(err.value)
    assert reason in str(err.value)


numbers = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10))


@SETTINGS
@given(st.fixed_dictionaries({"compute_s": numbers, "rollout_s": numbers, "train_s": numbers, "encode_s": numbers,
                              "replay_s": numbers, "rollout_share": numbers}))
def test_project_numbers_are_checked(nums):
    """`harness project`'s numbers: finite and in range, or one line naming the flag (-1 was a ZeroDivisionError)."""
    from harness.projection import params

    try:
        params.parse(nums)
    except ValueError as err:
        _one_line(err)
        assert str(err).startswith("--")
        return
    import math

    assert all(v is None or (math.isfinite(v) and v >= 0) for v in nums.values())
    assert nums["compute_s"] is None or nums["compute_s"] > 0


@pytest.mark.parametrize("grid", [{"workers": [1, 1]}, {"lr": [0.001, "1e-3"]}, {"bw": ["10mbit", "10Mbit"]},
                                  {"delay": ["20ms", "0.02s"]}])
def test_grid_axes_with_values_that_mean_the_same_are_refused(grid):
    from harness.run import commands

    with pytest.raises(ValueError) as err:
        commands.grid_points(grid)
    _one_line(err.value)
    assert "the same value" in str(err.value)


def test_refused_before_anything_runs(tmp_path):
    """--no-emulation with link flags, --lordo-k-states that is not a multiple of --lordo-k, calibrate --secs -1."""
    from harness.net import commands as net_commands

    with pytest.raises(ValueError, match="with --no-emulation nothing is shaped"):
        config.build(emulation=False, bw="10mbit", loss="1%")
    with pytest.raises(ValueError, match="multiple of --lordo-k"):
        config.build(method="lordo-global", lordo_k=2, lordo_k_states=3)
    prof = profiles.load("lan")
    for secs in (-1, 0, float("nan"), 1e9):
        assert net_commands.calibrate_cmd(prof, 1, secs, None, str(tmp_path), dry_run=True) == 2
    assert not list(tmp_path.iterdir())


FIXTURES = sorted(p for p in (Path(__file__).resolve().parents[2] / "fixtures" / "runs").iterdir() if p.is_dir())
BAD_VALUES = st.sampled_from(["x", [[1]], {"a": {"b": 1}}, None, 1e308, -5, True, float("nan"), 10**30, [], {}])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.sampled_from(FIXTURES), st.integers(0, 10**6), st.integers(0, 10**6), BAD_VALUES)
def test_a_malformed_run_folder_reads_or_names_the_field(tmp_path_factory, fixture, pick_file, pick_key, value):
    """Any field of any event row or document of a fixture run set to a wrong type, NaN, a negative or
    huge number or nested JSON: the folder reads and reports, or one ResultsError line names the file."""
    import json
    import shutil

    from harness.results import report, tables

    run = tmp_path_factory.mktemp("run") / fixture.name
    shutil.copytree(fixture, run)
    files = sorted(p for p in run.rglob("*") if p.suffix in (".json", ".jsonl"))
    path = files[pick_file % len(files)]
    if path.suffix == ".jsonl":
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        row = rows[pick_key % len(rows)]
        row[sorted(row)[pick_key % len(row)]] = value
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        doc = json.loads(path.read_text())
        if doc:
            doc[sorted(doc)[pick_key % len(doc)]] = value
        path.write_text(json.dumps(doc))
    try:
        report.build(tables.read(run))
    except tables.ResultsError as err:
        _one_line(err)
        assert str(path.parent) in str(err) or str(run) in str(err)


def test_an_events_file_that_is_a_directory_is_one_line(tmp_path):
    import shutil

    from harness.results import tables

    run = tmp_path / "run"
    shutil.copytree(FIXTURES[0], run)
    events = next(run.rglob("events-learner.jsonl"))
    events.unlink()
    events.mkdir()
    with pytest.raises(tables.ResultsError) as err:
        tables.read(run)
    _one_line(err.value)
    assert "events-learner.jsonl" in str(err.value)


BAD_AMOUNTS = (-5, -1e-9, float("nan"), float("inf"))  # -5 s per update used to read as a -0.04x speed-up


def _update_fields(run: Path) -> list[tuple[Path, str]]:
    """(events file, field) for every duration or byte count (schema.NONNEGATIVE_FIELDS) that an
    update or eval row of `run` carries."""
    import json

    from harness.results import schema

    out = []
    for path in sorted(run.rglob("events-*.jsonl")):
        keys = set()
        for line in path.read_text().splitlines():
            r = json.loads(line) if line.strip() else {}
            if r.get("kind") in ("update", "eval"):
                keys |= {k for k in r if k in schema.NONNEGATIVE_FIELDS and r[k] is not None}
        out += [(path, k) for k in sorted(keys)]
    return out


def _set_first(path: Path, key: str, value) -> None:
    import json

    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    row = next(r for r in rows if r.get("kind") in ("update", "eval") and r.get(key) is not None)
    row[key] = value
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_negative_or_non_finite_durations_and_byte_counts_are_refused(tmp_path, fixture):
    """Every duration and byte count of every update/eval row of the fixture runs, set to -5, -1e-9,
    NaN or infinity in turn: reading the folder fails with one line naming the file and the field."""
    import shutil

    from harness.results import tables

    cases = 0
    for path, key in _update_fields(fixture):
        for value in BAD_AMOUNTS:
            run = tmp_path / f"{cases}" / fixture.name
            shutil.copytree(fixture, run)
            target = run / path.relative_to(fixture)
            _set_first(target, key, value)
            with pytest.raises(tables.ResultsError) as err:
                tables.read(run)
            _one_line(err.value)
            assert str(target) in str(err.value) and repr(key) in str(err.value), err.value
            cases += 1
    assert cases >= 4  # every fixture has learner update rows with seconds_per_update
    print(f"{fixture.name}: {cases} mutated folders refused")


@pytest.mark.parametrize("command", ["report", "plot"])
def test_report_and_plot_refuse_a_negative_seconds_per_update(tmp_path, command):
    import shutil

    from typer.testing import CliRunner

    from harness.cli import app

    run = tmp_path / "run"
    shutil.copytree(FIXTURES[0], run)
    path = next(p for p, k in _update_fields(run) if k == "seconds_per_update" and p.name == "events-learner.jsonl")
    _set_first(path, "seconds_per_update", -5)
    res = CliRunner().invoke(app, [command, str(run)])
    assert res.exit_code == 2, res.output
    line = res.output.strip().splitlines()[-1]
    assert "seconds_per_update" in line and str(path) in line and "Traceback" not in res.output, res.output
