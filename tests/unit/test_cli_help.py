"""Every command and flag has help text; ``run --help`` lists every variable with its default."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from consumer.cli import parser
from consumer.config import default_text
from consumer.env_vars import ENV_VARS, PROCESSOR_ENV_VARS

REPO = Path(__file__).resolve().parents[2]


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_and_flag_has_help() -> None:
    top = parser()
    action = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    helped = {c.dest for c in action._choices_actions if c.help}
    commands = _subparsers(top)
    assert set(commands) == {
        "run",
        "create-tables",
        "status",
        "drain",
        "replay",
        "health",
        "multilang",
        "import-kcl",
        "redrive",
    }
    assert helped == set(commands)
    missing = [
        f"{name} {'/'.join(a.option_strings) or a.dest}"
        for name, sub in commands.items()
        for a in sub._actions
        if not a.help
    ]
    assert not missing, missing
    assert all(sub.description for sub in commands.values())


def _help(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "consumer", *args, "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "200"},
    )


def test_run_help_lists_every_variable_with_its_default() -> None:
    out = _help("run")
    assert out.returncode == 0 and not out.stderr
    lines = out.stdout.splitlines()
    for var in (*ENV_VARS, *PROCESSOR_ENV_VARS):
        row = next((line for line in lines if line.split()[:1] == [var.name]), None)
        assert row is not None, f"{var.name} missing from run --help"
        assert (default_text(var) or "-") in row and var.help in row
    assert "CONSUMER_LEASE_DURATION_SECONDS            10 " in out.stdout  # the dataclass default
    assert "exit codes" in out.stdout
    top = _help()
    assert top.returncode == 0
    for command in ("run", "create-tables", "status", "drain", "replay"):
        assert command in top.stdout


def test_operations_doc_lists_every_variable_and_exit_code() -> None:
    doc = (REPO / "docs" / "operations.md").read_text()
    for var in (*ENV_VARS, *PROCESSOR_ENV_VARS):
        assert f"| `{var.name}` |" in doc, f"{var.name} missing from docs/operations.md"
    for code in ("| 0 |", "| 2 |", "| 3 |", "| 4 |"):
        assert code in doc


def test_a_malformed_command_line_is_one_line_and_exit_2() -> None:
    """argparse's own errors (a bad value, an unknown flag or command) in the CLI's form: one ``error:`` line
    naming the command, exit 2, no usage block and no traceback; run as a user runs it."""
    cases = {
        (
            "import-kcl",
            "--failover-millis",
            "abc",
        ): "error: python -m consumer import-kcl: argument --failover-millis: invalid int value: 'abc'",
        ("nosuch",): "error: python -m consumer: argument COMMAND: invalid choice: 'nosuch'",
        # named with its command, whose --help lists what it takes
        ("status", "--bogus"): "error: python -m consumer status: unrecognized arguments: --bogus "
        "(see python -m consumer status --help)",
        ("drain", "w1", "w2"): "error: python -m consumer drain: unrecognized arguments: w2",
        (): "error: python -m consumer: the following arguments are required: COMMAND",
    }
    for args, expected in cases.items():
        out = subprocess.run(
            [sys.executable, "-m", "consumer", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert out.returncode == 2, (args, out.stderr)
        assert out.stderr.splitlines() == [out.stderr.strip()] and out.stderr.startswith(expected), out.stderr


def _doc_rows() -> dict[str, tuple[str, str]]:
    """The rows of docs/operations.md's variable tables (``| variable | default | meaning |``)."""
    rows: dict[str, tuple[str, str]] = {}
    in_table = False
    for line in (REPO / "docs" / "operations.md").read_text().splitlines():
        if line.startswith("| variable | default | meaning |"):
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
        if in_table and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            assert len(cells) == 3, line
            rows[cells[0].strip("`")] = (cells[1], cells[2])
    return rows


def test_operations_doc_tables_say_what_run_help_says() -> None:
    """docs/operations.md says `run --help` prints its table "from the same source": every row, default and
    meaning, is ``consumer/env_vars.py``'s (with the dataclass defaults), and there is no other row."""
    rows = _doc_rows()
    variables = (*ENV_VARS, *PROCESSOR_ENV_VARS)
    assert list(rows) == [v.name for v in variables]
    for var in variables:
        default = "required" if var.required else (f"`{default_text(var)}`" if default_text(var) else "")
        assert rows[var.name] == (default, var.help), var.name


def test_ctrl_c_while_python_imports_the_cli_is_one_line_and_130(tmp_path: Path) -> None:
    """SIGINT can land before ``main()`` runs, while ``python -m consumer`` imports it: the interrupt is raised
    here at the same point, by an import hook Python loads at start (``sitecustomize``), not by a timed signal."""
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'consumer.cli':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupt())\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "consumer", "status"],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (out.returncode, out.stderr, out.stdout) == (130, "interrupted\n", "")
