"""Each run parameter says which family of methods alone reads it (`Param.family`): HiLo's learner + workers
or the data-parallel aggregator + dp workers. A label about one family's method leaves the other's out
(harness/results/verdict.py `beyond_link`), so the field must match what each family's code reads."""
from trainers import spec
from trainers.dataparallel.config import dp_config


def test_every_parameter_names_a_known_family():
    assert {p.name: p.family for p in spec.PARAMS if p.family not in spec.FAMILIES} == {}


def test_the_families_of_a_few_parameters():
    assert spec.get("lordo_k").family == spec.DP and spec.get("dp_batch").family == spec.DP
    assert spec.get("budget").family == spec.HILO and spec.get("task").family == spec.HILO
    assert {p.family for p in spec.PARAMS if p.group == "compressor"} == {spec.HILO}   # delta's options too
    assert spec.get("lr").family == spec.get("workers").family == spec.get("profile").family == ""


def test_a_method_reads_its_own_family_and_the_shared_parameters():
    assert spec.method_family("lordo-global") == spec.DP and spec.method_family("spar") == spec.HILO
    dp, hilo = spec.params_unread_by("lordo-global"), spec.params_unread_by("spar")
    assert {"budget", "task", "spar_sketch", "weight_decay"} <= dp and "lordo_k" not in dp
    assert {"lordo_k", "diloco_outer_lr", "dp_train"} <= hilo and "budget" not in hilo
    assert not dp & hilo and "lr" not in dp | hilo


class Recording(spec.RunParams):
    """RunParams that notes every parameter read from it (the real object, its values untouched)."""
    __slots__ = ()
    read: set[str] = set()

    def __getattr__(self, name):
        Recording.read.add(name)
        return super().__getattr__(name)


def test_the_data_parallel_config_reads_no_hilo_parameter_and_every_lordo_one():
    Recording.read.clear()
    dp_config(Recording(method="lordo-global"))
    hilo = {p.name for p in spec.PARAMS if p.family == spec.HILO}
    assert Recording.read & hilo == set()
    assert {"lordo_k", "lordo_rank", "diloco_outer_lr", "lowrank_ddp_refresh"} <= Recording.read   # it did record
