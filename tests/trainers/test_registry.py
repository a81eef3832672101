"""One registry style for every extension point (trainers/registry.py) and plugins from entry points
(trainers/plugins.py): unknown names list the valid ones and the close matches; a broken plugin fails
in one line; the names are read without importing anything."""
from __future__ import annotations

from importlib import metadata

import pytest

from trainers import plugins
from trainers.registry import Registry


class Base:
    pass


@pytest.fixture
def fake_entry_points(monkeypatch):
    """Entry points of the `task` group as given, instead of the installed distributions'."""
    def install(**values):
        eps = {n: (metadata.EntryPoint(name=n, value=v, group=plugins.GROUPS["task"]),) for n, v in values.items()}
        monkeypatch.setattr(plugins, "_entry_points", lambda group: eps if group == plugins.GROUPS["task"] else {})
    return install


def make_registry() -> Registry:
    reg = Registry("thing", "things", (), plugin="task", base=Base)

    @reg.register("alpha")
    class Alpha(Base):
        def __init__(self, size: int = 1):
            self.size = size

    return reg


def test_unknown_name_lists_valid_names_and_close_matches():
    msg = plugins.unknown_name("compressor", "compressors", "sapr", ["spar", "topk", "int8"])
    assert msg == "unknown compressor 'sapr'; valid compressors: int8, spar, topk (did you mean spar?)"
    assert "did you mean" not in plugins.unknown_name("task", "tasks", "zzz", ["digits"])


def test_registry_builds_in_tree_names_and_names_bad_options():
    reg = make_registry()
    assert reg.get("alpha", size=3).size == 3 and reg.in_tree() == ["alpha"]
    with pytest.raises(ValueError, match=r"^thing 'alpha': bad options \['colour'\]"):
        reg.get("alpha", colour="red")
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("alpha")(type("Again", (Base,), {}))


def test_plugin_names_are_listed_without_loading(fake_entry_points):
    fake_entry_points(beta="no_such_module_anywhere:Beta")
    reg = make_registry()
    assert reg.available() == ["alpha", "beta"] and reg.plugin_names() == ["beta"]
    with pytest.raises(ValueError, match=r"unknown thing 'alpah'; valid things: alpha, beta \(did you mean alpha\?\)"):
        reg.get("alpah")


def test_a_plugin_that_fails_to_load_fails_in_one_line(fake_entry_points):
    fake_entry_points(beta="no_such_module_anywhere:Beta")
    with pytest.raises(ValueError, match=r"^task plugin 'beta' \(no_such_module_anywhere:Beta\) failed to load: "
                                         r"ModuleNotFoundError"):
        make_registry().get("beta")


def test_a_plugin_must_subclass_its_contract(fake_entry_points):
    fake_entry_points(gamma="collections:OrderedDict")
    with pytest.raises(ValueError, match=r"^thing plugin 'gamma' is .*OrderedDict.*, not a subclass of Base$"):
        make_registry().get_class("gamma")


def test_a_plugin_class_takes_its_entry_point_name(fake_entry_points):
    fake_entry_points(epsilon="tests.trainers.test_registry:Base")
    try:
        cls = make_registry().get_class("epsilon")
        assert cls is Base and cls.name == "epsilon"
    finally:
        Base.__dict__.get("name") and delattr(Base, "name")


def test_the_controller_names_close_matches_too():
    from trainers import spec

    with pytest.raises(spec.SpecError, match=r"^--method: unknown method 'sapr'; valid methods: .*\(did you mean spar\?\)$"):
        spec.check_method("sapr")


def test_an_in_tree_name_is_reserved_a_plugin_taking_it_ignored_with_a_warning(fake_entry_points, capsys):
    fake_entry_points(alpha="no_such_module_anywhere:Alpha")
    reg = make_registry()
    assert reg.plugin_names() == [] and reg.get("alpha").size == 1
    assert ("warning: plugin 'alpha' of no_such_module_anywhere:Alpha is ignored: 'alpha' is an in-tree name "
            "(the in-tree one is used)") in capsys.readouterr().err
    assert ("alpha", "plugin 'alpha' of no_such_module_anywhere:Alpha is ignored: 'alpha' is an in-tree name "
                     "(the in-tree one is used)") in plugins.problems()


@pytest.mark.parametrize("name", ["x@1%", "Upper", "a,b", "-lead", "trail-", "two--dashes", "sp ace", ""])
def test_a_plugin_name_outside_the_in_tree_grammar_is_ignored(fake_entry_points, name):
    fake_entry_points(**{name: "no_such_module_anywhere:X", "fine-name_2": "no_such_module_anywhere:Y"})
    assert make_registry().plugin_names() == ["fine-name_2"]
    assert [n for n, _ in plugins.problems()] == [name]
