"""`harness doctor`: what this machine lacks to build an emulated network, one line per missing piece.

Checked, in order, before anything is built (`harness doctor`, and first thing in `harness run`
with emulation on, `harness sweep` and `harness calibrate`, through :func:`problems`):

- root (network namespaces, qdiscs and netfilter rules need CAP_NET_ADMIN + CAP_SYS_ADMIN);
- kernel features of the backend (:func:`harness.net.backend.decide` picks it, as the run will):
  network namespaces, veth, HTB for both; sch_netem for ``netem``; for ``fallback`` with loss or
  delay, the iptables ``statistic`` match, the ``NFQUEUE`` target, nfnetlink_queue and an
  iptables kernel side (nf_tables compat or ip_tables). Read from the kernel's build config
  (``/proc/config.gz``, ``/boot/config-<release>``), what is loaded (``/sys/module``,
  ``/proc/net/...``) and the installed modules (``/lib/modules/<release>/modules.dep``). A
  feature nothing can tell about is not reported (the run finds out);
- the binaries the harness shells out to: ``iptables-restore`` (loads the fallback's loss and
  delay-line rules) and ``iptables-save`` (reads them back for the loss counters), only where the
  plan has such rules (:func:`needs_rules`: a fallback run with delay, jitter or loss on a link).
  Nothing else is executed: tc state, links, addresses, ethtool settings and link counters go
  through netlink (pyroute2), and ``git`` (meta.json's sha) is optional;
- the machine's limits for the run's number of workers (:mod:`harness.net.limits`: open files,
  neighbour entries, tasks);
- free disk space under the results folder.

Ports need no check: every service listens inside the run's own fresh namespaces.

Each missing piece is one line saying what to install, e.g.
``missing iptables-restore: apt-get install iptables``; the commands exit 2 on any.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from harness.net import cgroups, limits
from harness.net.backend import Decision, _kernel_config, decide

MIN_FREE_BYTES = 512 << 20      # a run writes a few MB; the tiny models' cache tens of MB
IPTABLES_BINARIES = ("iptables-restore", "iptables-save")   # Debian/Ubuntu package: iptables


@dataclass(frozen=True)
class Feature:
    """A kernel feature: present when any of ``configs`` is built in (or a module that is
    installed), or when something shows it loaded (``/sys/module/<module>``, a /proc entry)."""
    name: str
    configs: tuple[str, ...]
    modules: tuple[str, ...] = ()
    proc: tuple[tuple[str, str | None], ...] = ()   # (path, a word it lists, or None: exists)


NETNS = Feature("network namespaces", ("CONFIG_NET_NS",), proc=(("/proc/self/ns/net", None),))
VETH = Feature("veth", ("CONFIG_VETH",), ("veth",))
HTB = Feature("HTB", ("CONFIG_NET_SCH_HTB",), ("sch_htb",))
NETEM = Feature("netem", ("CONFIG_NET_SCH_NETEM",), ("sch_netem",))
STATISTIC = Feature("iptables statistic match", ("CONFIG_NETFILTER_XT_MATCH_STATISTIC",),
                    ("xt_statistic",), (("/proc/net/ip_tables_matches", "statistic"),))
NFQUEUE = Feature("iptables NFQUEUE target", ("CONFIG_NETFILTER_XT_TARGET_NFQUEUE",), ("xt_NFQUEUE",))
NFNL_QUEUE = Feature("nfnetlink_queue", ("CONFIG_NETFILTER_NETLINK_QUEUE",), ("nfnetlink_queue",),
                     (("/proc/net/netfilter/nfnetlink_queue", None),))
XTABLES = Feature("iptables kernel side (nft_compat or ip_tables)", ("CONFIG_NFT_COMPAT", "CONFIG_IP_NF_IPTABLES"),
                  ("nft_compat", "ip_tables"), (("/proc/net/ip_tables_names", None),))
BASE = (NETNS, VETH, HTB)
RULES = (STATISTIC, NFQUEUE, NFNL_QUEUE, XTABLES)


@dataclass
class Report:
    backend: Decision | None = None
    problems: list[str] = field(default_factory=list)   # one line each: what is missing and how to get it
    ok: list[str] = field(default_factory=list)         # what was checked and found (for `harness doctor`)


# ---- the kernel ------------------------------------------------------------------------------

# What each backend is, for a reader of `harness doctor` (harness/net/backend.py decides which one runs).
BACKEND_WORDS = {"netem": "the kernel's sch_netem shapes delay, jitter and loss, HTB the rate",
                 "fallback": "for a kernel without sch_netem: HTB shapes the rate, a delay line on NFQUEUE the "
                             "delay, jitter and loss: the same links, not a degraded mode"}


def kernel_config() -> dict[str, str] | None:
    """CONFIG_X -> 'y' | 'm' from the running kernel's build config (the one
    :mod:`harness.net.backend` reads); None when unreadable."""
    text = _kernel_config()
    if text is None:
        return None
    return dict(line.split("=", 1) for line in text.splitlines() if line.startswith("CONFIG_") and "=" in line)


def installed_modules() -> set[str] | None:
    """Module names this kernel can load (modules.dep + modules.builtin); None when unknown."""
    base = Path("/lib/modules") / os.uname().release
    names: set[str] = set()
    found = False
    for index in ("modules.dep", "modules.builtin"):
        try:
            text = (base / index).read_text()
        except OSError:
            continue
        found = True
        for line in text.splitlines():
            path = line.split(":", 1)[0].strip()
            if ".ko" in path:
                names.add(Path(path).name.split(".ko")[0].replace("-", "_"))
    return names if found else None


def _shown_loaded(feature: Feature) -> bool:
    if any(os.path.isdir(f"/sys/module/{m}") for m in feature.modules):
        return True
    for path, word in feature.proc:
        try:
            if word is None and os.path.exists(path):
                return True
            if word is not None and word in Path(path).read_text().split():
                return True
        except OSError:
            continue
    return False


def feature_problem(feature: Feature, config: dict[str, str] | None, modules: set[str] | None,
                    hint: str = "") -> str | None:
    """One line if the kernel lacks ``feature``; None if present or nothing can tell."""
    if _shown_loaded(feature):
        return None
    if config is None:
        return None
    values = [config.get(c) for c in feature.configs]
    if "y" in values:
        return None
    if "m" in values:
        if modules is None or any(m in modules for m in feature.modules):
            return None
        release = os.uname().release
        return (f"missing kernel module {feature.modules[0]} ({feature.name}): "
                f"apt-get install linux-modules-extra-{release}{hint}")
    return f"missing kernel feature {feature.name}: {feature.configs[0]} is not set; boot a kernel built with it{hint}"


# ---- what the plan needs -----------------------------------------------------------------------

def needs_rules(backend: str, impaired: bool | None) -> bool:
    """Whether the run loads netfilter rules: on the fallback backend, where its links are impaired
    beyond their rates (``Profile.impaired``: harness/net/plan.py puts each impairment in an iptables
    rule); then it needs the iptables binaries and kernel side. ``impaired`` None (no run known,
    `harness doctor` alone): whatever a fallback run may need."""
    return backend == "fallback" and impaired is not False


def _free_bytes(folder: str | Path) -> tuple[Path, int]:
    path = Path(folder).resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path, shutil.disk_usage(path).free


# ---- the check ---------------------------------------------------------------------------------

def check(backend: str | None = None, *, impaired: bool | None = None, workers: int = 2,
          out_dir: str | Path = "results", root: bool | None = None) -> Report:
    """Everything an emulated run needs, as a :class:`Report`. ``backend``: as on the command
    line (None: decided as the run will); ``impaired``/``workers``: the run's, when known
    (``impaired``: its profile's ``Profile.impaired(workers)``; only what its plan needs is required);
    ``root``: already checked by the caller when True."""
    report = Report()
    is_root = os.geteuid() == 0 if root is None else root
    if is_root:
        report.ok.append("root")
    else:
        report.problems.append("not root: network namespaces need root; run as root (sudo), "
                               "or use `harness run --no-emulation` (localhost, unshaped)")
    config, modules = kernel_config(), installed_modules()
    found: list[str] = []

    def kernel(features, hint: str = "") -> list[str]:
        lines = []
        for f in features:
            line = feature_problem(f, config, modules, hint)
            lines += [line] if line else []
            found.extend([] if line else [f.name])
        report.problems.extend(lines)
        return lines

    base = kernel(BASE)
    decision = decide(backend, create=is_root and not base)   # the probe needs netns + root
    report.backend = decision
    if decision.name == "netem":
        kernel([NETEM], "" if backend is None else ", or use --backend fallback")
    rules = needs_rules(decision.name, impaired)
    if rules:
        kernel(RULES)
    known = "kernel config unreadable, features not checked" if config is None else \
        f"kernel {os.uname().release} has {', '.join(found) or 'none of them'}"
    words = BACKEND_WORDS.get(decision.name)
    report.ok.append(f"backend {decision.name} ({decision.source}{'; ' + words if words else ''}); {known}")
    if rules:
        missing = [b for b in IPTABLES_BINARIES if shutil.which(b) is None]
        report.problems += [f"missing {b}: apt-get install iptables" for b in missing]
        if not missing:
            report.ok.append(f"binaries: {', '.join(shutil.which(b) for b in IPTABLES_BINARIES)}")
    else:
        report.ok.append("binaries: none needed (every kernel change goes through netlink)")
    over = limits.problems(workers)
    report.problems += over
    if not over:
        report.ok.append(f"limits: open files, neighbour entries and tasks suffice for {workers} workers")
    why = cgroups.problem()   # only CPU shares need it: said, never a problem of a run without them
    report.ok.append("cgroups: a cpu controller for CPU shares (--worker-cpu, a profile's cpu keys)" if why is None
                     else f"cgroups: no CPU shares here, a run without them is unaffected ({why.split(': ', 1)[-1]})")
    where, free = _free_bytes(out_dir)
    if free < MIN_FREE_BYTES:
        report.problems.append(f"low disk space: {free / 2**30:.2f} GiB free under {where} "
                               f"(need {MIN_FREE_BYTES / 2**30:.1f} GiB): free some space or pass --out on another disk")
    else:
        report.ok.append(f"disk: {free / 2**30:.1f} GiB free under {where}")
    return report


def problems(backend: str | None = None, **kwargs) -> list[str]:
    """Just the missing pieces (what `harness run`/`calibrate` check first): [] when all is there."""
    return check(backend, **kwargs).problems
