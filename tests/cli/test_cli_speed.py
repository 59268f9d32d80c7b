"""What keeps `saga --help` fast: commands import the engine only when they run."""

from __future__ import annotations

import subprocess
import sys

from saga.cli.queue import MAX_WORKERS
from saga.core.supervisor import MAX_CONCURRENCY


def test_help_loads_neither_sqlalchemy_nor_the_drivers():
    """`saga --help` builds every command's parser without importing the database layer."""
    code = (
        "import sys\n"
        "from saga.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "finally:\n"
        "    heavy = {'sqlalchemy', 'psycopg', 'pika', 'structlog', 'tqdm'} & set(sys.modules)\n"
        "    print(sorted(heavy))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert "[]" == done.stdout.strip().splitlines()[-1]


def test_the_worker_help_names_the_supervisors_limit():
    """The limit written in the CLI is the supervisor's own."""
    assert MAX_CONCURRENCY == MAX_WORKERS
