"""Which shaping backend a run gets: the one place that decides (CLI, config, dry runs, emulate).

``netem`` where the kernel has sch_netem, else ``fallback`` (HTB + iptables + a userspace delay
line; :mod:`harness.net.plan`). :func:`decide` takes a requested name (validated), else reads the
kernel config, else, only when it may create things, tries a netem qdisc in a scratch namespace.
A dry run passes ``create=False``: nothing is created, and an unreadable config gives
``fallback`` marked as assumed. pyroute2 is imported only by the probe.
"""
from __future__ import annotations

import gzip
import os
from dataclasses import dataclass

BACKENDS = ("netem", "fallback")


@dataclass(frozen=True)
class Decision:
    name: str     # "netem" | "fallback"
    source: str   # "requested" | "kernel config" | "probe" | "assumed" (config unreadable, nothing probed)

    @property
    def assumed(self) -> bool:
        return self.source == "assumed"


def validate(name: str | None, flag: str = "backend") -> str | None:
    """``name`` if it is a backend (None: decide later); else ValueError, one line naming the valid ones."""
    if name is not None and name not in BACKENDS:
        raise ValueError(f"{flag}: {name!r} is unknown (valid: {', '.join(BACKENDS)})")
    return name


def decide(requested: str | None = None, *, create: bool = True) -> Decision:
    """The backend: ``requested`` if given, else the kernel config's answer, else (``create``
    only) a probe in a scratch namespace, else ``fallback``, assumed."""
    if validate(requested) is not None:
        return Decision(requested, "requested")
    known = netem_from_config()
    if known is not None:
        return Decision("netem" if known else "fallback", "kernel config")
    if create:
        return Decision(probe_by_trying(), "probe")
    return Decision("fallback", "assumed")


def _kernel_config() -> str | None:
    """The running kernel's build config (``/proc/config.gz``, else ``/boot/config-<release>``)."""
    for path, opener in (("/proc/config.gz", gzip.open), (f"/boot/config-{os.uname().release}", open)):
        try:
            with opener(path, "rt") as fh:
                return fh.read()
        except OSError:
            continue
    return None


def netem_from_config() -> bool | None:
    """What the kernel says without touching anything: a loaded sch_netem module, or the
    build config; None when neither can be read or netem is a module that may not load."""
    if os.path.isdir("/sys/module/sch_netem"):
        return True
    config = _kernel_config()
    if config is None:
        return None
    if "CONFIG_NET_SCH_NETEM=y" in config:
        return True
    if "CONFIG_NET_SCH_NETEM=m" in config:
        return None      # a module that may or may not load: try it
    return False


def probe_by_trying() -> str:
    """Add a netem qdisc to ``lo`` of a scratch namespace (``wh<id>-probe``, removed again):
    accepted -> 'netem', refused -> 'fallback'."""
    from pyroute2 import IPRoute, netns
    from pyroute2.netlink.exceptions import NetlinkError

    from harness.net import topology  # here, not at the top: plan imports this module and stays pyroute2-free

    scratch = topology.ns_name(topology.new_run_id(), "probe")
    netns.create(scratch)
    try:
        with IPRoute(netns=scratch, flags=0) as ipr:
            lo = ipr.link_lookup(ifname="lo")[0]
            ipr.link("set", index=lo, state="up")
            ipr.tc("add", "netem", lo, 0x10000, delay=1000)
        return "netem"
    except NetlinkError:
        return "fallback"
    finally:
        netns.remove(scratch)
