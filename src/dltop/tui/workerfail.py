"""A widget's failed worker, shown where the widget is, notified and logged (issue 28).

Workers started with ``exit_on_error=False`` keep the viewer alive when they raise,
but Textual posts their ``Worker.StateChanged`` to the node that owns the worker
only: the message does not bubble, so the app's handler never sees a widget's or a
screen's worker fail, and a chart or a log view used to stop updating without a word.
:class:`ShowsWorkerErrors` handles it on the widget itself: the error is logged
(Textual's log: ``TEXTUAL_LOG=path`` writes it to a file), notified, and shown in the
widget through :meth:`ShowsWorkerErrors.show_worker_error`.
"""

from __future__ import annotations

from textual.worker import Worker, WorkerState

from dltop.textsafe import multiline, one_line


def worker_error_text(worker: Worker[object]) -> str:
    """``chart build failed: ValueError: ...``: what the worker did and why it failed."""
    what = worker.description or worker.group or worker.name or "a background task"
    exc = worker.error
    why = "failed" if exc is None else f"failed: {type(exc).__name__}: {exc}"
    return f"{one_line(what)} {why}"


class ShowsWorkerErrors:
    """Mixin of a widget or screen whose workers run with ``exit_on_error=False``.

    Its workers' failures are logged, notified, and passed to
    :meth:`show_worker_error`, which a subclass overrides to say it in place.
    """

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """Report a worker of this node that ended in error (others pass)."""
        if event.state != WorkerState.ERROR:
            return
        text = worker_error_text(event.worker)
        app = event.worker.node.app
        app.log.error(text, event.worker.error)
        app.notify(multiline(text), severity="error", timeout=10, markup=False)
        self.show_worker_error(text)

    def show_worker_error(self, text: str) -> None:
        """Say ``text`` in the widget (default: the notification says it alone)."""
