"""`harness project`'s inputs: every flag parsed and validated into one `Inputs` (ValueError: one line
naming the flag), the adapter's factor shapes (the named model instantiated on the meta device: the
only torch this command touches, with a plugin compressor's class when one is projected), the network
(worker links from --bw/--delay/--loss or a profile; a shaped learner link is shared by every worker;
an optional relay tree), and the compute per update (given, or fitted from a measured run with --from).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.projection import costmodel as cm
from harness import units
from trainers import spec

if TYPE_CHECKING:
    from harness.net.profiles import Profile
    from harness.results.tables import RunTables


@dataclass(frozen=True)
class MeasuredRun:
    """The run `--from` names (opened and checked by harness/projection/source.py): one run folder and its
    tables; `updates` holds its HiLo rows only (the cost model's seconds are HiLo's round)."""
    path: Path
    tables: RunTables

    @property
    def config(self) -> dict:
        return self.tables.runs[0].config

    @property
    def meta(self) -> dict:
        return self.tables.runs[0].meta

    @property
    def updates(self):
        u = self.tables.updates
        return u[~u["method"].map(spec.is_data_parallel)]

    def compressor_options(self) -> dict[str, Any]:
        """The compressor options the run ran with (spec group "compressor": spar_dtype, powersgd_rank, ...)."""
        cfg = self.config
        return {p.name: cfg[p.name] for p in spec.PARAMS if p.group == "compressor" and cfg.get(p.name) is not None}

    def profile(self) -> Profile | None:
        """The link as the run shaped it (profile_doc holds every override and the comm ratio's scaling);
        None for a run without emulation (localhost, unshaped)."""
        from harness.net import profiles

        cfg = self.config
        if not cfg.get("emulation", True):
            return None
        return profiles.from_doc(cfg["profile_doc"], cfg["profile_name"])


@dataclass(frozen=True)
class Inputs:
    adapter: cm.Adapter
    net: cm.Network
    compute: cm.Compute
    variants: tuple[tuple[str, str | None], ...]
    baseline: str
    pipelines: tuple[int, ...]
    send: str
    options: dict
    notes: tuple[str, ...]
    model: str
    rate_bit_s: float | None
    updates_fitted: int = 0    # with --from: the run's updates the compute was fitted on
    # with --from: the compressed variants the run did not measure (no --encode-s/--replay-s given): their
    # encode, decode and replay are taken as 0, so their seconds are a lower bound and their speedup an upper one
    unmeasured: tuple[str, ...] = ()


def adapter_for(model: str, rank: int) -> cm.Adapter:
    """The adapter's factor shapes, read from the model built on the meta device, with the byte
    statement of every installed plugin compressor (`plugin_bytes`)."""
    import warnings

    from trainers.model.models import lora_shapes

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cm.Adapter.from_shapes(lora_shapes(model, rank), rank, model, stated=plugin_bytes())


def dp_tensors(model: str, train: str | None, lora_rank: int) -> cm.Tensors:
    """(name, shape) of what a data-parallel replica synchronises (trainers/dataparallel/inprocess.py
    `replica`): every parameter of the model under --dp-train full (a tied head once), its LoRA factors
    under lora; read from the meta device. A run older than --dp-train (None) trained the full model."""
    import warnings

    from trainers.model.models import lora_shapes, parameter_shapes

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shapes = lora_shapes(model, lora_rank) if dp_rank(train, lora_rank) is not None else parameter_shapes(model)
    return tuple((n, tuple(s)) for n, s in shapes)


def dp_rank(train: str | None, lora_rank: int) -> int | None:
    """The LoRA rank of what a data-parallel replica synchronises, None for the whole model (--dp-train full,
    and a run older than --dp-train): the key of its shapes in the models cache."""
    return lora_rank if (train or "full") == "lora" else None


def plugin_bytes() -> dict[str, cm.StatedBytes]:
    """Plugin compressor name -> its StatedBytes: the class is loaded only when a projection asks."""
    return {name: functools.partial(_stated, name) for name in spec.compressor_names()
            if name not in spec.COMPRESSOR_OPTIONS}


def _stated(name: str, tensors: cm.Tensors, budget: str | None) -> int:
    """`Compressor.stated_bytes` of plugin `name`, built with its defaults (and `budget`, if it takes one)."""
    from trainers import compress

    options = {"budget": budget} if budget is not None and name in spec.budgeted_names() else {}
    return compress.get_compressor(name, **options).stated_bytes(list(tensors))


def budget_refusal(model: str, rank: int, method: str, options: dict) -> str | None:
    """Why budgeted compressor `method` with `options` (a --budget-bytes) cannot encode one update of
    this model's adapter, or None: the compressor itself encodes one random gradient of the adapter's
    layout, so the refusal is the one the learner would meet at its first update (a payload's fixed
    overhead is larger than the cap)."""
    import warnings

    from trainers import compress
    from trainers.model.models import lora_shapes

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grads = compress.base.zeros_for(lora_shapes(model, rank))
    for t in grads.values():
        t.normal_()             # a gradient's values; the refusal is about the cap, not about them
    try:
        compress.get_compressor(method, **options).encode(grads)
    except ValueError as err:
        return str(err)
    return None


def parameter_count(model: str) -> int:
    from trainers.model.models import count_parameters

    return count_parameters(model).total


def _rate(text: str | None, flag: str) -> float | None:
    try:
        return None if text in (None, "", "none") else units.parse_rate(text)
    except ValueError as err:
        raise ValueError(f"{flag}: {err}") from None


def _time(text: str | None, flag: str) -> float:
    try:
        return 0.0 if text in (None, "") else units.parse_time(text)
    except ValueError as err:
        raise ValueError(f"{flag}: {err}") from None


def _loss(text: str | None) -> float:
    try:
        return 0.0 if text in (None, "") else units.parse_percent(text)
    except ValueError as err:
        raise ValueError(f"--loss: {err}") from None


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """--opt powersgd_rank=4 --opt spar_dtype=bf16: compressor options as run-spec parameters."""
    out = {}
    names = {p.name for p in spec.PARAMS if p.group == "compressor"} | set(cm.MODEL_OPTIONS)
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in names:
            raise ValueError(f"--opt: {pair!r} is not NAME=VALUE with NAME a compressor option "
                             f"({', '.join(sorted(names))})")
        out[key] = model_option(key, value) if key in cm.MODEL_OPTIONS else spec.parse_value(key, value)
    return out


def model_option(key: str, value: str) -> float:
    """A cost-model-only option (cm.MODEL_OPTIONS: delta's measured density and codec ratio), a fraction in (0, 1]."""
    try:
        x = float(value)
    except ValueError:
        x = float("nan")
    if not 0 < x <= 1:
        raise ValueError(f"--opt: {key}={value!r} must be a fraction in (0, 1]")
    return x


def network(workers: int, bw: str | None, delay: str | None, loss: str | None, profile: str | None,
            learner_bw: str | None, relay_fanout: int | None, cc: str, mtu: int,
            base: "Profile | None" = None) -> tuple[cm.Network, float | None]:
    """The links: `profile` (a name or a YAML path), else `base` (a measured run's link as it ran), else
    uniform worker links; --bw, --delay and --loss override a profile's worker defaults."""
    kw = dict(relay_fanout=relay_fanout, cc=cc, mtu=mtu)
    if profile or base is not None:
        from harness.net import profiles

        prof = profiles.load(profile) if profile else base
        given = {k: v for k, v in dict(rate=bw, delay=delay, loss=loss).items() if v is not None}
        if given:
            prof = profiles.with_link(prof, given)
        net = cm.Network.from_profile(prof, workers, **kw)
        if learner_bw:
            rate = _rate(learner_bw, "--learner-bw")
            net = replace(net, learner=cm.Node(replace(net.learner.up, rate_bit_s=rate),
                                               replace(net.learner.down, rate_bit_s=rate)))
        return net, net.workers[0].down.rate_bit_s
    rate = _rate(bw, "--bw")
    net = cm.Network.uniform(workers, rate, _time(delay, "--delay"), _loss(loss),
                             _rate(learner_bw, "--learner-bw"), **kw)
    return net, rate


def build(*, model: str, lora_rank: int, workers: int, bw: str | None, delay: str | None, loss: str | None,
          profile: str | None, learner_bw: str | None, relay_fanout: int | None, method: tuple[str, ...],
          budget: tuple[str, ...], baseline: str, pipeline: tuple[int, ...], compute_s: float | None,
          rollout_s: float | None, train_s: float | None, rollout_share: float, encode_s: float, replay_s: float,
          send: str, cc: str, mtu: int, rollout_bytes: int | None, run: MeasuredRun | None,
          shared_cores: int | None, opt: list[str]) -> Inputs:
    """`harness project`'s values, each parsed by its parameter (harness/projection/params.py), checked
    together and with what they name: the model, the methods, the options, the profile, the run
    (ValueError: one line naming the flag). `run` (--from, harness/projection/source.py): the compute is
    fitted on it, and without --profile/--bw/--delay/--loss its link is the projection's."""
    spec.check_model(model)
    methods = [spec.check_method(m) for m in method]
    spec.check_method(baseline)
    for flag, name in [("--method", m) for m in methods] + [("--baseline", baseline)]:
        if spec.is_data_parallel(name):
            raise ValueError(f"{flag}: {name} is data-parallel: the cost model projects HiLo methods only (a "
                             "data-parallel method's bytes per step are in its run's report, "
                             "harness/projection/dpbytes.py)")
    # the run's compressor options (spar_dtype, powersgd_rank, ...) under the --opt given
    opts = {**(run.compressor_options() if run is not None else {}), **parse_options(opt)}
    # a set powersgd_rank opts powersgd out of the budget (spec.takes_budget)
    variants = tuple(dict.fromkeys((m, b if spec.takes_budget(m, opts) else None) for m in methods for b in budget))
    pipelines = tuple(sorted(pipeline))
    cores = shared_cores
    options = dict(opts)
    try:
        base = run.profile() if run is not None and not profile else None
        net, rate = network(workers, bw, delay, loss, profile, learner_bw, relay_fanout, cc, mtu, base)
    except ValueError as err:
        raise ValueError(str(err) if str(err).startswith("--") else f"--profile: {err}") from None
    adapter = adapter_for(model, lora_rank)
    notes: list[str] = []
    fitted_n = 0
    if run is not None:
        compute, fitted_n, more = fitted_compute(run, adapter, shared_cores=cores)
        notes += more
        given = parse_options(opt)
        measured = {k: v for k, v in delta_options(run.updates).items() if k not in given}   # --opt wins
        if measured and any(m == "delta" for m, _ in variants):
            options = {**options, **measured}
            notes.append(f"delta's density {measured['delta_density']:.3f} and compression "
                         f"{measured['delta_compression']:.3f} measured on {run.path} (medians over its updates)")
    elif compute_s is None and (rollout_s is None or train_s is None):
        raise ValueError("--compute-s: give the compute per update (or --rollout-s and --train-s, or --from RUN)")
    else:
        compute = cm.Compute(0.0, 0.0, shared_cores=cores)
    if compute_s is not None or rollout_s is not None or train_s is not None:
        base = cm.split_compute(compute_s or 0.0, rollout_share)
        given_train = compute_s is not None or train_s is not None
        compute = replace(compute, rollout_s=rollout_s if rollout_s is not None else base.rollout_s,
                          train_s=train_s if train_s is not None else base.train_s,
                          train_workers=None if given_train else compute.train_workers)  # as given: for --workers
    if run is None or encode_s or replay_s:
        codec = cm.Codec(encode_s, replay_s, replay_s)
        codecs = dict(compute.codecs)
        for m, b in variants:
            if _has_codec(m):
                codecs[spec.variant_label(m, b)] = codec
        compute = replace(compute, codecs=codecs)
        if not encode_s and not replay_s and any(m in spec.compressor_names() for m, _ in variants):
            notes.append("encode and replay cost of compressed methods taken as 0 (give --encode-s/--replay-s)")
    unmeasured = tuple(label for m, b in variants if _has_codec(m)
                       for label in [spec.variant_label(m, b)] if label not in compute.codecs and m not in compute.codecs)
    if rollout_bytes is not None:
        compute = replace(compute, rollout_bytes=rollout_bytes)
    if cores is not None and compute.shared_cores != cores:
        compute = replace(compute, shared_cores=cores)
    return Inputs(adapter, net, compute, variants, baseline, pipelines, send, options, tuple(notes), model, rate,
                  fitted_n, unmeasured if run is not None else ())


def _has_codec(method: str) -> bool:
    """Whether `method` encodes its update (a compressor), i.e. has encode and decode/replay seconds to
    measure: full, full-bf16 and rank-R ship the adapter as it is, in a fixed dtype."""
    found = spec.method_card(method)
    return found is None or "ship_dtype" not in found[1]


def fitted_compute(run: MeasuredRun, target: cm.Adapter,
                   shared_cores: int | None = None) -> tuple[cm.Compute, int, list[str]]:
    """Compute terms fitted on a measured run (its own network and adapter), codec terms scaled to the
    target adapter's size when it differs (linear in adapter parameters, same hardware); the updates the
    fit used; notes."""
    cfg, meta = run.config, run.meta
    cores = shared_cores if shared_cores is not None else (meta.get("cpus") if cfg.get("emulation", True) else None)
    own = adapter_for(cfg["model"], cfg["lora_rank"])
    prof = run.profile()
    net = (cm.Network.from_profile(prof, cfg["workers"], cc=host_cc()) if prof is not None else
           cm.Network.uniform(cfg["workers"], None, cc=host_cc()))
    fitted = cm.fit(run.updates, net, own, shared_cores=cores, source=str(run.path))
    notes = [f"compute fitted on {run.path} ({fitted.updates_used} updates, {cfg['model']} rank {cfg['lora_rank']}, "
             f"{cfg['workers']} workers{f', {cores} shared cores' if cores else ''})"]
    compute = fitted.compute
    if own.n_params != target.n_params:
        factor = target.n_params / own.n_params
        compute = replace(compute, codecs={k: c.scaled(factor) for k, c in compute.codecs.items()})
        notes.append(f"codec terms scaled x{factor:.3g} to the target adapter; rollout and train kept as measured "
                     "(give --compute-s for the target model)")
    return compute, fitted.updates_used, notes


def measured_delta(run: str) -> dict[str, float]:
    """delta_density and delta_compression (cm.MODEL_OPTIONS) as `delta` measured them in a run: the
    median fraction of elements changed per update, and the median payload over its raw (index, value)
    pairs (zstd's gain); {} when the run has no delta update. Without them the model takes the worst
    case (every element, no compression: ~3x full-bf16's bytes where the run measured ~0.8x)."""
    from harness.results.tables import read

    return delta_options(read(run).updates)


def delta_options(ups) -> dict[str, float]:
    """measured_delta on a run's updates table (prediction.py has it loaded already)."""
    if ups.empty or "delta_changed" not in ups:
        return {}
    d = ups[(ups["variant"] == "delta") & (ups["delta_changed"] > 0)]
    if d.empty:
        return {}
    dtype = str(d["delta_dtype"].iloc[0]) if "delta_dtype" in d else spec.get("delta_dtype").default
    raw = d["delta_changed"] * (cm.DELTA_INDEX_BYTES + cm.DTYPE_BYTES[dtype])
    return {"delta_density": float(d["delta_density"].median()),
            "delta_compression": float(min(1.0, ((d["payload_bytes_down"] - cm.DELTA_HEADER_BYTES) / raw).median()))}


def host_cc() -> str:
    """This host's TCP congestion control (what an emulated run here used), else cubic."""
    try:
        cc = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    except OSError:
        return "cubic"
    return cc if cc in cm.CONGESTION_CONTROLS else "cubic"
