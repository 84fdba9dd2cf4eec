#!/usr/bin/env python3
"""The web page of `primekv serve` in a real browser: Debian's chromium, headless, driven over
the DevTools protocol on a pipe (--remote-debugging-pipe; nothing downloaded, no npm).

With the keyboard only, it enters the API key, pastes examples/demo-context.txt (plus a
<script> and an <img onerror> that must be shown, not run) into the document box, and asks the
demo question with primekv at 0.75; the answer must hold 4829163, and the page's kept fraction
of every layer must be the session's kept_per_layer (GET /v1/sessions/{id}/cache) over its
positions. Then the side-by-side mode asks the same question with two presses. Screenshots go
to --out. Exits 77 (ctest's skip) when chromium is absent.

Usage: ui_test.py --primekv BIN --model GGUF --out DIR [--chromium PATH] [--sanitized]
"""
import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import server_test as st
from server_test import Server, check

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUESTION = "What is the special magic number for silver-lantern?"
PREFIX = "The special magic number for silver-lantern is"
# Shown as text in the document and the token view; run, it would set window.__pwned.
HOSTILE = '\n<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">\n'
# A right-to-left override: shown in its token, it must not reverse the label around it.
BIDI = "\u202eevil label\n"


class Browser:
    """chromium --headless with the DevTools protocol on fds 3 (commands) and 4 (replies)."""

    def __init__(self, binary, profile):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def fds():  # the child's fd 3 and 4 are the protocol pipe's ends
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        args = [binary, "--headless=new", "--remote-debugging-pipe", "--no-first-run",
                "--no-default-browser-check", "--disable-gpu", "--disable-extensions",
                "--disable-background-networking", "--disable-sync", "--mute-audio",
                "--user-data-dir=" + profile, "--window-size=1400,1000"]
        if os.geteuid() == 0:
            args.append("--no-sandbox")  # chromium refuses root without it
        self.proc = subprocess.Popen(args + ["about:blank"], preexec_fn=fds, pass_fds=(),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     close_fds=False)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.next_id = 0
        self.buffer = b""
        self.session = None

    def _read_message(self, deadline):
        while b"\0" not in self.buffer:
            if time.time() > deadline:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self.from_chrome, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the protocol pipe")
            self.buffer += chunk
        msg, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method, params=None, timeout=30, session=True):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError("%s: %s" % (method, reply["error"]))
                return reply.get("result", {})

    def open(self, url):
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)
        attached = self.call("Target.attachToTarget",
                             {"targetId": target["targetId"], "flatten": True}, session=False)
        self.session = attached["sessionId"]
        self.call("Page.enable")
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
        self.call("Page.navigate", {"url": url})
        self.wait("document.readyState === 'complete' && !!document.getElementById('lanes')")

    def eval(self, expression):
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError("page: %s" % r["exceptionDetails"])
        return r["result"].get("value")

    def wait(self, expression, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.eval(expression):
                return True
            time.sleep(0.05)
        return False

    def key(self, key, code=None, text=None, shift=False):
        """One key press as a user makes it (keyDown with its text, then keyUp)."""
        vk = {"Enter": 13, "Tab": 9, "ArrowRight": 39, "ArrowLeft": 37}.get(key, 0)
        base = {"key": key, "code": code or key, "windowsVirtualKeyCode": vk,
                "modifiers": 8 if shift else 0}
        down = dict(base, type="keyDown")
        if text:
            down["text"] = text
        self.call("Input.dispatchKeyEvent", down)
        self.call("Input.dispatchKeyEvent", dict(base, type="keyUp"))

    def type(self, text):
        self.call("Input.insertText", {"text": text})  # as a paste or an IME commit

    def focused(self):
        return self.eval("document.activeElement ? document.activeElement.id : ''")

    def tab_to(self, element_id, limit=40):
        for _ in range(limit):
            if self.focused() == element_id:
                return True
            self.key("Tab")
        return self.focused() == element_id

    def screenshot(self, path, full=True):
        params = {"format": "png"}
        if full:
            size = self.eval("[document.documentElement.scrollWidth, "
                             "document.documentElement.scrollHeight]")
            params.update(clip={"x": 0, "y": 0, "width": size[0], "height": size[1],
                                "scale": 1}, captureBeyondViewport=True)
        data = self.call("Page.captureScreenshot", params)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            self.call("Browser.close", session=False, timeout=5)
        except Exception:  # noqa: BLE001 - closing a browser that is already gone
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.to_chrome)
        os.close(self.from_chrome)


def find_chromium(given):
    for name in [given, os.environ.get("PRIMEKV_CHROMIUM"), "chromium", "chromium-browser"]:
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def tab_order(b):
    """Tab from the key field through the page: every control is reached, in the page's order."""
    b.eval("document.getElementById('api-key').focus()")
    seen = [b.focused()]
    for _ in range(30):
        b.key("Tab")
        seen.append(b.focused())
    want = ["api-key", "key-button", "press-a", "ratio-a", "compare", "new-chat", "doc",
            "doc-file", "prefix", "question", "max-tokens", "send"]
    order = [x for x in seen if x in want]
    first = [order.index(x) if x in order else -1 for x in want]
    check(all(i >= 0 for i in first) and first == sorted(first),
          "Tab reaches %s in that order (saw %s)" % (want, order[:len(want) + 2]))


def ask_by_keyboard(b, question):
    """Types the question and presses Enter; waits for the answer or an error."""
    check(b.tab_to("question"), "the question box is reached with Tab")
    b.type(question)
    b.key("Enter", text="\r")
    done = b.wait("['done'].includes(document.getElementById('ask-status').textContent) || "
                  "document.getElementById('ask-status').classList.contains('bad')", 120)
    status = b.eval("document.getElementById('ask-status').textContent")
    check(done and status == "done", "the question is answered (status %r)" % status)


def answers(b):
    return b.eval("[...document.querySelectorAll('.lane')].map(l => { const a = "
                  "l.querySelectorAll('.assistant'); return a.length ? "
                  "a[a.length - 1].dataset.answer : null; })")


def page_fractions(b, lane):
    return b.eval("[...document.querySelectorAll('#lane-%s .per-layer tr[data-layer]')]"
                  ".map(r => [Number(r.dataset.kept), r.cells[2].textContent])" % lane)


def check_fractions(b, s, lane):
    """The page's kept fraction per layer against the session's kept_per_layer from the API."""
    session = b.eval("document.querySelector('#lane-%s .lane-title').textContent"
                     ".match(/session (s[0-9a-f]+)/)[1]" % lane)
    code, cache, text = s.request("GET", "/v1/sessions/%s/cache" % session,
                                  headers={"Authorization": "Bearer alpha"})
    check(code == 200, "GET /v1/sessions/{id}/cache answers 200 (%d)" % code)
    if code != 200:
        return None
    shown = page_fractions(b, lane)
    per_layer = cache["kept_per_layer"]
    total = cache["n_heads"] * cache["n_tokens"]
    want = [[k, "%.1f%%" % (100.0 * k / total)] for k in per_layer]
    check(shown == want and len(want) == cache["n_layers"],
          "lane %s: the page's kept per layer %s equals kept_per_layer %s over %d positions"
          % (lane, shown, per_layer, total))
    check(0 < per_layer[0] < total, "lane %s: compression removed entries (%d of %d kept)"
          % (lane, per_layer[0], total))
    print("     lane %s: %d bytes of cache view, %d tokens" % (lane, len(text), cache["n_tokens"]))
    return cache


def script_shown_not_run(b):
    pwned = b.eval("window.__pwned === undefined ? null : window.__pwned")
    check(pwned is None, "the document's <script> and onerror did not run (%r)" % pwned)
    scripts = b.eval("document.querySelectorAll('script').length")
    imgs = b.eval("document.querySelectorAll('img').length")
    check(scripts == 1 and imgs == 0, "no element was made from the document's text "
          "(%d script, %d img)" % (scripts, imgs))
    shown = b.eval("document.querySelector('#lane-a .doc-view').textContent")
    check("<script>window.__pwned = 1</script>" in shown,
          "the <script> is shown as text in the cache view")


def bidi_label(b):
    """The keep map's label of a token holding U+202E: the label's own words keep their order
    (the token's text is isolated), so 'kept' stays left of 'by'."""
    got = b.eval("""(() => {
      const view = document.querySelector('#lane-a .doc-view');
      const span = [...view.children].find((t) => t.textContent.includes('\\u202e'));
      if (!span) return 'no token holds U+202E';
      span.click();
      const p = document.querySelector('#lane-a .token-map p');
      const walk = document.createTreeWalker(p, NodeFilter.SHOW_TEXT);
      let node = walk.nextNode();
      while (node && !node.data.includes('kept by')) node = walk.nextNode();
      if (!node) return 'no "kept by" in ' + JSON.stringify(p.textContent);
      const at = node.data.indexOf('kept by');
      const left = (a, z) => {
        const r = document.createRange();
        r.setStart(node, a);
        r.setEnd(node, z);
        return r.getBoundingClientRect().left;
      };
      return [left(at, at + 4), left(at + 5, at + 7), p.textContent];
    })()""")
    ok = isinstance(got, list) and got[0] < got[1]
    check(ok, "a token holding U+202E leaves its label in order ('kept' at x %s, 'by' at x %s)"
          % ((got[0], got[1]) if isinstance(got, list) else (got, got)))


def single_lane(b, s, out):
    b.eval("document.getElementById('api-key').focus()")
    b.type("alpha")
    b.key("Enter", text="\r")
    check(b.wait("document.getElementById('press-a').options.length > 0", 30),
          "the key loads the press registry into the picker")
    check(b.focused() == "question", "after the key, focus is on the question (%r)" % b.focused())
    tab_order(b)
    presses = b.eval("[...document.getElementById('press-a').options].map(o => o.value)")
    check("primekv" in presses and "keydiff" in presses and "none" in presses,
          "the picker lists the registry's presses (%d)" % len(presses))
    doc = open(os.path.join(ROOT, "examples", "demo-context.txt")).read() + HOSTILE + BIDI
    check(b.tab_to("doc"), "the document box is reached with Tab")
    b.type(doc)
    check(b.tab_to("prefix"), "the answer prefix is reached with Tab")
    b.type(PREFIX)
    b.eval("document.getElementById('press-a').value = 'primekv';"
           "document.getElementById('ratio-a').value = '0.75'")
    ask_by_keyboard(b, QUESTION)
    got = answers(b)
    check(got and got[0] and "4829163" in got[0], "the answer holds 4829163 (%r)" % got)
    figures = b.eval("document.querySelector('#lane-a .assistant .figures').textContent")
    check(figures and "prefill" in figures and "cached_tokens" in figures,
          "the answer shows its timings and cached_tokens (%r)" % figures)
    check_fractions(b, s, "a")
    script_shown_not_run(b)
    # The keep map of a token, from the keyboard: focus the text, arrow to a token, see its map.
    b.eval("document.querySelector('#lane-a .doc-view').focus()")
    b.key("ArrowRight")
    b.key("ArrowRight")
    token_map = b.eval("document.querySelector('#lane-a .token-map').textContent")
    check(token_map.startswith("token 1 ") and "heads" in token_map,
          "arrow keys show a token's keep map (%r)" % token_map[:60])
    bidi_label(b)
    b.screenshot(os.path.join(out, "ui-chat.png"))


def side_by_side(b, s, out):
    b.eval("document.getElementById('compare').click()")
    b.eval("document.getElementById('press-a').value = 'primekv';"
           "document.getElementById('ratio-a').value = '0.9';"
           "document.getElementById('press-b').value = 'keydiff';"
           "document.getElementById('ratio-b').value = '0.9'")
    ask_by_keyboard(b, QUESTION)
    got = answers(b)
    check(got and len(got) == 2 and all(got), "both presses answered (%r)" % got)
    titles = b.eval("[...document.querySelectorAll('.lane-title')].map(t => t.textContent)")
    check(len(titles) == 2 and titles[0].startswith("primekv at 0.9") and
          titles[1].startswith("keydiff at 0.9"), "the lanes are primekv and keydiff (%r)" % titles)
    a = check_fractions(b, s, "a")
    c = check_fractions(b, s, "b")
    if a and c:
        check(a["kept"] != c["kept"], "the two presses kept different entries")
    b.screenshot(os.path.join(out, "ui-side-by-side.png"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--primekv", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True, help="folder for the screenshots")
    ap.add_argument("--chromium", default="")
    ap.add_argument("--sanitized", action="store_true")
    st.ARGS = ap.parse_args()
    chromium = find_chromium(st.ARGS.chromium)
    if not chromium:
        print("SKIPPED: chromium not found (bash scripts/setup.sh installs Debian's chromium; "
              "or set PRIMEKV_CHROMIUM)")
        return 77
    os.makedirs(st.ARGS.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="primekv-ui-test-")
    s = b = None
    t0 = time.time()
    try:
        s = Server(work, "--api-key", "alpha", "--api-key", "beta")
        b = Browser(chromium, os.path.join(work, "profile"))
        b.open("http://127.0.0.1:%d/" % s.port)
        single_lane(b, s, st.ARGS.out)
        side_by_side(b, s, st.ARGS.out)
    finally:
        if b:
            b.close()
        if s:
            s.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("screenshots in %s (%.1f s)" % (st.ARGS.out, time.time() - t0))
    if st.FAILS:
        print("%d check(s) failed" % len(st.FAILS))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
