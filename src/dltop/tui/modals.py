"""Modal screens: profile picker, export path, confirmations, help."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, OptionList, Static

from dltop.errors import UserError
from dltop.textsafe import multiline


class Dialog(ModalScreen[str | None]):
    """A dialog that escape closes without an answer (None)."""

    BINDINGS = [Binding("escape", "dismiss_none", "Close")]

    def action_dismiss_none(self) -> None:
        self.dismiss(None)


class ProfilePicker(Dialog):
    """Pick a built-in profile or type a file path; errors are shown here, nothing is queued."""

    def __init__(self, builtins: list[str],
                 before_add: Callable[[], None] | None = None) -> None:
        """``before_add`` runs (in a thread) once the profile passed its checks; a
        UserError it raises is shown here too (the database cannot be created...)."""
        super().__init__()
        self.builtins = builtins
        self.before_add = before_add

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Add a profile to the queue", classes="dialog-title")
            yield OptionList(*self.builtins, id="builtin-profiles")
            yield Input(placeholder="or a profile file: path/to/profile.toml", id="profile-path")
            yield Static("", id="profile-error", classes="error")

    @on(OptionList.OptionSelected)
    def _picked(self, event: OptionList.OptionSelected) -> None:
        self.validate(str(event.option.prompt))

    @on(Input.Submitted, "#profile-path")
    def _typed(self, event: Input.Submitted) -> None:
        if event.value.strip():
            self.validate(event.value.strip())

    @work(thread=True, exclusive=True)
    def validate(self, ref: str) -> None:
        """Load and preflight the profile off the event loop; dismiss only if it is valid."""
        from dltop.jobs.start import StartOptions, check

        try:
            check([ref], StartOptions(("dltop", "run", ref)))
            if self.before_add is not None:
                self.before_add()
        except UserError as exc:
            self.app.call_from_thread(self._show_error, str(exc))
            return
        self.app.call_from_thread(self.dismiss, ref)

    def _show_error(self, text: str) -> None:
        # Text, not markup: the message quotes the path, which may hold `[/]` or ESC
        self.query_one("#profile-error", Static).update(Text(multiline(text)))


class ExportDialog(Dialog):
    """Ask where to write the results table (format from the suffix)."""

    def __init__(self, default: str) -> None:
        super().__init__()
        self.default = default

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Export results to (.md .csv .json .tex)", classes="dialog-title")
            yield Input(value=self.default, id="export-path")

    @on(Input.Submitted)
    def _submit(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)


class ConfirmDialog(ModalScreen[bool]):
    """Ask before an action that stops or removes something; ``what`` names it."""

    BINDINGS = [Binding("y", "choose(True)", "Yes"),
                Binding("n,escape", "choose(False)", "No")]

    def __init__(self, title: str, what: str, yes_label: str) -> None:
        super().__init__()
        self.title_text, self.what, self.yes_label = title, what, yes_label

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text(self.title_text), classes="dialog-title")
            # Text, not markup: the run's label and the model's name come from a profile
            yield Static(Text(multiline(self.what)), id="confirm-what")
            with Horizontal(classes="buttons"):
                yield Button(self.yes_label, id="yes", variant="error")
                yield Button("(n) no", id="no", variant="primary")

    def action_choose(self, yes: bool) -> None:
        self.dismiss(yes)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class QuitDialog(ModalScreen[str | None]):
    """Runs are active: leave them running, stop them, or stay."""

    BINDINGS = [Binding("l", "choose('leave')", "Leave running"),
                Binding("s", "choose('stop')", "Stop them"),
                Binding("escape", "choose('stay')", "Stay")]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("A campaign is running. Quit the viewer and...", classes="dialog-title")
            with Horizontal(classes="buttons"):
                yield Button("(l) leave it running", id="leave", variant="primary")
                yield Button("(s) stop it", id="stop", variant="error")
                yield Button("stay", id="stay")

    def action_choose(self, choice: str) -> None:
        self.dismiss(None if choice == "stay" else choice)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.action_choose(event.button.id or "stay")


HELP = """\
[b]dltop[/b]: watch and steer benchmark campaigns. The engine runs
apart from this viewer: quitting it, a dropped SSH connection or a
killed viewer never stops a run.

[b]Screens[/b]   1 main    2 results    3 history
          f follow the newest campaign again (after opening an older one)
[b]Queue[/b]     a add a profile   c cancel the current run (asks)
          p pause/resume (after the current run)   r retry failed
          j/k or arrows move the cursor
          K/J move the selected job up/down   x remove it (asks)
          enter run details ([ ] attempts, l whole log, escape back;
          log viewer: G/g end/start)
[b]Results[/b]   m next metric   M pick one   s sort by column   e export
[b]History[/b]   enter open the campaign   e export it
[b]Other[/b]     ? or F1 this help   ctrl+p every command by name
          q or F10 quit (asks when runs are active)
"""


class HelpScreen(ModalScreen[None]):
    """The key list."""

    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss", "Close"),
                Binding("f10", "app.quit_viewer", "Quit")]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(HELP)
