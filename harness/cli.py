"""The `harness` command line: one entry point, one subcommand per user task."""
from __future__ import annotations

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Benchmark communication-efficient LoRA training over an emulated WAN.")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
