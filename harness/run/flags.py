"""The run spec as typer options: one option per `trainers/spec.py` parameter, so `harness run` and
`harness sweep` (and any command built with `spec_command`) take every flag from the one table."""
from __future__ import annotations

import importlib
import inspect
from typing import Callable

import typer
from rich.markup import escape

from trainers import spec


def usage_error(err: Exception) -> typer.Exit:
    """A usage error as the command line reports it: one line on stderr, exit 2."""
    typer.echo(f"error: {err}", err=True)
    return typer.Exit(2)


_PANELS = {"compressor": "Compressor options", "service": "Training", "link": "Network", "harness": "Training",
           "compute": "Compute per update"}   # compute: harness project's (harness/projection/params.py)


def _help(text: str) -> str:
    """Help text as rich shows it: a '[unit: bit/s]' would otherwise be read as a style tag and vanish."""
    return escape(text)


def _shown_default(p, as_list: bool) -> str | bool:
    """The spec default as the help shows it ('[default: 2]'). Every flag itself defaults to None
    (= not given), so that a --preset can stand in for it; the spec's default applies in config.build."""
    if as_list or p.default is None:
        return False
    return ",".join(map(str, p.default)) if p.many else str(p.default).lower() if p.type is bool else str(p.default)


def _spec_option(p, as_list: bool, hidden: bool = False) -> tuple[type, typer.models.OptionInfo]:
    """A run-spec parameter as a typer option. Values are parsed by the spec (one message style
    for every flag), so every option is text; a boolean is a --x switch, and its --no-x a hidden
    option of its own (_negations): as a second column of the help it took 25 of 80 columns.
    `hidden`: parsed but left out of the help (a flag the command refuses in its own words)."""
    panel = _PANELS[p.group or p.where]
    shown = _shown_default(p, as_list)
    default = f" [default: {shown}]" if shown is not False else ""   # typer would put it in parentheses
    if p.type is bool:
        off = "" if f"--no-{p.flag[2:]}" in p.help else f" (--no-{p.flag[2:]}: off)"
        return bool | None, typer.Option(None, p.flag, rich_help_panel=panel, hidden=hidden,
                                         help=_help(p.help_text() + off + default))
    metavar = "LIST" if p.many or as_list else {"int": "INT", "float": "FLOAT"}.get(p.type.__name__, "TEXT")
    grid = " (a comma list is a grid axis)" if as_list and not p.many else ""
    return str | None, typer.Option(None, p.flag, help=_help(p.help_text() + grid + default), metavar=metavar,
                                    rich_help_panel=panel, hidden=hidden)


def _negations(params) -> list[inspect.Parameter]:
    """A hidden --no-x for each boolean --x of the spec (parameter name no_<name>)."""
    return [inspect.Parameter(f"no_{p.name}", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                              default=typer.Option(False, f"--no-{p.flag[2:]}", hidden=True))
            for p in params if p.type is bool]


def _switches(values: dict, negations: dict) -> dict:
    """--x and --no-x into one value per boolean (None: neither given); both given is an error."""
    for key, off in negations.items():
        name = key[len("no_"):]
        if off and values[name]:
            raise usage_error(ValueError(f"--{name.replace('_', '-')} and --no-{name.replace('_', '-')}: "
                                          "give one of them"))
        if off:
            values[name] = False
    return values


def spec_command(name: str, body: str | Callable[..., int | None], extra: list[inspect.Parameter], doc: str,
                 target: typer.Typer, as_list: bool = False, where: str | None = None,
                 hidden: tuple[str, ...] = (), table: list | None = None) -> None:
    """Register `name` with one option per run-spec parameter (trainers/spec.py) plus `extra`;
    `body(values, **extra)` gets the spec values keyed by parameter name and returns the exit code;
    `body` may be "module:function", imported only when the command runs (the command list stays fast).
    `hidden`: spec names whose flags the help leaves out; still parsed, so `body` refuses them in one line
    (typer's own "No such option" is a framed box). `table`: spec Params of the command's own
    instead of the run spec's (harness project: harness/projection/params.py)."""
    chosen = table if table is not None else spec.params(where)   # where="link": only the network's (harness wrap)
    names = [p.name for p in chosen]
    params = [inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=ann)
              for p in chosen for ann, opt in [_spec_option(p, as_list, p.name in hidden)]]
    negations = _negations(chosen)

    def command(**kwargs):
        values = _switches({k: kwargs.pop(k) for k in names}, {n.name: kwargs.pop(n.name) for n in negations})
        run = body if callable(body) else getattr(importlib.import_module(body.partition(":")[0]), body.partition(":")[2])
        raise typer.Exit(run(values, **kwargs) or 0)

    command.__signature__ = inspect.Signature(params + negations + extra)
    command.__doc__ = doc
    command.__name__ = name
    target.command(name)(command)


def extra(name: str, default, flags: tuple[str, ...], help: str, annotation=str | None) -> inspect.Parameter:
    """A command's own option beside the spec's; its help escaped as theirs ('needs the [tracking] extra')."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                             default=typer.Option(default, *flags, help=_help(help)))
