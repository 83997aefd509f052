"""The `zerotune` command: registers one thin module per subcommand and owns the error boundary.

Exit codes (zerotune.errors.ExitCode): 0 ok, 1 findings / failed run, 2 usage or input error.
A ZerotuneError prints one line and its hint, never a traceback unless --verbose.
"""

from __future__ import annotations

import sys

import typer

from zerotune.cli import bench, calibrate, diagnose, memory, predict, probe, recommend, rule, validate
from zerotune.errors import ExitCode, ZerotuneError
from zerotune.render import help as help_view

COMMANDS = (memory, validate, rule, probe, calibrate, bench, predict, recommend, diagnose)
"""One module per subcommand (NAME, HELP, command), in `--help` order."""


def _print_version(value: bool) -> None:
    if value:
        from zerotune import __version__

        sys.stdout.write(f"zerotune {__version__}\n")
        raise typer.Exit()


def _root(
    verbose: bool = typer.Option(False, "--verbose", help="Show tracebacks for errors."),
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", is_eager=True, callback=_print_version
    ),
) -> None:
    """zerotune: memory, step-time and config checks for DeepSpeed ZeRO."""


def _app(*modules) -> typer.Typer:
    out = typer.Typer(
        name="zerotune",
        help="Tune and validate DeepSpeed ZeRO configurations before launch.",
        no_args_is_help=True,
        add_completion=True,
        rich_markup_mode="rich",
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    out.callback()(_root)
    for module in modules:
        out.command(module.NAME, help=module.HELP)(module.command)
    return out


app = _app(*COMMANDS)
_BY_NAME = {module.NAME: module for module in COMMANDS}


def _report(message: str, hint: str | None = None) -> None:
    sys.stderr.write(f"error: {message}\n")
    if hint:
        sys.stderr.write(f"  hint: {hint}\n")


def _wants_json(args: list[str]) -> bool:
    fmt = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--format"]
    return "--json" in args or "--format=json" in args or fmt[-1:] == ["json"]


def main(argv: list[str] | None = None) -> None:
    """Console entry point. Never returns: exits with an ExitCode.

    Commands return nothing on success and raise typer.Exit(code) for findings; typer itself
    exits 2 on usage errors. Everything else that escapes a command is handled here.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in args
    try:
        # typer turns every registered command into a click command (the signature and type hints of
        # each) before it parses; a run that names its command first needs only that one (~0.1 G
        # instructions of `zerotune recommend` for the other eight)
        named = _BY_NAME.get(args[0]) if args else None
        command = typer.main.get_command(_app(named) if named else app)
        help_view.plain_flags(command)
        if "-h" in args or "--help" in args or len(args) <= 1:
            help_view.readable_help()
        command(args=args, prog_name="zerotune")
        code = ExitCode.OK
    except SystemExit as exc:  # typer's normal way out (also usage errors, exit 2)
        code = exc.code if isinstance(exc.code, int) else (ExitCode.OK if exc.code is None else ExitCode.USAGE)
        if code == 130:  # typer turns Ctrl-C into a silent exit 130
            _report("interrupted")
    except ZerotuneError as exc:
        if verbose:
            raise
        _report(exc.message, exc.hint)
        if _wants_json(args):  # a pipe reading --json gets an object on every path
            import json

            sys.stdout.write(json.dumps(exc.to_json(), indent=2) + "\n")
        code = exc.exit_code
    except KeyboardInterrupt:
        _report("interrupted")
        code = 130
    except BrokenPipeError:
        code = ExitCode.OK
    except Exception as exc:  # an internal error: short by default, full with --verbose
        if verbose:
            raise
        _report(f"internal error: {type(exc).__name__}: {exc}", "run again with --verbose for the traceback")
        code = ExitCode.USAGE
    sys.exit(int(code))
