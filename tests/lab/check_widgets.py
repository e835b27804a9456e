"""Every widget of the course in a real JupyterLab in a real browser (`make test-lab`).

For each notebook with widgets: start JupyterLab (--allow-root --no-browser) on a copy of
notebooks/ (so nothing is autosaved over the committed files), open the notebook in Debian's
chromium driven by playwright's Python API (executable_path, no browser download), run all
cells, then:

  * every widget view rendered (no "Loading widget..." / "Error displaying widget" left);
  * no cell output holds a traceback;
  * each slider moved with the keyboard, each dropdown set to its next option, and the chat's
    text box + Send button used: the widget's area must change in response (a NEW figure, not an
    output merely cleared), and still hold no error afterwards;
  * while the kernel lives, no widget shows the kernel-gone notice (llamanb.course.widgets.kernel_notice);
  * close and reopen: the notebook is saved, its kernel shut down, and the notebook opened again
    in a fresh page: every widget must render from the state saved in the notebook (the course's
    Lab setting `saveState`, scripts/jupyterlab_overrides.json, installed by `make lab` and
    `make test-lab`), as many as ran live (a widget that vanished fails), a figure widget with
    its figure, the chat with its text box and Send button; none may say "Error displaying
    widget", and each must say, in one visible line, that its kernel is gone;
  * every figure is measured as Lab lays it out: the smallest text drawn into it (its size in
    pixels at the image's natural size, written into the PNG by figure_text_hook.py, which the
    test's kernels load) times its drawn width over its natural width must be at least
    MIN_TEXT_PX;
  * Lab's text column: how many monospace characters an output line holds before Lab wraps it
    (mid-word: word-break: break-all) must be at least tests/lab/test_output_width.py's LIMIT,
    which holds every printed line of the committed notebooks to that width.

    python tests/lab/check_widgets.py [NN_name ...]    the widget chapters (default) or those named
    python tests/lab/check_widgets.py --all            every chapter; ends with a markdown table of
                                                       each chapter's run time in Lab (Run All to
                                                       idle) for the README

Screenshots go to $LAB_SHOTS (default /tmp/llamanb-lab). Exit 0 when every notebook passes.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
OVERRIDES = REPO / "scripts" / "jupyterlab_overrides.json"
# Lab scales an image down to the column (max-width: 100%): the smallest label of every figure, as
# drawn on screen, in CSS pixels.
MIN_TEXT_PX = 9.0
HOOK = Path(__file__).resolve().parent / "figure_text_hook.py"
VIEWPORT = {"width": 1400, "height": 1000}     # a laptop screen; Lab's file browser stays open


def chapters() -> list[str]:
    """Every chapter: NN_name, NNx_name (01b, 03b, 04b) and the lettered appendices (A_name)."""
    import re

    return sorted(p.stem for p in (REPO / "notebooks").glob("*.ipynb")
                  if re.match(r"([0-9][0-9][a-z]?|[A-Z])_", p.name))


def widget_chapters() -> list[str]:
    """The chapters whose committed notebook displays a widget."""
    import json

    def has_widget(name: str) -> bool:
        nb = json.loads((REPO / "notebooks" / f"{name}.ipynb").read_text())
        return any(WIDGET_MIME in o.get("data", {}) for c in nb["cells"] for o in c.get("outputs", []))
    return [n for n in chapters() if has_widget(n)]

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
SHOTS = Path(os.environ.get("LAB_SHOTS", "/tmp/llamanb-lab"))
TOKEN = "llamanb-lab-check"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_lab(root: Path, port: int, home: Path) -> subprocess.Popen:
    """JupyterLab on `root`, with user settings and workspaces in `home` (never the user's own)."""
    startup = home / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    shutil.copy(HOOK, startup / "00-figure-text.py")
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"), IPYTHONDIR=str(home / "ipython"))
    cmd = [sys.executable, "-m", "jupyter", "lab", "--allow-root", "--no-browser",
           f"--port={port}", "--ip=127.0.0.1", f"--ServerApp.token={TOKEN}",
           f"--ServerApp.root_dir={root}", "--ServerApp.disable_check_xsrf=True",
           "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    log = open(SHOTS / "lab.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    for _ in range(120):
        try:
            api(port, "api/status")
            return proc
        except OSError:
            time.sleep(1)
    proc.kill()
    raise SystemExit("JupyterLab did not start; see " + str(SHOTS / "lab.log"))


def api(port: int, path: str, method: str = "GET"):
    import json
    import urllib.request

    req = urllib.request.Request(f"http://127.0.0.1:{port}/{path}?token={TOKEN}", method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        body = r.read()
    return json.loads(body) if body else None


def saves_widget_state(port: int) -> bool:
    """The Lab setting that keeps widgets across close and reopen, as this Lab resolves it: the
    user's own value, else the schema's default (which an overrides.d file replaces)."""
    got = api(port, "lab/api/settings/@jupyter-widgets/jupyterlab-manager:plugin")
    default = got["schema"]["properties"]["saveState"]["default"]
    return bool(got.get("settings", {}).get("saveState", default))


def shutdown_kernels(port: int) -> None:
    for k in api(port, "api/kernels"):
        api(port, f"api/kernels/{k['id']}", method="DELETE")


# textContent, not innerText: innerText is empty for output JupyterLab has not laid out (a cell
# scrolled off screen), which hid a chapter's FileNotFoundError once. collect_errors() also scrolls
# the notebook through, since a windowed notebook keeps only the cells near the view in the DOM.
ERRORS_JS = """() => {
  const bad = [];
  for (const el of document.querySelectorAll('.jp-OutputArea-output')) {
    const t = el.textContent || '';
    if (t.includes('Traceback (most recent call last)') || /\\w+Error: /.test(t) && el.dataset.mimeType === 'application/vnd.jupyter.stderr')
      bad.push(t.slice(0, 300));
  }
  for (const el of document.querySelectorAll('.jupyter-widgets'))
    if ((el.textContent || '').includes('Error displaying widget')) bad.push('Error displaying widget');
  return bad;
}"""

SCROLL_JS = """(frac) => {
  const w = document.querySelector('.jp-WindowedPanel-outer') ||
            document.querySelector('.jp-NotebookPanel-notebook');
  if (!w) return false;
  w.scrollTop = frac * (w.scrollHeight - w.clientHeight);
  return true;
}"""


def collect_errors(page, stops: int = 40) -> list[str]:
    """Every error output of the notebook: read at each of `stops` scroll positions, top to bottom."""
    found: list[str] = []
    for i in range(stops + 1):
        if not page.evaluate(SCROLL_JS, i / stops) and i:
            break
        time.sleep(0.15)
        found += [e for e in page.evaluate(ERRORS_JS) if e not in found]
    return found


IMAGES_JS = "root => [...root.querySelectorAll('img')].map(i => i.src)"

# Every figure Lab has laid out: [which cell, natural width, drawn width, the smallest text at
# natural size in px (the PNG's text chunk from figure_text_hook.py; null if it has none)].
SCALE_JS = """() => [...document.querySelectorAll('.jp-OutputArea-output img')]
  .filter(i => i.naturalWidth > 0 && i.clientWidth > 0)
  .map(i => {
    let px = null;
    const m = /^data:image\\/png;base64,(.*)$/.exec(i.src);
    if (m) {
      const head = atob(m[1].slice(0, 8000).replace(/[^A-Za-z0-9+/]/g, '').slice(0, 8000 - 8000 % 4));
      const t = /llamanb-min-text-px\\0([0-9.]+)/.exec(head);
      if (t) px = parseFloat(t[1]);
    }
    return [(i.closest('.jp-Cell') && i.closest('.jp-Cell').querySelector('.jp-InputArea-prompt')
             || {}).textContent || '?', i.naturalWidth, i.clientWidth, i.src.slice(-24), px];
  })"""


def figure_scales(page, stops: int = 40) -> dict[str, tuple[str, int, int, float | None]]:
    """Each figure of the notebook (by the tail of its data URL): its prompt, natural and drawn
    width and smallest text at natural size, read at `stops` scroll positions as
    collect_errors does."""
    seen: dict[str, tuple[str, int, int, float | None]] = {}
    for i in range(stops + 1):
        if not page.evaluate(SCROLL_JS, i / stops) and i:
            break
        time.sleep(0.1)
        for prompt, natural, drawn, key, px in page.evaluate(SCALE_JS):
            seen[key] = (prompt.strip(), natural, drawn, px)
    return seen


def figure_problems(page) -> list[str]:
    """Figures whose smallest text is drawn under MIN_TEXT_PX (or that carry no measure)."""
    problems = []
    for key, (prompt, natural, drawn, px) in figure_scales(page).items():
        if px is None:
            problems.append(f"figure {prompt} carries no text size (was it drawn by matplotlib?)")
        elif px * drawn / natural < MIN_TEXT_PX:
            problems.append(f"figure {prompt}: smallest text {px * drawn / natural:.1f} px as drawn "
                            f"({px:.1f} px at {natural} px wide, drawn {drawn} px)")
    return problems


# How many characters of Lab's monospace output fit on one line of the output column.
COLUMNS_JS = """() => {
  const pre = document.querySelector('.jp-OutputArea-output pre');
  if (!pre) return null;
  const probe = document.createElement('span');
  probe.textContent = 'x'.repeat(200);
  probe.style.whiteSpace = 'pre';
  pre.appendChild(probe);
  const ch = probe.getBoundingClientRect().width / 200;
  probe.remove();
  return Math.floor(pre.clientWidth / ch);
}"""


# The notice each widget carries (llamanb.course.widgets.kernel_notice): [shown, its text].
NOTICE_JS = """root => [...root.querySelectorAll('.llamanb-kernel-gone')]
  .map(e => [getComputedStyle(e).display !== 'none' && e.offsetHeight > 0, e.textContent])"""


def run_all_and_wait(page, port: int, timeout_s: float) -> float:
    """Run All Cells; return the seconds until the kernel is idle with no cell queued (the
    prompts of cells scrolled out of the DOM are not seen, so the kernel's state decides)."""
    page.keyboard.press("Escape")
    page.click(".lm-MenuBar-itemLabel:text-is('Run')", timeout=30_000)   # the menu bar's Run menu
    t0 = time.time()
    page.click(".lm-Menu-itemLabel:text-is('Run All Cells')", timeout=30_000)
    idle_since = None
    while time.time() - t0 < timeout_s:
        time.sleep(0.5)
        busy = page.evaluate("""() => [...document.querySelectorAll('.jp-InputArea-prompt')]
                                      .some(p => p.textContent.includes('*'))""")
        busy = busy or any(k["execution_state"] != "idle" for k in api(port, "api/kernels"))
        if busy:
            idle_since = None
        elif idle_since is None:
            idle_since = time.time()
        elif time.time() - idle_since >= 2.0:                     # idle, and nothing queued next
            return idle_since - t0
    raise TimeoutError(f"cells still running after {timeout_s} s")


def widget_roots(page):
    """Each displayed widget once: a box nested in another (chapter 05b's notice above the tile
    view's own box) is part of its outer widget, as REOPENED_JS counts it after reopening."""
    return [w for w in page.query_selector_all(".jp-OutputArea-output .jupyter-widgets.widget-vbox, "
                                               ".jp-OutputArea-output > .jupyter-widgets")
            if w.evaluate("w => !w.parentElement.closest('.jupyter-widgets.widget-vbox')")]


def poke(page, root) -> list[str]:
    """Use every control in one widget; return what was done."""
    done = []
    for handle in root.query_selector_all(".noUi-handle"):
        handle.focus()
        for _ in range(2):
            page.keyboard.press("ArrowRight")
        done.append("slider +2")
    for sel in root.query_selector_all("select"):
        n = sel.evaluate("s => s.options.length")
        if n > 1:
            cur = sel.evaluate("s => s.selectedIndex")
            sel.select_option(index=(cur + 1) % n)
            done.append("dropdown next")
    text = root.query_selector("input[type=text]")
    send = root.query_selector("button:has-text('Send')")
    if text and send:
        text.fill("Say hello in three words.")
        send.click()
        done.append("chat send")
    return done


def open_notebook(browser, port: int, name: str):
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"http://127.0.0.1:{port}/lab/workspaces/{name}/tree/{name}.ipynb?reset&token={TOKEN}")
    page.wait_for_selector(".jp-Notebook", timeout=120_000)
    try:                                       # "Select Kernel" when the lab asks: the default
        page.click(".jp-Dialog button:has-text('Select')", timeout=10_000)
    except Exception:                          # noqa: BLE001 -- no dialog: the kernel started
        pass
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
    return page


def save(page, path: Path, timeout_s: float = 60) -> bool:
    """Save the notebook (Ctrl+S) and wait until the file on disk holds the widget state."""
    import json

    page.click(".jp-Notebook")
    page.keyboard.press("Escape")
    page.keyboard.press("Control+s")
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            if json.loads(path.read_text()).get("metadata", {}).get("widgets"):
                return True
        except (OSError, ValueError):          # mid-write
            pass
        time.sleep(0.5)
    return False


RENDERED_JS = """() => [...document.querySelectorAll('.jp-OutputArea-output .jupyter-widgets.widget-vbox, ' +
                                             '.jp-OutputArea-output > .jupyter-widgets')]
  .map(w => w.querySelectorAll('img').length > 0)"""


# Per widget root: [has a figure, has a text box and a Send button (the chat), the kernel-gone
# notice shown, the notice's text].
REOPENED_JS = """() => [...document.querySelectorAll('.jp-OutputArea-output .jupyter-widgets.widget-vbox, ' +
                                             '.jp-OutputArea-output > .jupyter-widgets')]
  .filter(w => !w.parentElement.closest('.jupyter-widgets.widget-vbox'))
  .map(w => {
    const n = [...w.querySelectorAll('.llamanb-kernel-gone')]
      .filter(e => getComputedStyle(e).display !== 'none' && e.offsetHeight > 0);
    return [w.querySelectorAll('img').length > 0,
            !!w.querySelector('input[type=text]') && [...w.querySelectorAll('button')].some(b => b.textContent.includes('Send')),
            n.length > 0, n.length ? (n[0].querySelector('span') || n[0]).textContent : ''];
  })"""


def reopen_problems(browser, port: int, name: str, live: dict[str, int], timeout_s: float = 90) -> list[str]:
    """Open the saved notebook again with no kernel behind its widgets: each must render from
    the saved state (as many as ran live: `live` counts widgets, figure widgets and chats), the
    figure widgets with their figure, the chat with its text box and Send button, and each must
    show the kernel-gone notice. Lab renders a cell's outputs when it comes near the view, so
    the notebook is scrolled through until every one has shown; a widget is counted by its
    place in the page's order at the scroll position where the most were rendered."""
    page = open_notebook(browser, port, name)
    best: list = []
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        for i in range(21):
            page.evaluate(SCROLL_JS, i / 20)
            time.sleep(0.3)
            shown = page.evaluate(REOPENED_JS)
            if (len(shown), sum(s[0] for s in shown)) > (len(best), sum(s[0] for s in best)):
                best = shown
        if len(best) >= live["widgets"] and sum(s[0] for s in best) >= live["figures"]:
            break
    widgets, with_figure = len(best), sum(s[0] for s in best)
    chats, told = sum(s[1] for s in best), sum(s[2] for s in best)
    problems = []
    if widgets < live["widgets"]:
        problems.append(f"after reopening: {widgets} of the {live['widgets']} widgets rendered")
    if chats < live["chats"]:
        problems.append(f"after reopening: {chats} of {live['chats']} chat widgets show a text box and Send")
    if told < widgets:
        problems.append(f"after reopening: {widgets - told} of {widgets} widgets do not say their kernel is gone")
    if best and best[0][3]:
        print(f"  notice shown: {best[0][3].strip()!r}")
    page.screenshot(path=str(SHOTS / f"{name}-reopened.png"), full_page=False)
    errors = collect_errors(page)
    if errors:
        problems.append("after reopening: " + "; ".join(errors[:3]))
    if with_figure < live["figures"]:
        problems.append(f"after reopening: {with_figure} of {live['figures']} figure widgets show a figure")
    print(f"  reopened with the kernel shut down: {widgets} widgets, {with_figure} with their figure, "
          f"{chats} chat(s), {told} saying their kernel is gone")
    page.close()
    return problems


def settled(root, responded, timeout_s: float = 120, quiet_s: float = 2.0) -> bool:
    """Whether the widget has responded and stayed so for quiet_s: two key presses redraw twice,
    and between the two the output is empty for a moment."""
    deadline, since, last = time.time() + timeout_s, None, None
    while time.time() < deadline:
        if responded():
            now = (root.evaluate(IMAGES_JS), root.text_content())
            if now != last:
                since, last = time.time(), now
            elif time.time() - since >= quiet_s:
                return True
        else:
            since, last = None, None
        time.sleep(0.5)
    return False


def check_notebook(browser, port: int, name: str, work: Path, widgets: bool) -> tuple[list[str], float]:
    """Everything above for one notebook; returns its problems and its Run All time in Lab."""
    problems = []
    page = open_notebook(browser, port, name)
    if widgets:                                # the committed file, before it runs: no widget
        time.sleep(2)                          # state is committed, so each shows Lab's message
        unrendered = any("Error displaying widget" in e for e in collect_errors(page, stops=10))
        print("  before running: " + ("the widgets say 'Error displaying widget' (no state is "
              "committed; the static twin beside each shows it)" if unrendered else "no widget error"))
    seconds = run_all_and_wait(page, port, timeout_s=600)
    print(f"  ran in {seconds:.0f} s", flush=True)
    time.sleep(2)
    problems += collect_errors(page)
    problems += figure_problems(page)
    columns = page.evaluate(COLUMNS_JS)
    if columns is not None:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from test_output_width import LIMIT
        print(f"  Lab's output column holds {columns} characters a line")
        if columns < LIMIT:
            problems.append(f"Lab's output column holds {columns} characters, under the {LIMIT} "
                            f"tests/lab/test_output_width.py holds printed lines to")
    if not widgets:
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=False)
        page.close()
        shutdown_kernels(port)                 # closing a tab leaves its kernel running
        return problems, seconds
    roots = widget_roots(page)
    if not roots:
        problems.append("no widget rendered")
    if page.evaluate("() => document.body.textContent.includes('Loading widget...')"):
        problems.append("a widget is still 'Loading widget...'")
    live = {"widgets": len(roots), "figures": 0, "chats": 0}
    for i, root in enumerate(roots):
        if any(shown for shown, _ in root.evaluate(NOTICE_JS)):
            problems.append(f"widget {i} says its kernel is gone while the kernel runs")
        root.scroll_into_view_if_needed()
        before = root.inner_html()
        images_before = set(root.evaluate(IMAGES_JS))
        live["figures"] += bool(images_before)
        root.screenshot(path=str(SHOTS / f"{name}-w{i}-before.png"))
        done = poke(page, root)
        live["chats"] += "chat send" in done

        def responded() -> bool:
            """A figure widget responds with a NEW figure (an output merely cleared is not a
            response); a widget without figures, with changed, non-empty content."""
            if images_before:
                return bool(set(root.evaluate(IMAGES_JS)) - images_before)
            return root.inner_html() != before and bool(root.text_content().strip())

        if "chat send" in done:                 # wait for streamed tokens after "assistant>"
            deadline = time.time() + 180
            while time.time() < deadline and len(
                    root.text_content().split("assistant>")[-1].strip()) < 12:
                time.sleep(1)
        changed = settled(root, responded)
        root.screenshot(path=str(SHOTS / f"{name}-w{i}-after.png"))
        print(f"  widget {i}: {', '.join(done) or 'no control'} -> "
              f"{'responded' if changed else 'NO CHANGE'}")
        if done and not changed:
            problems.append(f"widget {i} did not respond to {', '.join(done)}")
    problems += [e for e in collect_errors(page) if e not in problems]
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=False)
    if not save(page, work / f"{name}.ipynb"):
        problems.append("saving did not write the widget state (is saveState on?)")
    page.close()
    shutdown_kernels(port)
    problems += reopen_problems(browser, port, name, live)
    shutdown_kernels(port)
    return problems, seconds


def main(argv: list[str]) -> int:
    from playwright.sync_api import sync_playwright

    every = "--all" in argv
    names = [a for a in argv if a != "--all"] or (chapters() if every else widget_chapters())
    with_widgets = set(widget_chapters())
    SHOTS.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="llamanb-lab-"))
    work = home / "notebooks"
    shutil.copytree(REPO / "notebooks", work)
    port = free_port()
    lab = start_lab(work, port, home)
    failed, times = 0, {}
    try:
        if not saves_widget_state(port):
            print(f"this JupyterLab does not save widget state; install {OVERRIDES.relative_to(REPO)} "
                  f"as <sys.prefix>/share/jupyter/lab/settings/overrides.d/llamanb.json (make test-lab does)")
            return 1
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run"])
            for name in names:
                t0 = time.time()
                print(f"{name}:", flush=True)
                try:
                    problems, times[name] = check_notebook(browser, port, name, work, name in with_widgets)
                except Exception as e:                      # noqa: BLE001 -- report and go on
                    problems = [f"{type(e).__name__}: {str(e)[:200]}"]
                    shutdown_kernels(port)
                failed += bool(problems)
                print(f"  {'FAIL: ' + '; '.join(problems) if problems else 'ok'} "
                      f"({time.time() - t0:.0f} s)", flush=True)
            browser.close()
    finally:
        lab.terminate()
        lab.wait(timeout=30)
        shutil.rmtree(home, ignore_errors=True)
    if every:
        load = os.getloadavg()[0]
        print(f"\nRun All to idle in JupyterLab {lab_version()}, Debian chromium, "
              f"{os.cpu_count()} cores, load average {load:.1f} at the end:\n")
        print("| chapter | " + " | ".join(n.split("_")[0] for n in times) + " |")
        print("|---|" + "---|" * len(times))
        print("| seconds in Lab | " + " | ".join(f"{t:.0f}" for t in times.values()) + " |")
    print(f"{len(names) - failed} passed, {failed} failed (screenshots in {SHOTS})")
    return 1 if failed else 0


def lab_version() -> str:
    import jupyterlab

    return jupyterlab.__version__


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
