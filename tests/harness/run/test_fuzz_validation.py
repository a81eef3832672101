"""Property-based fuzzing of what users type: run-spec values (flags, grid YAML) and WAN profile
documents. Whatever the input, validation either accepts it or raises its own one-line usage
error; it never lets another exception through (which the CLI would print as a traceback), and
anything it accepts can be planned without error."""
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
