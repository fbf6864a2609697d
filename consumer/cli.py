"""The container entrypoint and operator commands: ``python -m consumer <command>``.

Exit codes: 0 done; 1 ``redrive`` left a message in the dead-letter queue (it names it); 2 a setting, a
missing or wrong resource, or refused input (the message names the variable, flag or resource to fix); 3 a
replay that was not confirmed; 4 a failure that may pass: an AWS endpoint that cannot be reached, or a call
throttled past the command's retries (try again later); 130 Ctrl-C before the command
finished (``interrupted``); 141 output piped into a reader that stopped early. Errors are one line on stderr
(``error: ...``), never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn, cast

from consumer._version import __version__
from consumer.admin.commands import add_admin_commands, table_settings
from consumer.admin.redrive_command import add_redrive_command
from consumer.config import default_text, worker_config_from_env
from consumer.env_vars import ENV_VARS, PROCESSOR_ENV_VARS, EnvVar
from consumer.errors import (
    EXIT_INVALID,
    EXIT_UNREACHABLE,
    ConfigError,
    ConsumerError,
    MissingResourceError,
    ProcessorLoadError,
    RefusedError,
    ThrottledError,
    TransientError,
)
from consumer.health import add_health_command, attach_heartbeat
from consumer.kcl.command import add_import_kcl_command
from consumer.loader import load_processor
from consumer.logs import configure_logging, log_event
from consumer.multilang.daemon import add_multilang_command

if TYPE_CHECKING:
    from consumer.config import WorkerConfig

# The commands import boto3 and the worker when they run, not here: ``health`` (a container's health check,
# every few seconds), ``--help`` and a refused setting then start in a fraction of the time.

__all__ = ["EXIT_BROKEN_PIPE", "EXIT_INTERRUPTED", "OneLineParser", "main", "parser"]

logger = logging.getLogger("consumer.cli")

#: Ctrl-C (SIGINT) before the command handled it, as a shell reports a command SIGINT ended (128 + 2).
EXIT_INTERRUPTED = 130
#: Standard output was a pipe whose reader stopped early (``status | head -1``), as a shell reports a command
#: SIGPIPE ended (128 + 13).
EXIT_BROKEN_PIPE = 141

_FLAG_ENV = {
    "application": "CONSUMER_APPLICATION",
    "streams": "CONSUMER_STREAMS",
    "processor": "CONSUMER_PROCESSOR",
    "lease_table": "CONSUMER_LEASE_TABLE",
    "checkpoint_table": "CONSUMER_CHECKPOINT_TABLE",
    "dlq_url": "CONSUMER_DLQ_URL",
    "on_failure": "CONSUMER_ON_FAILURE",
    "worker_id": "CONSUMER_WORKER_ID",
}
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_LOG_ALIASES = {"WARN": "WARNING", "FATAL": "CRITICAL"}  # as the logging module itself accepts them


def _log_level() -> str | None:
    """``CONSUMER_LOG_LEVEL`` as a level name (default INFO; WARN and FATAL as aliases), None when invalid."""
    level = os.environ.get("CONSUMER_LOG_LEVEL", "INFO").strip().upper() or "INFO"
    level = _LOG_ALIASES.get(level, level)
    return level if level in _LOG_LEVELS else None


def _flag_named(exc: ConsumerError, given: dict[str, str]) -> ConsumerError:
    """``exc`` naming the flag as well when it names a variable the operator set with a flag
    (``--processor (CONSUMER_PROCESSOR): ...``); ``exc`` itself otherwise."""
    text = str(exc)
    for key, flag in given.items():
        if isinstance(exc, ConfigError) and exc.field == key:
            return ConfigError(f"{flag} ({key})", text[len(key) + 2 :])
        if isinstance(exc, ProcessorLoadError | MissingResourceError | RefusedError) and text.startswith(
            (f"{key}: ", f"{key} (")
        ):
            return type(exc)(f"{flag} ({key}){text[len(key) :]}")
    return exc


def _config(args: argparse.Namespace) -> tuple[WorkerConfig, dict[str, str], dict[str, str]]:
    env = dict(os.environ)
    given = {}
    for flag, key in _FLAG_ENV.items():
        value = getattr(args, flag, None)
        if value is None:
            continue
        name = f"--{flag.replace('_', '-')}"
        if not value.strip():  # given, and empty: not silently the variable's value
            raise ConfigError(name, "must not be empty")
        env[key] = value
        given[key] = name
    try:
        return worker_config_from_env(env, load_processor), env, given
    except ConsumerError as exc:
        if (named := _flag_named(exc, given)) is not exc:  # the operator set it with a flag: name it too
            raise named from exc
        raise


class _StoppedBeforeStart(BaseException):
    """SIGTERM while ``run`` starts up, before the worker handles its signals (nothing registered yet)."""


def _stop_before_start(signum: int, frame: object) -> None:
    raise _StoppedBeforeStart


def _run(args: argparse.Namespace) -> int:
    """``run``. A SIGTERM during its start-up (what ECS sends a task it stops while it starts) stops it
    cleanly, exit 0 and one log line, as it does later: until the worker installs its own handlers (and again
    after it restores this one), SIGTERM ends the start-up here instead of killing the process (exit 143)."""
    previous = signal.signal(signal.SIGTERM, _stop_before_start)
    try:
        return _start_and_run(args)
    except _StoppedBeforeStart:
        log_event(
            logger,
            "stopped_before_start",
            logging.WARNING,
            why="SIGTERM during start-up, before the worker registered: nothing to hand over",
        )
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def _start_and_run(args: argparse.Namespace) -> int:
    config, env, given = _config(args)
    from consumer.embed import create_worker

    try:
        worker = create_worker(config, env=env)
    except ConsumerError as exc:  # a start-up check naming a variable a flag set
        if (named := _flag_named(exc, given)) is not exc:
            raise named from exc
        raise
    attach_heartbeat(worker, config.health)  # the liveness file `health` checks (CONSUMER_HEALTH_FILE)
    worker.run(handle_signals=True)
    return 0


def _create_tables(args: argparse.Namespace) -> int:
    names = table_settings(args)  # each given, not empty, not the same table
    from consumer.aws import command_client
    from consumer.aws_errors import aws_call
    from consumer.dynamo import create_tables, existing_tables
    from consumer.preflight import check_credentials, check_table_schema

    check_credentials()
    ddb = command_client("dynamodb")
    settings = {args.lease_table: names["lease_table"], args.checkpoint_table: names["checkpoint_table"]}
    with aws_call("dynamodb", "describe tables"):
        existing = existing_tables(ddb, (args.lease_table, args.checkpoint_table))
    for table, setting in settings.items():
        if table in existing:  # refuse to report a wrongly keyed table as ready
            check_table_schema(ddb, table, setting)
    with aws_call("dynamodb", "create tables"):
        create_tables(ddb, args.lease_table, args.checkpoint_table, existing)
    for table, setting in settings.items():
        check_table_schema(ddb, table, setting)
    print(f"tables ready: {args.lease_table}, {args.checkpoint_table}")
    return 0


def _env_row(var: EnvVar) -> str:
    default = default_text(var)
    return f"  {var.name:<42} {default or '-':<22} {var.help}"


def _run_epilog() -> str:
    lines = ["environment variables (flags above override the first few):", ""]
    lines += [f"  {'variable':<42} {'default':<22} meaning", *(_env_row(v) for v in ENV_VARS)]
    lines += ["", "read by the shipped processors:", *(_env_row(v) for v in PROCESSOR_ENV_VARS)]
    lines += [
        "",
        "AWS: AWS_REGION, credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE or a role),",
        "AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_<SERVICE> for local emulators.",
        "exit codes: 0 stopped cleanly; 2 invalid setting or missing resource; 4 AWS unreachable;",
        "130 interrupted (Ctrl-C) during the start-up checks.",
    ]
    return "\n".join(lines)


class OneLineParser(argparse.ArgumentParser):
    """argparse with its errors in the CLI's own form: one line on stderr and exit 2, not the usage block
    (its subcommands' parsers are of this class too; the benchmarks' and tools' command lines use it)."""

    def error(self, message: str) -> NoReturn:
        """Print ``message`` as one line, ``error: <prog>: <message> (see <prog> --help)``, and exit 2."""
        print(f"error: {self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(EXIT_INVALID)


def parser() -> argparse.ArgumentParser:
    """The command line: ``run``, ``create-tables`` and the operator commands (``status``, ``drain`` ...)."""
    p = OneLineParser(
        prog="python -m consumer", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--version", action="version", version=f"%(prog)s (kinesis-fleet-consumer) {__version__}")
    # Typed as plain argparse's: the commands' modules register on it (its parsers are ``OneLineParser``s).
    sub = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        p.add_subparsers(dest="command", required=True, metavar="COMMAND"),
    )
    run = sub.add_parser(
        "run",
        help="run a worker (settings from CONSUMER_* variables; flags override)",
        description="Run one worker of the fleet until SIGTERM/SIGINT. Every setting is checked first "
        "(tables, streams, queue, bucket, processor); a problem stops it with one line naming the variable.",
        epilog=_run_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    by_name = {v.name: v for v in ENV_VARS}
    for flag, key in _FLAG_ENV.items():
        run.add_argument(
            f"--{flag.replace('_', '-')}", dest=flag, help=f"{by_name[key].help} (overrides {key})"
        )
    run.set_defaults(func=_run)
    ct = sub.add_parser(
        "create-tables",
        help="create the lease and checkpoint tables (local use); checks the key schema of existing ones",
        description="Creates missing tables (on demand, hash key lease_key of type S) and checks that "
        "existing ones have that key schema.",
    )
    ct.add_argument("--lease-table", help="default: $CONSUMER_LEASE_TABLE")
    ct.add_argument("--checkpoint-table", help="default: $CONSUMER_CHECKPOINT_TABLE")
    ct.set_defaults(func=_create_tables)
    add_admin_commands(sub)
    add_redrive_command(sub)
    add_health_command(sub)
    add_multilang_command(sub)
    add_import_kcl_command(sub)
    return p


def _fail(exc: ConsumerError) -> int:
    """The one line and the exit code of ``exc``: 4 for a failure that may pass (an endpoint that cannot be
    reached, or throttled past the command's retries: try again later), 2 for the rest."""
    message = str(exc)
    if isinstance(exc, ThrottledError):
        message += (
            "; still throttled after the command's retries (about 30 s): try again later, or raise the "
            "capacity of the table or stream named"
        )
    log_event(logger, "fatal", logging.ERROR, error=message, error_type=type(exc).__name__)
    print(f"error: {message}", file=sys.stderr)
    return EXIT_UNREACHABLE if isinstance(exc, TransientError) else EXIT_INVALID


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """``argv`` parsed; arguments nobody recognizes are refused by the command's own parser, so that the
    error names the command (``python -m consumer status: unrecognized arguments: ...``)."""
    top = parser()
    args, extra = top.parse_known_args(argv)
    if extra:
        commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
        own = commands.choices.get(getattr(args, "command", None) or "", top)
        own.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _stdout_gone() -> bool:
    """Whether standard output is a pipe (or socket) whose reader has gone (``status | head -1``): polled,
    so that a ``BrokenPipeError`` of some other pipe is not taken for it."""
    import select

    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll, or stdout is no file: it cannot be told
        return True


def _quiet_stdout() -> None:
    """Point standard output at the null device: the interpreter's last flush at exit then writes what is
    left of its buffer there, instead of reporting a second ``BrokenPipeError``."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (errors are one line on stderr, never a traceback).

    Ctrl-C (SIGINT) before a command has its own handling (``run``'s start-up checks, any operator command)
    prints ``interrupted`` and returns 130; output piped into a reader that stopped early (``status | head
    -1``) ends quietly with 141, as a shell reports a command that SIGPIPE ended."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        if not _stdout_gone():
            raise
        _quiet_stdout()
        return EXIT_BROKEN_PIPE


def _main(argv: Sequence[str] | None) -> int:
    args = _parse(argv)  # --help and --version first: no setting can stand in their way
    level = _log_level()
    if level is None:
        if args.command != "health":  # a health check logs nothing: the worker itself refuses the level
            raw = os.environ.get("CONSUMER_LOG_LEVEL", "")
            print(
                f"error: CONSUMER_LOG_LEVEL: must be one of {', '.join(_LOG_LEVELS)} (or WARN, FATAL); "
                f"got {raw.strip()!r}",
                file=sys.stderr,
            )
            return EXIT_INVALID
        level = "INFO"
    configure_logging(level)
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # here, not at exit: a reader that went away is told apart (BrokenPipeError)
        return code
    except ConsumerError as exc:
        return _fail(exc)
    except _provider_failures() as exc:  # one no command named: said in the same words
        from consumer.aws_errors import classify

        return _fail(classify(exc))


def _provider_failures() -> tuple[type[Exception], ...]:
    """botocore's and urllib3's errors; imported when an error reaches ``main`` (a command that met one has
    imported them already)."""
    from consumer.aws_errors import PROVIDER_FAILURES

    return PROVIDER_FAILURES
