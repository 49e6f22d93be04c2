import logging
import os
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
