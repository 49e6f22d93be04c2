"""Shared helpers for the benchmark commands: percentiles, tables, progress, JSON and the machine."""

import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BASE_DIR = Path(__file__).resolve().parent.parent
DEFAULT_DATASETS = BASE_DIR.parent / "shared" / "datasets"


def percentiles(samples, points=(50, 95, 99)):
    """{'p50': …, 'p95': …} of `samples` (seconds or any unit), None when there are none."""
    values = np.asarray(list(samples), dtype=float)
    if values.size == 0:
        return {f"p{p}": None for p in points}
    return {f"p{p}": float(np.percentile(values, p)) for p in points}


def ms(seconds):
    """Seconds as a millisecond string for tables."""
    return "-" if seconds is None else f"{seconds * 1000:.2f}"


def table(headers, rows):
    """A plain-text table with right-aligned columns, as one string."""
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        lines.append("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def machine():
    """What the numbers were measured on."""
    try:
        memory_gb = round(psutil.virtual_memory().total / 2**30, 1)
        load = [round(x, 2) for x in os.getloadavg()]
    except (ImportError, OSError):
        memory_gb, load = None, None
    return {
        "cpus": os.cpu_count(),
        "memory_gb": memory_gb,
        "load_average_at_start": load,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def migrate_first(stream):
    """Bring the database's tables up to date, as `make run` does: a fresh clone's database has none yet."""
    executor = MigrationExecutor(connection)
    if executor.migration_plan(executor.loader.graph.leaf_nodes()):
        stream.write("applying the app's migrations to the database first…")
        call_command("migrate", verbosity=0)


def write_json(path, payload):
    """Write a benchmark's results (plus the machine) as indented JSON."""
    if not path:
        return
    payload = {"machine": machine(), **payload}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(payload, indent=2, default=str) + "\n")


class Progress:
    """One self-overwriting progress line on a terminal, a plain line every few seconds otherwise."""

    def __init__(self, label, total, stream=None, every=2.0):
        self.label, self.total = label, total
        self.stream = stream or sys.stderr
        self.every = every
        self.done = 0
        self.started = self.last = time.monotonic()
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def advance(self, n=1):
        self.done += n
        now = time.monotonic()
        if self.done >= self.total or now - self.last >= (0.2 if self.tty else self.every):
            self.last = now
            self._show(now)

    def _show(self, now):
        rate = self.done / max(now - self.started, 1e-9)
        text = f"{self.label}: {self.done}/{self.total} ({rate:,.0f}/s)"
        if self.tty:
            self.stream.write("\r" + text + ("\n" if self.done >= self.total else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


def rate(count, seconds):
    """Count per second, rounded for tables."""
    return round(count / seconds, 2) if seconds > 0 else None


def stop_processes(procs, timeout=20):
    """Terminate child processes, wait for them, and kill any that outlive `timeout` seconds."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
