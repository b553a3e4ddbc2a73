"""The window's run-controls toolbar and its menus, built the way Qt Designer's ``setupUi`` builds
a form: each action is made here, connected to the window's slot and kept as the window's
attribute (``window.play_action``, ``window.speed``, ...), the names the window, its tests and the
README's list of keys refer to. Every action is also added to the window itself, so its key works
with the menu bar hidden (demo mode)."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QAbstractButton, QApplication, QComboBox, QLabel, QToolBar

from kvscope.app.gui.export_menu import ExportMenu
from kvscope.app.gui.prompt_box import FOCUS_KEY
from kvscope.app.lab.scenarios import load_scenario, scenario_names
from kvscope.engine.config import ConfigError
from kvscope.widgets.kept_value_notice import KeptValueNotice
from kvscope.widgets.number_box import NumberBox

# Engine seconds per wall-clock second (max: 0), in 1-2-5 steps so that "+" pressed five times from 1x
# reaches 50x, one visible notch at a time, not 100x.
SPEEDS = [("0.1x", 0.1), ("0.2x", 0.2), ("0.5x", 0.5), ("1x", 1.0), ("2x", 2.0), ("5x", 5.0), ("10x", 10.0),
          ("20x", 20.0), ("50x", 50.0), ("100x", 100.0), ("200x", 200.0), ("500x", 500.0), ("max", 0.0)]
SEED_TIP = "random seed of the workload: the same seed replays the same run"


def add_action(window, text: str, shortcut, tip: str, slot, toolbar: QToolBar | None = None) -> QAction:
    action = QAction(text, window)
    keys = shortcut if isinstance(shortcut, list) else [shortcut]
    action.setShortcuts([QKeySequence(k) for k in keys])
    action.setToolTip(f"{tip} ({QKeySequence(keys[0]).toString()})")
    action.setStatusTip(tip)
    action.triggered.connect(slot)
    window.addAction(action)
    if toolbar is not None:
        toolbar.addAction(action)
    return action


def takes_the_key(field, event) -> bool:
    """Whether the focused field takes the key itself: Space on a check box or a button, a letter or
    digit (type-ahead) or Space in a choice list. The window's one-key shortcuts took them: Space on
    the focused "prefix caching" started the engine and left the box unticked, "s" in the workload
    list stepped the engine, "2" in the speed list opened scenario 2."""
    if event.modifiers() & ~(Qt.KeyboardModifier.ShiftModifier | Qt.KeyboardModifier.KeypadModifier):
        return False  # Ctrl+Return (Apply), Ctrl+T stay the window's
    if isinstance(field, QAbstractButton):
        return event.key() == Qt.Key.Key_Space
    # "+" and "-" (faster, slower) begin no item: they stay the window's, on the speed list too
    return isinstance(field, QComboBox) and (event.text().isalnum() or event.key() == Qt.Key.Key_Space)


class FieldKeys(QObject):
    """On the window: a key its focused field takes (takes_the_key) is that field's, not a
    shortcut's. Qt offers the key to the focused widget, then to its parents up to the window, before
    a shortcut; a field that does not claim it arrives here."""

    def eventFilter(self, window, event) -> bool:  # noqa: N802 - Qt's name
        if event.type() == QEvent.Type.ShortcutOverride and takes_the_key(QApplication.focusWidget(), event):
            event.accept()  # the key goes on to the field as a key press
            return True
        return False


def build_run_controls(w) -> None:
    """Play, Step, the speed, the seed, Reset, Apply, Theme (and Quit, for the File menu)."""
    w.installEventFilter(FieldKeys(w))
    bar = QToolBar("Run controls")
    bar.setObjectName("run controls")
    w.addToolBar(bar)
    w.play_action = add_action(w, "Play", Qt.Key_Space, "play or pause the engine",
                               lambda: _on_screen(w, "play", w.play_pressed), bar)
    w.step_action = add_action(w, "Step", [Qt.Key_Right, Qt.Key_S], "run exactly one engine step",
                               lambda: _on_screen(w, "step", w.step_pressed), bar)
    bar.addSeparator()
    bar.addWidget(QLabel(" Speed "))
    w.speed = QComboBox()
    for label, value in SPEEDS:
        w.speed.addItem(label, value)
    w.speed.setCurrentText("1x")
    w.speed.setToolTip("simulated backend: engine seconds per wall-clock second (+ / -); "
                       "the real backend runs at this machine's speed")
    w.speed.currentIndexChanged.connect(w._speed_changed)
    bar.addWidget(w.speed)
    add_action(w, "Faster", [Qt.Key_Plus, Qt.Key_Equal], "run the simulated clock faster", lambda: w._nudge_speed(1))
    add_action(w, "Slower", Qt.Key_Minus, "run the simulated clock slower", lambda: w._nudge_speed(-1))
    bar.addSeparator()
    bar.addWidget(QLabel(" Seed "))
    w.seed = NumberBox()  # 99999999999 typed stays as typed, refused at Apply with why (number_box.py)
    w.seed.setRange(0, 2**31 - 1)
    # as every other number box: a value on Enter, not at each key ("4k2" typed over 7 took the 4, and
    # its refusal said "kept 4"; "1.000" for 1,000 left the seed 1)
    w.seed.setKeyboardTracking(False)
    w.seed.setToolTip(SEED_TIP)
    KeptValueNotice(w.seed, lambda reason: w.statusBar().showMessage(f"seed: {reason}", 10000))
    bar.addWidget(w.seed)
    w.reset_action = add_action(w, "Reset", Qt.Key_R, "rebuild the engine and restart the workload with this seed",
                                lambda: _on_screen(w, "reset", w.reset_pressed), bar)
    w.apply_action = add_action(w, "Apply", [QKeySequence("Ctrl+Return"), QKeySequence("Ctrl+Enter")],
                                "apply the settings: rebuild the engine in place", lambda: _apply_on_screen(w))
    bar.addSeparator()
    w.theme_action = add_action(w, "Theme", QKeySequence("Ctrl+T"), "switch between the light and dark themes",
                                w.toggle_theme, bar)
    w.quit_action = add_action(w, "Quit", QKeySequence.Quit, "close kvscope", w.close)


def _focus_prompt(w) -> None:
    """The prompt box is on the live page: from another page Ctrl+K went to it out of sight."""
    w.pages.setCurrentWidget(w.panels.page)
    w.prompt.focus_input()


def _on_screen(w, what: str, act) -> None:
    """Play, Step and Reset act on what the page shows; an attached server runs by itself, and the
    keys pressed on its page built and played the live engine out of sight."""
    if w.attached is not None and w.pages.currentWidget() is w.attached:
        again = w.attached.reattach() if what == "reset" else None  # the page follows nothing: attach again
        if again:
            w.statusBar().showMessage(again, 10000)
            return
        w.statusBar().showMessage(f"nothing to {what} here: the attached server runs by itself; Play, Step "
                                  "and Reset act on the Live run and Compare pages", 10000)
        return
    act()


def _apply_on_screen(w) -> None:
    """Ctrl+Return applies the Settings to the live run, on its page: on the comparison's page (its
    docks hidden) or an attached server's, it built and played the live engine out of sight, taking
    the comparison's CPU, with the settings not on screen."""
    if w.pages.currentWidget() is not w.panels.page:
        page = w.pages.tabText(w.pages.currentIndex())
        w.statusBar().showMessage(f"nothing applied: Apply (Ctrl+Return) rebuilds the live run with its Settings; "
                                  f"this page is {page}, go to the Live run page to apply", 10000)
        return
    w.apply_settings(play=True)


def build_menus(w) -> None:
    """File (recordings, Export, Quit), View (demo mode, theme, the docks) and Scenarios."""
    file_menu = w.menuBar().addMenu("&File")
    w.open_recording_action = add_action(
        w, "Open recording...", QKeySequence.Open, "replay a recorded run (.kvrec): no model and no GPU needed",
        w.ask_open_recording)
    file_menu.addAction(w.open_recording_action)
    w.live_action = add_action(w, "Back to the live engine", QKeySequence("Ctrl+L"),
                               "close the recording and run the engine with the settings again", w.close_recording)
    w.live_action.setEnabled(False)
    file_menu.addAction(w.live_action)
    w.record_action = add_action(
        w, "Record the run...", QKeySequence("Ctrl+Shift+R"),
        "record the live run from now on to a .kvrec file, for File > Open recording or "
        "`kvscope gui --replay` (stops at the next Apply or Reset, or when unchecked)", w.toggle_recording)
    w.record_action.setCheckable(True)
    file_menu.addAction(w.record_action)
    w.exports = ExportMenu(w, file_menu.addMenu("&Export"))
    w.export_actions = w.exports.actions
    file_menu.addSeparator()
    file_menu.addAction(w.quit_action)

    view_menu = w.menuBar().addMenu("&View")
    w.demo_action = add_action(w, "Demo mode", Qt.Key_F11, "for talks: fullscreen, large fonts, high contrast, "
                               "settings hidden; F11 or Esc leaves", w.toggle_demo)
    w.demo_action.setCheckable(True)
    view_menu.addAction(w.demo_action)
    w.leave_demo_action = add_action(w, "Leave demo mode", Qt.Key_Escape, "leave demo mode", w.leave_demo)
    w.leave_demo_action.setEnabled(False)  # Esc means nothing else to this window
    view_menu.addAction(w.theme_action)
    w.prompt_action = add_action(w, "Type a prompt", QKeySequence(FOCUS_KEY),
                                 "type a prompt for the running engine; Enter sends it", lambda: _focus_prompt(w))
    view_menu.addAction(w.prompt_action)
    view_menu.addSeparator()
    for dock in w.docks():
        view_menu.addAction(dock.toggleViewAction())
    _build_scenarios_menu(w)


def _build_scenarios_menu(w) -> None:
    """One entry per guided scenario, keys 1 to 9 for the first nine."""
    menu = w.menuBar().addMenu("&Scenarios")
    w.scenario_actions = []
    w.scenario_names = scenario_names()
    for i, name in enumerate(w.scenario_names):
        try:
            title = load_scenario(name).title
        except ConfigError as exc:  # a broken file is listed, and opening it says why
            title = f"{name} (cannot be read: {exc})"
        action = QAction(f"&{i + 1}  {title}" if i < 9 else title, w)
        action.setShortcuts([QKeySequence(getattr(Qt, f"Key_{i + 1}"))] if i < 9 else [])
        action.setStatusTip(f"open the guided scenario {name}: a question, your guess, a comparison, the answer")
        action.triggered.connect(lambda _=False, n=name: w.open_scenario(n))
        w.addAction(action)
        menu.addAction(action)
        w.scenario_actions.append(action)
    if not w.scenario_names:
        menu.addAction("no scenarios found").setEnabled(False)
