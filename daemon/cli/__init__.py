"""The ``raswarden`` command line: one module per command group, each adding its commands with ``register``.

May import: every wing of the daemon (it stands on all of them), and ``lab`` inside the commands that run the
simulator, the closed loop or training; nothing imports it but ``daemon.__main__``.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys

from daemon import __version__
from daemon.cli import advise, alerts, operate, repair, scoring, simulation, traces
from daemon.cli.common import CommandError

COMMAND_GROUPS = (traces, scoring, simulation, operate, alerts, repair, advise)
"""The modules whose commands ``raswarden`` has, in the order ``--help`` lists them."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raswarden",
        description="Fault-recovery daemon for AI supernode clusters: flags sub-healthy accelerators, "
                    "blades and links from RAS, link and thermal telemetry.",
    )
    parser.add_argument("--version", action="version", version=f"raswarden {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in COMMAND_GROUPS:
        group.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING if args.verbose == 0 else (logging.INFO if args.verbose == 1 else logging.DEBUG)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if args.verbose == 0:
        logging.getLogger("raswarden.input").setLevel(logging.ERROR)
    try:  # `kill -QUIT`: every thread's stack on stderr (the journal), and the process goes on (a stop that hangs)
        sys.stderr.fileno()
        signal.signal(signal.SIGQUIT, _dump_stacks)
    except (OSError, ValueError, AttributeError):  # stderr with no file descriptor (a caller's capture), not main
        pass
    from daemon.alerting.secrets import SecretError, install_log_redaction
    from daemon.config import ConfigError
    from daemon.store import StoreError

    install_log_redaction()
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
        return code
    except (ConfigError, SecretError, CommandError, StoreError) as exc:
        print(f"raswarden: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (`raswarden incidents | head`): stop quietly, as a Unix tool killed by SIGPIPE
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except OSError as exc:
        if exc.filename is None:  # not a file the operator named or can fix: the traceback says more
            raise
        print(f"raswarden: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return 2


def _dump_stacks(_signum, _frame) -> None:
    """SIGQUIT: every thread's stack, faulthandler's format, from Python's handler in the main thread. Holding the
    interpreter lock there, no other thread's frames change under the dump; ``faulthandler.register`` dumps from the
    C handler in whichever thread the signal lands on, reading frames other threads are changing, and crashed the
    process now and then (SIGSEGV in a clean-clone run). The main threads of the daemon and of the --follow commands
    wake at least twice a second, so the dump comes within half a second."""
    try:
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    except (OSError, ValueError, RuntimeError):
        pass
