"""The documentation site as a reader sees it. The site is built once (``make docs``: strict,
offline), then every page is rendered by headless Chromium (the distribution's package) from a
server on localhost, with every other host unreachable: no Markdown may be left as text (a list, a
table, emphasis, a link or TeX that did not render), no table may swallow a paragraph, every image
must load, every equation must be typeset by the renderer the site serves itself, and nothing may
be fetched from another host. The strict build passes on pages that render wrongly: only a browser
sees these."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support.paths import ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHECK_PAGE = "/__render_check__.html"
RESULTS = "/__render_results__"

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="the [docs] extra is not installed")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (Debian: apt-get install chromium; `make test` installs it where it can)",
)

LITERAL_MARKDOWN = {
    "a list item left as text": r"(?m)^[ \t]*[-*+][ \t]+\S.*",
    # a pair of them: a lone `f(**kwargs)` in prose is text
    "emphasis left as asterisks": r".{0,30}\*\*[^\s*](?:[^*\n]*[^\s*])?\*\*.{0,30}",
    "a table row left as text": r"(?m)^[ \t]*\|.*\|[ \t]*$",
    "a table rule left as text": r".{0,30}\|[ \t]*:?-{3,}.{0,30}",
    "a link left as text": r"\[[^\]\n]*\]\([^)\s]*\)",
    "a code fence left as text": r".{0,30}```.{0,30}",
    "TeX left untypeset": r".{0,30}(\$\$|\\\(|\\\[).{0,30}",
}
"""What a page's rendered text (code and typeset math left out) must not contain: name -> pattern."""

# Runs in the check page: loads each page of the site in turn into an iframe, waits for its images
# and for MathJax's first typesetting, and posts what it saw back to the test's server as JSON.
CHECK_SCRIPT = """
async function seen(url) {
  const frame = document.createElement("iframe");
  frame.style.width = "1280px"; frame.style.height = "900px";
  const loaded = new Promise(resolve => frame.onload = resolve);
  frame.src = url; document.body.appendChild(frame);
  await loaded;
  const win = frame.contentWindow, doc = frame.contentDocument;
  if (win.MathJax && win.MathJax.startup && win.MathJax.startup.promise) await win.MathJax.startup.promise;
  await Promise.all([...doc.images].map(img => img.complete ? null : new Promise(r => img.onload = img.onerror = r)));
  const article = doc.querySelector("article").cloneNode(true);
  article.querySelectorAll("pre, code, script, style, mjx-container, .headerlink").forEach(e => e.remove());
  const rows = [...doc.querySelectorAll("article table")].flatMap(table => [...table.querySelectorAll("tbody tr")]
    .map(row => [...row.cells].map(cell => cell.textContent.trim()))
    .filter(cells => cells.length > 1 && cells[0] && cells.slice(1).every(text => !text)));
  const foreign = [...doc.querySelectorAll("script[src], link[href], img[src], iframe[src]")]
    .map(e => e.src || e.href).filter(u => u && new URL(u).origin !== location.origin);
  const result = {
    url, text: article.textContent, one_cell_rows: rows.map(cells => cells[0]),
    broken_images: [...doc.images].filter(img => !(img.naturalWidth > 0)).map(img => img.getAttribute("src")),
    equations: doc.querySelectorAll("article .arithmatex").length,
    typeset: doc.querySelectorAll("article .arithmatex mjx-container").length,
    foreign,
  };
  frame.remove();
  return result;
}
(async () => {
  const results = [];
  for (const url of PAGES) results.push(await seen(url).catch(error => ({url, error: String(error)})));
  await fetch(RESULTS, {method: "POST", body: JSON.stringify(results)});
})();
"""


@dataclass
class Build:
    site: Path
    returncode: int
    stderr: str


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    """`make docs` once for this module's tests."""
    site = tmp_path_factory.mktemp("docs") / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    return Build(site, result.returncode, result.stderr)


def test_the_site_builds_strict(build):
    """`make docs`: no broken link, anchor or reference, offline."""
    assert build.returncode == 0, build.stderr[-3000:]
    assert "WARNING" not in build.stderr, build.stderr
    assert "fonts.googleapis" not in (build.site / "index.html").read_text()


@dataclass
class Server:
    url: str
    requests: list[tuple[str, int]]
    results: list[dict]
    posted: threading.Event


@pytest.fixture(scope="module")
def server(build: Build) -> Iterator[Server]:
    """The built site on 127.0.0.1, plus the check page and the address it posts its results to;
    every request for a file of the site is kept with its status."""
    assert build.returncode == 0, build.stderr[-3000:]
    pages = sorted(
        "/" + str(p.parent.relative_to(build.site)).removeprefix(".") for p in build.site.rglob("index.html")
    )
    pages = [page if page.endswith("/") else page + "/" for page in pages]
    script = f"const PAGES = {json.dumps(pages)}, RESULTS = {json.dumps(RESULTS)};{CHECK_SCRIPT}"
    check_page = (
        f'<html><head><link rel="icon" href="data:,"></head><body><script>{script}</script></body></html>'.encode()
    )
    served = Server("", [], [], threading.Event())

    class Handler(SimpleHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != CHECK_PAGE:
                return super().do_GET()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(check_page)

        def do_POST(self) -> None:
            served.results.extend(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()
            served.posted.set()

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            if self.path not in (CHECK_PAGE, RESULTS):
                served.requests.append((self.path, int(code)))

        def log_message(self, *args) -> None:
            pass

    class QuietServer(ThreadingHTTPServer):
        def handle_error(self, request, client_address) -> None:
            pass  # a connection the browser dropped when it was stopped: a failed request shows in `requests`

    httpd = QuietServer(("127.0.0.1", 0), partial(Handler, directory=str(build.site)))
    served.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield served
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def rendered(server: Server, tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """What Chromium shows of every page of the site: headless, a fresh profile, no host but
    127.0.0.1 reachable; stopped once the check page has posted its results."""
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium')}",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        server.url + CHECK_PAGE,
    ]
    browser = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        posted = server.posted.wait(timeout=180)
    finally:
        os.killpg(browser.pid, signal.SIGKILL)
        _, errors = browser.communicate()
    assert posted, (
        f"the check page posted no results in 180 s (chromium's exit {browser.returncode}): {errors.decode()[-2000:]}"
    )
    failed = [f"{page['url']}: {page['error']}" for page in server.results if "error" in page]
    assert not failed, failed
    return server.results


@needs_chromium
def test_every_page_renders_its_markdown(rendered):
    assert len(rendered) > 20
    problems = [
        f"{page['url']}: {name}: {match.group(0).strip()!r}"
        for page in rendered
        for name, pattern in LITERAL_MARKDOWN.items()
        for match in re.finditer(pattern, page["text"])
    ]
    problems += [
        f"{page['url']}: a paragraph inside a table: {text[:80]!r}"
        for page in rendered
        for text in page["one_cell_rows"]
    ]
    assert not problems, "\n".join(problems)


@needs_chromium
def test_every_image_loads(rendered, server):
    broken = [f"{page['url']}: {src}" for page in rendered for src in page["broken_images"]]
    assert not broken, broken
    assert any(path.endswith(".png") for path, _ in server.requests)
    failed = [(path, code) for path, code in server.requests if code not in (200, 304)]
    assert not failed, failed


@needs_chromium
def test_equations_are_typeset_from_the_site_itself(rendered):
    """Every equation typeset by the site's own copy of the renderer; nothing fetched from another host."""
    foreign = sorted({url for page in rendered for url in page["foreign"]})
    assert not foreign, foreign
    untypeset = [
        f"{page['url']}: {page['typeset']} of {page['equations']}"
        for page in rendered
        if page["typeset"] != page["equations"]
    ]
    assert not untypeset, untypeset
    assert sum(page["equations"] for page in rendered) > 20


GUIDES = [
    "README.md",
    "docs/index.md",
    "docs/getting-started",
    "docs/guides",
    "docs/how-it-works",
    "docs/coming-from.md",
]
NAMED_BY_THE_GUIDES = [
    "fastppo.agents.agent.Agent.history",
    "fastppo.agents.agent.Agent.config",
    "fastppo.agents.agent.Agent.run_dir",
    "fastppo.agents.evaluation.EvalResult",
    "fastppo.games.matches.GameResults",
    "fastppo.config.SelfPlayConfig",
]
"""What the guides tell users to use without writing its full path (`agent.history`, the result of
`fastppo.evaluate`...)."""


def is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a name under a module that is no package
        return False


def canonical(name: str) -> str | None:
    """Where the object a dotted path names is defined (``module.qualname`` for a class or a
    function, its owner's path plus the name for an attribute or a dataclass field); None for a
    name that does not exist."""
    parts = name.split(".")
    cut = next((cut for cut in range(len(parts), 0, -1) if is_module(".".join(parts[:cut]))), 0)
    if not cut:
        return None
    value, path = importlib.import_module(".".join(parts[:cut])), ".".join(parts[:cut])
    for attribute in parts[cut:]:
        if not hasattr(value, attribute) and attribute not in getattr(value, "__dataclass_fields__", {}):
            return None
        value = getattr(value, attribute, None)
        defined = callable(value) and hasattr(value, "__qualname__") and hasattr(value, "__module__")
        path = f"{value.__module__}.{value.__qualname__}" if defined else f"{path}.{attribute}"
    return path


def test_the_api_reference_documents_what_the_guides_name(build):
    """Every `fastppo.x.y` the README and the guides name (a module aside) exists and has its entry
    in the Python API reference, as do the things they use without a full path."""
    assert build.returncode == 0, build.stderr[-3000:]
    anchors = re.findall(r'id="(fastppo\.[^"]+)"', (build.site / "reference" / "api" / "index.html").read_text())
    documented = {canonical(anchor) for anchor in anchors} - {None}
    texts = [
        path.read_text()
        for entry in GUIDES
        for path in ([ROOT / entry] if entry.endswith(".md") else sorted((ROOT / entry).glob("*.md")))
    ]
    named = sorted(
        {name.rstrip(".") for text in texts for name in re.findall(r"`(fastppo(?:\.\w+)+)", text)}
        | set(NAMED_BY_THE_GUIDES)
    )
    missing = [name for name in named if not is_module(name) and canonical(name) not in documented]
    assert not missing, f"named by the guides, not in docs/reference/api.md (or not in the code): {missing}"
