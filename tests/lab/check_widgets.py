"""Every widget of the course in a real JupyterLab in a real browser (`make test-lab`).

For each notebook with widgets: start JupyterLab (--allow-root --no-browser) on a copy of
notebooks/ (so nothing is autosaved over the committed files), open the notebook in Debian's
chromium driven by playwright's Python API (executable_path, no browser download), run all
cells, then:

  * every widget view rendered (no "Loading widget..." / "Error displaying widget" left);
  * no cell output holds a traceback;
  * each slider moved with the keyboard, each dropdown set to its next option, and the chat's
    text box + Send button used: the widget's area must change in response, and still hold no
    error afterwards.

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
NOTEBOOKS = ["04_kv_cache_growth", "05_npu_kernels", "07_buffer_objects", "08_tcp_mapping",
             "09_galaxy_mesh", "10_continuous_batching", "13_hardware_chat"]
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
SHOTS = Path(os.environ.get("LAB_SHOTS", "/tmp/llamanb-lab"))
TOKEN = "llamanb-lab-check"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_lab(root: Path, port: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "jupyter", "lab", "--allow-root", "--no-browser",
           f"--port={port}", "--ip=127.0.0.1", f"--ServerApp.token={TOKEN}",
           f"--ServerApp.root_dir={root}", "--ServerApp.disable_check_xsrf=True",
           "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    log = open(SHOTS / "lab.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    import urllib.request
    for _ in range(120):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={TOKEN}", timeout=2)
            return proc
        except OSError:
            time.sleep(1)
    proc.kill()
    raise SystemExit("JupyterLab did not start; see " + str(SHOTS / "lab.log"))


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


def run_all_and_wait(page, timeout_s: float) -> None:
    page.keyboard.press("Escape")
    page.click("text=Run", timeout=30_000)                        # the menu bar's Run menu
    page.click("text=Run All Cells", timeout=30_000)
    t0 = time.time()
    time.sleep(2)
    while time.time() - t0 < timeout_s:
        busy = page.evaluate("""() => [...document.querySelectorAll('.jp-InputArea-prompt')]
                                      .some(p => p.innerText.includes('*'))""")
        if not busy:
            return
        time.sleep(1)
    raise TimeoutError(f"cells still running after {timeout_s} s")


def widget_roots(page):
    return page.query_selector_all(".jp-OutputArea-output .jupyter-widgets.widget-vbox, "
                                   ".jp-OutputArea-output > .jupyter-widgets")


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


def check_notebook(browser, port: int, name: str) -> list[str]:
    problems = []
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"http://127.0.0.1:{port}/lab/workspaces/{name}/tree/{name}.ipynb?reset&token={TOKEN}")
    page.wait_for_selector(".jp-Notebook", timeout=120_000)
    try:                                       # "Select Kernel" when the lab asks: the default
        page.click(".jp-Dialog button:has-text('Select')", timeout=10_000)
    except Exception:                          # noqa: BLE001 -- no dialog: the kernel started
        pass
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
    run_all_and_wait(page, timeout_s=400)
    time.sleep(2)
    roots = widget_roots(page)
    if not roots:
        problems.append("no widget rendered")
    loading = page.evaluate("() => document.body.textContent.includes('Loading widget...')")
    if loading:
        problems.append("a widget is still 'Loading widget...'")
    problems += collect_errors(page)
    for i, root in enumerate(roots):
        root.scroll_into_view_if_needed()
        before = root.inner_html()
        images_before = set(root.evaluate(IMAGES_JS))
        root.screenshot(path=str(SHOTS / f"{name}-w{i}-before.png"))
        done = poke(page, root)

        def responded() -> bool:
            """A figure widget responds with a NEW figure (an output merely cleared is not a
            response); a widget without figures, with changed, non-empty content."""
            if images_before:
                return bool(set(root.evaluate(IMAGES_JS)) - images_before)
            return root.inner_html() != before and bool(root.text_content().strip())

        deadline = time.time() + 120
        while time.time() < deadline and not responded():
            time.sleep(0.5)
        if "chat send" in done:                 # wait for streamed tokens after "assistant>"
            deadline = time.time() + 180
            while time.time() < deadline and len(
                    root.inner_text().split("assistant>")[-1].split("\n")[0].strip()) < 12:
                time.sleep(1)
        root.screenshot(path=str(SHOTS / f"{name}-w{i}-after.png"))
        changed = responded()
        print(f"  widget {i}: {', '.join(done) or 'no control'} -> "
              f"{'responded' if changed else 'NO CHANGE'}")
        if done and not changed:
            problems.append(f"widget {i} did not respond to {', '.join(done)}")
    problems += [e for e in collect_errors(page) if e not in problems]
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=False)
    page.close()
    return problems


def main() -> int:
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="llamanb-lab-"))
    shutil.copytree(REPO / "notebooks", work / "notebooks")
    port = free_port()
    lab = start_lab(work / "notebooks", port)
    failed = 0
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run"])
            for name in sys.argv[1:] or NOTEBOOKS:
                t0 = time.time()
                print(f"{name}:", flush=True)
                try:
                    problems = check_notebook(browser, port, name)
                except Exception as e:                      # noqa: BLE001 -- report and go on
                    problems = [f"{type(e).__name__}: {str(e)[:200]}"]
                failed += bool(problems)
                print(f"  {'FAIL: ' + '; '.join(problems) if problems else 'ok'} "
                      f"({time.time() - t0:.0f} s)", flush=True)
            browser.close()
    finally:
        lab.terminate()
        lab.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    n = len(sys.argv[1:] or NOTEBOOKS)
    print(f"{n - failed} passed, {failed} failed (screenshots in {SHOTS})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
