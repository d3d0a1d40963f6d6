"""The one way a job reads its command line: argparse, with OmegaConf ``key=value`` overrides.

Every job that takes sweep overrides (``sweep.name=X sweep.output_dir=DIR``) beside its own flags
builds its parser with :func:`job_parser` and reads it with :func:`parse`:

- the overrides are one positional list (``overrides``), read with ``parse_intermixed_args`` so
  flags and overrides mix in any order (``--out DIR sweep.name=X --summary``);
- a usage error is a :class:`UsageError` in the jobs' own words (``unknown option --x (known:
  ...)``, ``--out needs a value``), which the job prints as one line with its prefix
  (:func:`usage_error`: ``error: ...`` on stderr) and exits :attr:`ExitCode.USAGE` (2), as the jobs
  did before argparse;
- ``-h``/``--help`` anywhere prints the job's own text (its module docstring) and exits 0.

A job whose code reads its options by flag (``opts["--out"]``) gives each ``dest="--out"``:
``vars(args)`` is then that dict.

Flags are never abbreviated (``--sum`` is not ``--summary``), and ``--`` is not a separator: the
jobs never treated it as one.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from opteval.exit_codes import ExitCode

HELP = ("-h", "--help")
UNKNOWN = "unknown option {arg} (known: {known})"


class UsageError(ValueError):
    """A bad command line or option value: one line, exit 2."""


class JobParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose help is the job's text and whose errors are :class:`UsageError`."""

    def __init__(self, prog: str, help_text: str | Callable[[], str], unknown: str | None = UNKNOWN,
                 overrides: bool = True) -> None:
        super().__init__(prog=prog, add_help=False, allow_abbrev=False, exit_on_error=False)
        self.help_text = help_text
        self.unknown = unknown
        self.add_argument(*HELP, action="help", help="this text")
        if overrides:
            self.add_argument("overrides", nargs="*", metavar="key=value",
                              help="OmegaConf dotlist overrides (sweep.name=X ...)")

    def format_help(self) -> str:
        text = self.help_text() if callable(self.help_text) else self.help_text
        return text.strip() + "\n"

    def known(self) -> str:
        """The job's options, in the order they were added (``--help`` aside)."""
        return ", ".join(s for a in self._actions for s in a.option_strings if s.startswith("--") and s not in HELP)

    def unknown_option(self, arg: str) -> UsageError:
        return UsageError((self.unknown or UNKNOWN).format(arg=arg, known=self.known()))

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def job_parser(command: str, help_text: str | Callable[[], str], unknown: str | None = UNKNOWN,
               overrides: bool = True) -> JobParser:
    """The parser of ``opteval <command>``: add the job's flags to it, then :func:`parse`.
    ``unknown``: the line for an unknown option (``{arg}``, ``{known}``), or None for a job whose
    overrides take every word it does not know, in the order given (sweep, serve: load_config
    names a stray ``--x`` in its own line; such a parser has no option that takes a value);
    ``overrides``: whether it takes the ``key=value`` list (``args.overrides``)."""
    return JobParser(f"opteval {command}", help_text, unknown, overrides)


def parse(parser: JobParser, argv: Sequence[str]) -> argparse.Namespace | None:
    """``argv`` read by ``parser``; None when ``-h``/``--help`` was given (its text is printed, the
    job exits 0). A :class:`UsageError` for a bad line."""
    argv = list(argv)
    if help_asked(parser, argv):
        return None
    passes = parser.unknown is None  # (such a job has no option that takes a value: see job_parser)
    for arg in argv:
        if (arg == "--" or arg.startswith("---")) and not passes:
            raise parser.unknown_option(arg)
    try:
        args, extras = parser.parse_known_intermixed_args([a for a in argv if a != "--"] if passes else argv)
    except argparse.ArgumentError as exc:
        raise _in_our_words(parser, exc) from None
    if passes:  # every word the job does not know goes on to the overrides, in the order given
        words = set(args.overrides) | set(extras) | {"--"}
        args.overrides = [a for a in argv if a in words]
        return args
    for arg in extras:
        if arg.startswith("--"):
            raise parser.unknown_option(arg)
    if extras:  # a single-dash word (-x): the jobs passed it on with the overrides; load_config names it
        if not hasattr(args, "overrides"):
            raise UsageError(f"unexpected argument {extras[0]!r}")
        args.overrides = args.overrides + extras
    return args


def help_asked(parser: JobParser, argv: Sequence[str]) -> bool:
    """Whether ``-h``/``--help`` is anywhere in ``argv`` (even after a bad option, or as an option's
    value: the jobs answered it before reading anything else); its text is then printed."""
    if set(HELP) & set(argv):
        parser.print_help()
        return True
    return False


def _in_our_words(parser: JobParser, exc: argparse.ArgumentError) -> UsageError:
    """argparse's messages as the jobs worded them before argparse read their lines."""
    name = exc.argument_name or ""
    message = exc.message
    if message.startswith("expected one argument"):
        return UsageError(f"{name} needs a value")
    if message.startswith("ignored explicit argument"):
        value = message.split("'", 1)[1].rsplit("'", 1)[0] if "'" in message else ""
        return parser.unknown_option(f"{name}={value}")
    return UsageError(f"{name}: {message}" if name else message)


def usage_error(exc: BaseException, prefix: str = "error: ") -> int:
    """Print ``exc`` as the jobs do (one line on stderr after ``prefix``); the exit code, 2."""
    print(f"{prefix}{exc}", file=sys.stderr)
    return ExitCode.USAGE

