"""Opens the built documentation in headless Chromium, as a reader would.

Usage:
  docs_browser_check.py HTML_DIR               serve HTML_DIR on loopback
  docs_browser_check.py HTML_DIR --url URL     pages already served at URL

Fails (exit 1, naming each problem) when a page logs a console error (a
script error, a file that did not load), when a page with order graphs shows
none of their SVG, or when the API page lacks an entry for a public name
(each package's ``__all__``). Keeps a screenshot of the ordering page in
``--screenshots`` (default: ``screenshots/`` beside HTML_DIR).

Chromium is Debian's ``chromium``, driven through Debian's
``chromium-driver`` by selenium; neither is downloaded. The network is
closed here, so Chromium runs with its background connections off.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import importlib
import pathlib
import sys
import tempfile
import threading
from collections.abc import Generator

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
PUBLIC_MODULES = ("entangle_jax", "entangle_jax.testing")
ORDERING_PAGE = "seeing_order.html"
API_PAGE = "api.html"
FLAGS = (
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
  "--window-size=1280,2000",
)
# An order graph as sphinx.ext.graphviz embeds it: an <object> holding the
# SVG file. It shows when the SVG document loaded and has a drawn size.
_SVG_SHOWN = """
const shown = [];
for (const o of document.querySelectorAll('object.graphviz')) {
  const svg = o.contentDocument && o.contentDocument.querySelector('svg');
  const box = o.getBoundingClientRect();
  shown.push(Boolean(svg) && box.width > 0 && box.height > 0);
}
return shown;
"""


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
  def log_message(self, format: str, *args: object) -> None:
    del format, args  # one line per file fetched is noise here


@contextlib.contextmanager
def serve(folder: pathlib.Path) -> Generator[str]:
  """Serves `folder` on 127.0.0.1 (a free port) while the block runs."""
  handler = functools.partial(_QuietHandler, directory=str(folder))
  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  try:
    yield f"http://127.0.0.1:{server.server_address[1]}/"
  finally:
    server.shutdown()
    server.server_close()


@contextlib.contextmanager
def chromium() -> Generator:
  from selenium import webdriver
  from selenium.webdriver.chrome.service import Service

  with tempfile.TemporaryDirectory() as profile:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
      options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(
      service=Service(executable_path=CHROMEDRIVER), options=options
    )
    driver.set_page_load_timeout(60)
    try:
      yield driver
    finally:
      driver.quit()


def public_names() -> list[str]:
  return [
    f"{module}.{name}"
    for module in PUBLIC_MODULES
    for name in importlib.import_module(module).__all__
  ]


def check_page(driver, url: str, page: str, graphs: int) -> list[str]:
  """Loads one page; its problems, each naming the page."""
  driver.get(url + page)
  problems = [
    f"{page}: console {entry['level']}: {entry['message']}"
    for entry in driver.get_log("browser")
    if entry["level"] == "SEVERE"
  ]
  shown = driver.execute_script(_SVG_SHOWN)
  if graphs and not (len(shown) == graphs and all(shown)):
    problems.append(f"{page}: SVG graphs shown: {shown}; expected {graphs}")
  return problems


def graph_count(html: pathlib.Path, page: str) -> int:
  """How many Graphviz SVGs the built page embeds."""
  return (
    (html / page)
    .read_text(encoding="utf-8")
    .count('<object data="_images/graphviz-')
  )


def check(html: pathlib.Path, url: str, screenshots: pathlib.Path) -> list:
  pages = sorted(str(p.relative_to(html)) for p in html.glob("*.html"))
  problems = []
  for required in (ORDERING_PAGE, API_PAGE):
    if required not in pages:
      problems.append(f"{required} was not built")
  if ORDERING_PAGE in pages and not graph_count(html, ORDERING_PAGE):
    problems.append(f"{ORDERING_PAGE} has no SVG order graph")
  with chromium() as driver:
    for page in pages:
      problems += check_page(driver, url, page, graph_count(html, page))
    driver.get(url + API_PAGE)
    ids = set(
      driver.execute_script(
        "return Array.from(document.querySelectorAll('dt[id]'), e => e.id);"
      )
    )
    problems += [
      f"{API_PAGE}: no entry for {name}"
      for name in public_names()
      if name not in ids
    ]
    driver.get(url + ORDERING_PAGE)
    screenshots.mkdir(parents=True, exist_ok=True)
    shot = screenshots / ORDERING_PAGE.replace(".html", ".png")
    driver.save_screenshot(str(shot))
    print(f"checked {len(pages)} pages; screenshot: {shot}")
  return problems


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("html", type=pathlib.Path, help="the built site")
  parser.add_argument("--url", help="where the site is served already")
  parser.add_argument("--screenshots", type=pathlib.Path)
  args = parser.parse_args(argv)
  screenshots = args.screenshots or args.html.parent / "screenshots"
  with contextlib.ExitStack() as stack:
    url = args.url or stack.enter_context(serve(args.html))
    if not url.endswith("/"):
      url += "/"
    problems = check(args.html, url, screenshots)
  for problem in problems:
    print(problem, file=sys.stderr)
  return 1 if problems else 0


if __name__ == "__main__":
  sys.exit(main())
