"""Units and profiles: parsing once at the edge, every shipped profile valid, bad input named."""
import pytest
import yaml

from harness.net import profiles

from harness import units
from harness.net.profiles import ProfileError


@pytest.mark.parametrize("text,bit_s", [
    ("62.5mbit", 62.5e6), ("1gbit", 1e9), ("100kbit", 1e5), ("10mibit", 10 * 1024**2),
    ("1MBps", 8e6), ("5000", 5000.0), (1000, 1000.0), ("1.5Gbit", 1.5e9),
    ("1kbit", 1e3), ("100gbit", 100e9),      # the physical range's ends are valid
])
def test_parse_rate(text, bit_s):
    assert units.parse_rate(text) == pytest.approx(bit_s)


@pytest.mark.parametrize("text,secs", [
    ("20ms", 0.02), ("500us", 0.0005), ("1s", 1.0), ("2sec", 2.0), ("250usec", 0.00025), (0, 0.0), ("0", 0.0),
])
def test_parse_time(text, secs):
    assert units.parse_time(text) == pytest.approx(secs)


@pytest.mark.parametrize("text,frac", [("0.1%", 0.001), ("100%", 1.0), ("0%", 0.0), (0, 0.0), ("5 %", 0.05)])
def test_parse_percent(text, frac):
    assert units.parse_percent(text) == pytest.approx(frac)


@pytest.mark.parametrize("parser,value,needle", [
    (units.parse_rate, "-5mbit", "> 0"), (units.parse_rate, "0mbit", "> 0"),
    (units.parse_rate, "10furlongs", "unknown rate unit"), (units.parse_rate, "fast", "not a rate"),
    (units.parse_time, "-1ms", "is negative: a time is 0 or more (1ms?)"), (units.parse_time, "20parsecs", "unknown time unit"),
    # a bare number: tc(8) reads microseconds, the help's "[unit: s]" seconds; neither is guessed
    (units.parse_time, "20", "needs a unit: 20ms, 20s"), (units.parse_time, "0.02", "needs a unit"),
    (units.parse_delay, 20, "needs a unit"), (units.parse_time, 0.5, "needs a unit"),
    (units.parse_percent, "101%", "within 0% and 100%"), (units.parse_percent, "0.05", "'%' suffix"),
    (units.parse_rate, True, "not a rate"), (units.parse_rate, "nan", "not a rate"),
    # physical ranges: these passed validation once and crashed in the kernel apply
    (units.parse_rate, "1e30tbit", "within 1kbit and 100gbit"), (units.parse_rate, "0.001bit", "within 1kbit and 100gbit"),
    (units.parse_rate, "999bit", "within 1kbit"), (units.parse_rate, "100.1gbit", "100gbit"),
    (units.parse_delay, "10.001s", "within 0 and 10s"), (units.parse_delay, "-1ms", "is negative"),
    (units.parse_loss, "100%", "below 100%"), (units.parse_loss, "101%", "within 0% and 100%"),
    (units.parse_count, 0, ">= 1"), (units.parse_count, 99999999999999, "<= 2147483647"),
    (units.parse_count, 2**31, "<= 2147483647"), (units.parse_count, 1.5, "not a whole number"),
])
def test_bad_units_name_the_value(parser, value, needle):
    with pytest.raises(units.UnitError) as err:
        parser(value)
    assert repr(value) in str(err.value) and needle in str(err.value)


def test_range_ends_are_accepted():
    assert units.parse_delay("10s") == 10.0 and units.parse_delay(0) == 0.0
    assert units.parse_loss("99.99%") == pytest.approx(0.9999) and units.parse_loss("0%") == 0.0
    assert units.parse_count(1) == 1 and units.parse_count(2**31 - 1) == 2**31 - 1


def test_a_long_bad_value_is_cut_to_one_short_line():
    with pytest.raises(units.UnitError) as err:
        units.parse_rate("9" * 500 + "furlongs")
    assert len(str(err.value)) < 200 and "\n" not in str(err.value)


@pytest.mark.parametrize("bit_s", [1e3, 62.5e6, 1e9, 2.5e9])
def test_rate_round_trip(bit_s):
    assert units.parse_rate(units.format_rate(bit_s)) == pytest.approx(bit_s)


@pytest.mark.parametrize("secs", [0.0, 0.0005, 0.02, 0.3, 2.0])
def test_time_round_trip(secs):
    assert units.parse_time(units.format_time(secs)) == pytest.approx(secs)


REQUIRED = ["paper-62.5mbit", "lan", "transatlantic", "intercontinental-lossy", "home-broadband",
            "mobile-4g", "satellite-geo", "heterogeneous-edge"]


def test_required_profiles_ship_with_description_and_source():
    names = profiles.list_profiles()
    for name in REQUIRED:
        assert name in names
        prof = profiles.load(name)
        assert prof.description and "\n" not in prof.description
        assert prof.source


@pytest.mark.parametrize("name", REQUIRED)
def test_profile_doc_round_trip(name):
    prof = profiles.load(name)
    back = profiles.from_doc(yaml.safe_load(yaml.safe_dump(prof.to_doc())), name)
    for node in ("learner", "w1", "w2", "w3"):
        assert back.link(node) == prof.link(node)
        for t in prof.change_times():
            assert back.link(node, t) == prof.link(node, t)


def test_paper_profile_is_the_hilo_testbed():
    link = profiles.load("paper-62.5mbit").link("w7")
    assert link.up.rate_bit_s == link.down.rate_bit_s == 62.5e6
    assert link.up.delay_s == link.up.loss_frac == 0


def test_asymmetric_overrides_and_schedule():
    home = profiles.load("home-broadband").link("w1")
    assert home.up.rate_bit_s == 18e6 and home.down.rate_bit_s == 70e6
    edge = profiles.load("heterogeneous-edge")
    assert edge.link("w2").up.loss_frac == pytest.approx(0.01)
    assert edge.link("w3").up.rate_bit_s == 5e6 and edge.link("w3").down.rate_bit_s == 50e6
    assert edge.link("w1").down.rate_bit_s == 50e6
    assert edge.link("w1", at_s=30).down.rate_bit_s == 20e6
    assert edge.link("w1", at_s=29.9).down.rate_bit_s == 50e6


def test_gilbert_elliott_mean_loss():
    doc = {"defaults": {"burst_loss": {"p": "1%", "r": "9%"}}}
    ge = profiles.from_doc(doc, "ge").link("w1").up.burst_loss
    assert ge.mean_loss() == pytest.approx(0.1)


BAD_DOCS = [
    ({"defaults": {"rate": "-5mbit"}}, "x.defaults.rate", "'-5mbit'"),
    ({"defaults": {"rate": "0mbit"}}, "x.defaults.rate", "'0mbit'"),
    ({"defaults": {"loss": "150%"}}, "x.defaults.loss", "'150%'"),
    ({"defaults": {"delay": "20lightyears"}}, "x.defaults.delay", "'20lightyears'"),
    ({"defaults": {"speed": "1gbit"}}, "x.defaults.speed", "unknown key"),
    ({"bandwidth": "1gbit"}, "x.bandwidth", "unknown key"),
    ({"defaults": {"delay": "5ms", "jitter": "10ms"}}, "x.defaults.jitter", "'10ms'"),
    ({"defaults": {"up": {"rate": "fast"}}}, "x.defaults.up.rate", "'fast'"),
    ({"defaults": {"limit": 0}}, "x.defaults.limit", "0"),
    ({"workers": {"worker1": {"rate": "1mbit"}}}, "x.workers.worker1", "unknown worker"),
    ({"workers": {"w2": {"loss": "-1%"}}}, "x.workers.w2.loss", "'-1%'"),
    ({"schedule": [{"at": "-3s", "rate": "1mbit"}]}, "x.schedule[0].at", "'-3s'"),
    ({"schedule": [{"at": "3s", "target": "everyone"}]}, "x.schedule[0].target", "'everyone'"),
    ({"defaults": {"burst_loss": {"p": "1%"}}}, "x.defaults.burst_loss", "'r'"),
    ({"name": "y"}, "x.name", "'y'"),
    # physical ranges: each of these once reached the kernel and crashed there
    ({"defaults": {"limit": 99999999999999}}, "x.defaults.limit", "99999999999999"),
    ({"defaults": {"limit": 2**31}}, "x.defaults.limit", "<= 2147483647"),
    ({"defaults": {"loss": "100%"}}, "x.defaults.loss", "below 100%"),
    ({"defaults": {"rate": "1e30tbit"}}, "x.defaults.rate", "'1e30tbit'"),
    ({"defaults": {"down": {"rate": "0.001bit"}}}, "x.defaults.down.rate", "'0.001bit'"),
    ({"defaults": {"delay": "11s"}}, "x.defaults.delay", "within 0 and 10s"),
    ({"learner": {"jitter": "20s", "delay": "20s"}}, "x.learner.delay", "'20s'"),
    ({"workers": {"w2": {"up": {"loss": "100%"}}}}, "x.workers.w2.up.loss", "'100%'"),
    ({"schedule": [{"at": "5s", "rate": "1e30tbit"}]}, "x.schedule[0].rate", "'1e30tbit'"),
    ("just a string", "x", "not a mapping"),
]


@pytest.mark.parametrize("doc,field,value", BAD_DOCS)
def test_bad_profile_names_field_and_value(doc, field, value):
    with pytest.raises(ProfileError) as err:
        profiles.from_doc(doc, "x")
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(field) and value in msg


def test_unknown_profile_lists_valid_names():
    with pytest.raises(ProfileError) as err:
        profiles.load("no-such-profile")
    assert "'no-such-profile'" in str(err.value) and "paper-62.5mbit" in str(err.value)


def test_unreadable_yaml(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("defaults: {rate: [unclosed\n")
    with pytest.raises(ProfileError) as err:
        profiles.load(bad)
    assert "not valid YAML" in str(err.value) and "\n" not in str(err.value)


def test_a_profile_resolves_its_links_once_when_it_loads():
    """resolve() = load + the flags over it; every worker the profile does not name
    shares the default link (built once), a named one keeps its own; to_doc() is a fresh copy."""
    prof = profiles.resolve("heterogeneous-edge")
    assert prof.link("w7") is prof.link("w1") is prof.link("w40")  # the default worker link, built at load
    assert prof.link("w3") != prof.link("w1")                        # named in the profile: its own link
    with pytest.raises(ProfileError, match="node: 'x'"):
        prof.link("x")
    doc = prof.to_doc()
    doc["defaults"]["rate"] = "1kbit"
    assert prof.to_doc() != doc and prof.to_doc() == profiles.from_doc(prof.to_doc(), prof.name).to_doc()
    flagged = profiles.resolve("paper-62.5mbit", {"rate": "10mbit", "delay": "20ms"})
    assert flagged == profiles.with_link(profiles.load("paper-62.5mbit"), {"rate": "10mbit", "delay": "20ms"})
    assert flagged.link("w2").down.rate_bit_s == 10e6 and flagged.link("w2").up.delay_s == 0.02
    with pytest.raises(profiles.OverrideError) as err:
        profiles.resolve("heterogeneous-edge", {"rate": "10mbit"})
    assert err.value.key == "rate" and "contradicts profile 'heterogeneous-edge'" in str(err.value)


def test_an_empty_profile_says_it_is_empty():
    """An empty YAML file parses to None: the error read "empty: None is not a mapping"."""
    with pytest.raises(profiles.ProfileError, match=r"^x: the profile is empty \(a YAML mapping: name, defaults"):
        profiles.from_doc(None, "x")


def test_a_profile_part_of_the_wrong_kind_is_named_in_words():
    """`workers: [{delay: -5ms}]` read "[{'delay': '-5ms'}] must be a mapping of wN -> link" (a Python repr)."""
    with pytest.raises(profiles.ProfileError, match=r"^x\.workers: a list here; it must be a mapping of wN -> link"):
        profiles.from_doc({"workers": [{"delay": "-5ms"}]}, "x")
