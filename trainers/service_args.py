"""A service's command line, parsed in one place for every service: its plumbing flags (spec.SERVICE_PARAMS,
each service names the ones it takes), the run's service parameters (spec.PARAMS) and the run token
($RUN_TOKEN). Every value goes through the spec's parser, so a bad flag is one line naming it and exit 2,
as on the harness's command line, before the service builds or writes anything."""
from __future__ import annotations

import argparse
import sys
from typing import NoReturn, Sequence

from trainers import spec
from trainers.process import parse_addr, run_token

ADDRESSES = ("listen", "learner")   # HOST:PORT values: parsed into (host, port)


class ServiceParser(argparse.ArgumentParser):
    """argparse for splitting argv into flags and for --help; its errors are one line (argparse's own print
    a usage of every run flag first: dozens of lines above the one that says what is wrong)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {' '.join(message.split())}", file=sys.stderr)
        raise SystemExit(2)


def parse(module: str, doc: str | None, flags: Sequence[str], argv: Sequence[str] | None,
          run: str | None = None) -> tuple[ServiceParser, argparse.Namespace]:
    """`python -m module`'s argv -> (the parser, whose `error` is the one-line usage error for the checks only
    the service can make; the values). `flags`: the SERVICE_PARAMS it takes, parsed (addresses as (host,
    port)). `run`: "given" (learner, aggregator: every service parameter, the spec's default where absent;
    `values.params` a RunParams) or "expected" (a worker: each optional, a check against the learner's
    WELCOME; `values.expect` name -> value or None). `values.token`: the run token."""
    parser = ServiceParser(prog=f"python -m {module}", description=(doc or "").split("\n")[0])
    chosen = [spec.service_param(name) for name in flags]
    for p in chosen:
        required = p.default is None and not p.optional
        shown = " (required)" if required else "" if p.default is None else f" [default: {p.default}]"
        parser.add_argument(p.flag, dest=p.name, metavar=_metavar(p), help=(p.help_text() + shown).replace("%", "%%"))
    if run is not None:
        spec.add_run_args(parser, required=run == "given")
    values = parser.parse_args(argv)
    try:
        for p in chosen:
            raw = getattr(values, p.name)
            value = p.parse(raw if raw is not None else p.default)
            setattr(values, p.name, _address(p, value) if p.name in ADDRESSES else value)
        if run == "given":
            values.params = spec.run_params_from_args(values)
        elif run == "expected":
            values.expect = spec.parse_expected(values)
        values.token = run_token()
    except ValueError as err:   # SpecError and the address and token errors: each one line already
        parser.error(str(err))
    return parser, values


def _metavar(p: spec.Param) -> str:
    return "HOST:PORT" if p.name in ADDRESSES else {"int": "INT", "float": "FLOAT"}.get(p.type.__name__, "TEXT")


def _address(p: spec.Param, text: str | None) -> tuple[str, int] | None:
    try:
        return None if text is None else parse_addr(text)
    except ValueError as err:
        raise spec.SpecError(f"{p.flag}: {err}") from None
