"""`rp`: the command line of Rackplane's REST API (docs/api/rp.md). `main(argv)` returns the exit code; the
console script `rp` (pyproject.toml) exits with it."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import shtab

from rpcli import commands, spec
from rpcli.api import version
from rpcli.errors import EXIT_CODES_HELP, Exit, RpError

DESCRIPTION = """\
Rackplane from the command line: submit jobs, list and follow them, read their logs, cancel them and see
your departments' quotas, through the portal's REST API with your personal API token.

Start with `rp login --url https://your-portal` (make the token on the portal's API tokens page,
/account/tokens/). Every read command takes --json for scripts."""

EPILOG = f"""\
{EXIT_CODES_HELP}

files and environment:
  $XDG_CONFIG_HOME/rackplane/rp.json (or ~/.config/rackplane/rp.json): the portal's address and your token,
      mode 0600; rp refuses a file others can read or write.
  RP_URL and RP_TOKEN: both set, they replace the file (for CI jobs).
  SSL_CERT_FILE: a CA bundle for a portal whose certificate a private CA signed.

shell completion:
  bash: rp completion bash > ~/.local/share/bash-completion/completions/rp
  zsh:  rp completion zsh > ~/.zfunc/_rp   (with ~/.zfunc in $fpath before compinit)"""


def job_id(text: str) -> int:
    """A job's number: a positive integer the API's ids can hold."""
    if not text.isdigit() or not (0 < int(text) < 2**63):
        raise argparse.ArgumentTypeError(f"{text!r} is not a job number (e.g. 42)")
    return int(text)


def _positive(kind: type, low: float, high: float):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (low <= value <= high):
            raise argparse.ArgumentTypeError(f"{text} is out of range ({low:g} to {high:g})")
        return value

    parse.__name__ = kind.__name__
    return parse


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the API's JSON instead of a table")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rp",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rp {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, help: str, func) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".")
        p.set_defaults(func=func)
        return p

    p = command("login", "verify a personal API token and keep it with the portal's address", commands.login)
    p.add_argument("--url", help="the portal's address, e.g. https://rackplane.example.org (http or https)")
    p.add_argument(
        "--token-stdin", action="store_true", help="read the token from standard input instead of a prompt"
    )

    command(
        "logout", "forget the address and token (the token itself stays valid until revoked)", commands.logout
    )

    p = command(
        "submit", "submit a job: a batch script (Slurm) or a container image (Kubernetes)", commands.submit
    )
    p.add_argument(
        "script", nargs="?", help="the batch script file, or - for standard input"
    ).complete = shtab.FILE  # type: ignore[attr-defined]
    p.add_argument("--image", help="a container image to run instead of a script (Kubernetes)")
    p.add_argument(
        "--command",
        action="append",
        default=[],
        metavar="WORD",
        help="the entrypoint, one word each time (with --image)",
    )
    p.add_argument(
        "--arg", action="append", default=[], metavar="WORD", help="an argument, one each time (with --image)"
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable (with --image)",
    )
    size = p.add_mutually_exclusive_group(required=True)
    size.add_argument(
        "-g",
        "--gpus",
        type=_positive(int, 1, 10**6),
        help="whole GPUs: 1-4 on one tray, or a multiple of 4",
    )
    size.add_argument(
        "--mig-profile",
        metavar="PROFILE",
        help="MIG slices instead of whole GPUs: a profile a tray's MIG layout offers (e.g. 1g.23gb)",
    )
    size.add_argument(
        "--mig-memory-gb",
        type=_positive(int, 1, 10**4),
        metavar="GB",
        help="MIG slices instead of whole GPUs: the smallest offered profile with this much memory",
    )
    p.add_argument(
        "--mig-slices",
        type=_positive(int, 1, 28),
        metavar="N",
        help="how many MIG slices (with --mig-profile or --mig-memory-gb; default 1)",
    )
    p.add_argument("-d", "--department", help="the department's slug (default: your only department)")
    p.add_argument("-p", "--project", help="the project's slug, when the department has projects")
    p.add_argument("-n", "--name", help="the job's name (default: the script's or image's name)")
    p.add_argument(
        "--backend", choices=spec.BACKENDS, help="default: slurm for a script, kubernetes for an image"
    )
    p.add_argument(
        "--topology", choices=spec.TOPOLOGIES, help="partition (the default above one tray), rack or any"
    )
    p.add_argument(
        "--fallback-topology", choices=spec.TOPOLOGIES, help="a wider topology allowed after waiting"
    )
    p.add_argument(
        "--fallback-after",
        type=_positive(int, 1, 10080),
        metavar="MINUTES",
        help="minutes before the fallback",
    )
    p.add_argument(
        "--priority-class", choices=spec.PRIORITY_CLASSES, help="train (the default), build or inference"
    )
    p.add_argument("--time-limit", type=_positive(int, 1, 60 * 24 * 30), metavar="MINUTES", help="default 60")
    p.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="sent as Idempotency-Key (default: a new UUID): the same key again returns the first job",
    )
    _json_flag(p)

    p = command("ls", "list the jobs you may see (newest first)", commands.ls)
    p.add_argument(
        "-s", "--state", action="append", choices=spec.JOB_STATES, help="only these states (repeatable)"
    )
    p.add_argument("-d", "--department", help="only this department's (slug)")
    p.add_argument("-p", "--project", help="only this project's (slug)")
    p.add_argument("--name", help="only names containing this")
    p.add_argument("--backend", choices=spec.BACKENDS)
    p.add_argument(
        "--limit", type=_positive(int, 0, 10**7), default=50, help="at most this many (0: all; default 50)"
    )
    _json_flag(p)

    p = command("show", "show a job, with its events", commands.show)
    p.add_argument("job", type=job_id, help="the job's number")
    _json_flag(p)

    p = command(
        "watch",
        "follow a job's state until it ends (exit 0: completed, 1: failed or cancelled)",
        commands.watch,
    )
    p.add_argument("job", type=job_id, help="the job's number")
    p.add_argument(
        "--interval",
        type=_positive(float, 0.1, 3600),
        default=2.0,
        help="first poll interval in seconds (backs off to 15)",
    )
    p.add_argument(
        "--timeout", type=_positive(float, 0.1, 10**7), help="give up after this many seconds (exit 7)"
    )
    p.add_argument("--json", action="store_true", help="one JSON line per change of the job")

    p = command("logs", "print a job's output (the last 64 KiB of each stream)", commands.logs)
    p.add_argument("job", type=job_id, help="the job's number")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new output until the job ends")
    p.add_argument(
        "--json", action="store_true", help="the API's JSON; with -f one JSON line per new piece of output"
    )
    p.add_argument(
        "--interval", type=_positive(float, 0.1, 3600), default=2.0, help="seconds between reads with -f"
    )

    p = command("cancel", "cancel a pending or running job", commands.cancel)
    p.add_argument("job", type=job_id, help="the job's number")
    _json_flag(p)

    p = command(
        "quota", "your departments' GPU guarantees, limits and use, and their projects'", commands.quota
    )
    _json_flag(p)

    p = command("completion", "print the bash or zsh completion script", completion)
    p.add_argument("shell", choices=("bash", "zsh"))
    return parser


def completion(args: argparse.Namespace) -> int:
    sys.stdout.write(shtab.complete(build_parser(), shell=args.shell))
    return Exit.OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help, --version, or a usage error argparse has printed
        return stop.code if isinstance(stop.code, int) else Exit.USAGE
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return Exit.USAGE
    try:
        return int(args.func(args))
    except RpError as error:
        print(f"rp: {error.message}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        print("\nrp: interrupted", file=sys.stderr)
        return Exit.INTERRUPTED
    except BrokenPipeError:
        # `rp ls | head`: the reader left; say nothing more (Python's own advice for SIGPIPE).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return Exit.OK
    except OSError as error:  # the config folder not writable, a full disk
        print(
            f"rp: {error.strerror or error}" + (f": {error.filename}" if error.filename else ""),
            file=sys.stderr,
        )
        return Exit.USAGE


if __name__ == "__main__":
    sys.exit(main())
