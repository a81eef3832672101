"""Every file reader a user's file reaches (trace CSV, Mahimahi, profile YAML, preset and grid YAML,
the shared bounded YAML loader) and the trace generator's numbers, fed arbitrary bytes and arbitrary
numbers: each returns a value within the limits or raises its one-line error type, within a
deadline (hypothesis's `deadline`, on inputs of bounded size). The default example counts keep the
file to seconds; the `slow` variant runs each property 20x longer."""
from __future__ import annotations

import datetime
import math

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from harness import readers, units
from harness.net import profiles, traces
from harness.run import commands, presets
from harness.run.config import ConfigError

EXAMPLES = 40
DEADLINE = datetime.timedelta(seconds=5)     # per example; every input here is a few KB at most


def fuzz(examples: int = EXAMPLES):
    return settings(max_examples=examples, deadline=DEADLINE, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.filter_too_much, HealthCheck.data_too_large])


def one_line(err: BaseException) -> None:
    text = str(err)
    assert text and "\n" not in text, repr(text)


# numbers as a file holds them: anything float() or int() reads, the edges first
floats = st.one_of(st.sampled_from([0.0, -0.0, 1e-9, 1e-5, 1e12, 1e300, -1.0, math.inf, -math.inf, math.nan]),
                   st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**20, 10**20).map(float))
texts = st.one_of(st.binary(max_size=2000).map(lambda b: b.decode("utf-8", "replace")),
                  st.text(alphabet="0123456789.,-e \n#xinfa", max_size=400))


def _csv(rows) -> str:
    return "".join(",".join(repr(v) for v in row) + "\n" for row in rows)


def check_trace(t: traces.Trace) -> None:
    """What a Trace the readers return keeps, whatever the file said."""
    assert 0 < t.period_s <= traces.MAX_SPAN_S
    assert len(t.times_s) == len(t.rate_bit_s) >= 1
    assert all(0 <= r <= units.RATE_MAX_BIT_S for r in t.rate_bit_s)
    t.stats()                                       # bounded bins whatever the period
    try:                                            # played: a bounded number of steps, or one line
        assert traces.check_interval(1.0, t.period_s, t.name) <= traces.MAX_STEPS
    except traces.TraceError as err:
        one_line(err)
    t.steps(min(traces.MAX_INTERVAL_S, max(1.0, t.period_s / 100)), t.period_s)


def _load_trace(tmp_path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    try:
        check_trace(traces.load(path))
    except traces.TraceError as err:
        one_line(err)


@pytest.mark.parametrize("examples", [EXAMPLES, pytest.param(20 * EXAMPLES, marks=pytest.mark.slow)])
def test_trace_files_of_any_bytes(tmp_path, examples):
    @fuzz(examples)
    @given(data=st.one_of(st.binary(max_size=4000), texts.map(str.encode)),
           name=st.sampled_from(["t.csv", "t.mahi", "t.txt", "t.down"]))
    def prop(data, name):
        _load_trace(tmp_path, name, data)
    prop()


@pytest.mark.parametrize("examples", [EXAMPLES, pytest.param(20 * EXAMPLES, marks=pytest.mark.slow)])
def test_trace_csv_of_any_numbers(examples):
    @fuzz(examples)
    @given(st.lists(st.lists(floats, min_size=1, max_size=5), min_size=0, max_size=30))
    def prop(rows):
        try:
            check_trace(traces.parse_csv(_csv(rows), "c"))
        except traces.TraceError as err:
            one_line(err)
    prop()


@pytest.mark.parametrize("examples", [EXAMPLES, pytest.param(20 * EXAMPLES, marks=pytest.mark.slow)])
def test_mahimahi_of_any_timestamps(examples):
    @fuzz(examples)
    @given(st.lists(st.one_of(st.integers(0, 2000), st.integers(0, 10**18)), max_size=50), st.booleans())
    def prop(stamps, ordered):
        text = "\n".join(map(str, sorted(stamps) if ordered else stamps)) + "\n"
        try:
            check_trace(traces.parse_mahimahi(text, "m"))
        except traces.TraceError as err:
            one_line(err)
    prop()


@pytest.mark.parametrize("examples", [EXAMPLES, pytest.param(20 * EXAMPLES, marks=pytest.mark.slow)])
def test_generate_with_any_numbers(examples):
    @fuzz(examples)
    @given(kind=st.sampled_from(traces.KINDS), seconds=floats, step=floats, mean=floats, sd=floats, low=floats,
           period=floats, every=floats, outage=floats)
    def prop(kind, seconds, step, mean, sd, low, period, every, outage):
        try:
            t = traces.generate(kind, seconds=seconds, step_s=step, mean_bit_s=mean, sd_frac=sd, low_frac=low,
                                period_s=period, outage_every_s=every, outage_s=outage)
        except traces.TraceError as err:
            one_line(err)
            return
        assert len(t.times_s) <= traces.MAX_TRACE_ROWS
        check_trace(t)
    prop()


# ---- YAML: the shared loader, profiles, presets, grids ---------------------------------------------

yaml_scalars = st.one_of(st.none(), st.booleans(), floats, st.integers(-10**30, 10**30),
                         st.sampled_from(["10mbit", "1e300gbit", "0ms", "20ms", "1%", "100%", "nan", "-1s", "w1",
                                          "cellular-lte.csv", "", "inf"]))
link_keys = st.sampled_from(sorted(profiles._LINK_KEYS | {"up", "down", "bogus"}))
yaml_docs = st.recursive(yaml_scalars, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                               st.dictionaries(st.one_of(link_keys, st.text(max_size=5)),
                                                                               kids, max_size=4)), max_leaves=20)


def _yaml_text(doc) -> str:
    import yaml
    return yaml.safe_dump(doc, sort_keys=False)


@pytest.mark.parametrize("examples", [EXAMPLES, pytest.param(20 * EXAMPLES, marks=pytest.mark.slow)])
def test_bounded_yaml_of_any_text(examples):
    @fuzz(examples)
    @given(st.one_of(texts, st.integers(0, 3000).map(lambda n: "a: " + "[" * n + "]" * n),
                     st.integers(1, 12).map(lambda n: "".join(f"k{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9) if i else 1}]\n"
                                                              for i in range(n)))))
    def prop(text):
        try:
            readers.parse_yaml(text, "y")
        except readers.FileError as err:
            one_line(err)
    prop()


@pytest.mark.parametrize("examples", [EXAMPLES, pytest.param(20 * EXAMPLES, marks=pytest.mark.slow)])
def test_profiles_of_any_bytes_and_any_documents(tmp_path, examples):
    @fuzz(examples)
    @given(st.one_of(st.binary(max_size=2000), texts.map(str.encode),
                     st.fixed_dictionaries({}, optional={"defaults": yaml_docs, "learner": yaml_docs,
                                                         "workers": st.dictionaries(st.sampled_from(["w1", "w2", "x"]),
                                                                                    yaml_docs, max_size=2),
                                                         "schedule": st.lists(yaml_docs, max_size=2)})
                     .map(lambda d: _yaml_text(d).encode())))
    @example(b"defaults:\n? '\n\n'")                # a key holding newlines: still one line
    def prop(data):
        path = tmp_path / "fz.yaml"
        path.write_bytes(data)
        try:
            prof = profiles.load(path)
        except profiles.ProfileError as err:
            one_line(err)
            return
        prof.link("w1")
    prop()


@pytest.mark.parametrize("examples", [EXAMPLES, pytest.param(20 * EXAMPLES, marks=pytest.mark.slow)])
def test_presets_and_grids_of_any_bytes(tmp_path, examples):
    values = st.dictionaries(st.sampled_from(["lr", "workers", "budget", "method", "seed", "bw", "bogus"]),
                             st.one_of(yaml_scalars, st.lists(yaml_scalars, max_size=3)), max_size=4)

    @fuzz(examples)
    @given(st.one_of(st.binary(max_size=2000), texts.map(str.encode),
                     st.fixed_dictionaries({"values": values}, optional={"description": yaml_scalars})
                     .map(lambda d: _yaml_text(d).encode()),
                     values.map(lambda d: _yaml_text(d).encode())))
    def prop(data):
        path = tmp_path / "p.yaml"
        path.write_bytes(data)
        try:
            presets.load(str(path))
        except presets.PresetError as err:
            one_line(err)
        try:
            grid = commands.load_grid(str(path), {})
            commands.grid_points(grid)
        except ConfigError as err:
            one_line(err)
    prop()
