"""The blind A/B review page: one self-contained HTML file with an inline script (no network, no server).

The page shows one pair at a time, left and right, with its position ("pair 3 of 12") and how many are
judged. It holds only opaque pair ids (``r01`` ...), the review id and re-encoded pixels: never which side
is which, no directory or file name, no metric value, no reason a pair was chosen (the key, written
apart by ``diffbench review``, holds those).

Keys: ``ArrowLeft`` or ``1`` left better · ``2`` or ``Space`` same · ``ArrowRight`` or ``3`` right better ·
``Backspace`` back one pair and clear its verdict (undo) · ``S`` save. Buttons do the same. Judging moves
to the next pair; after the last one the page says all are judged.

Saving downloads ``verdicts-<review id>.json`` (a ``Blob`` and an ``<a download>``)::

    {"kind": "diffbench-review-verdicts", "schema_version": 1, "review_id": "...", "complete": true,
     "n_pairs": 12, "saved_at": "2026-12-01T15:00:00.000Z",
     "verdicts": [{"pair": "r01", "verdict": "left" | "same" | "right", "time_ms": 1834.2}, ...]}

``time_ms`` is the time the pair was on screen before its verdict (summed over visits, undo included),
from ``performance.now()``. Only judged pairs are listed; ``review --score`` refuses an incomplete file.
"""

from __future__ import annotations

import base64
import json
from html import escape

from diffbench import __version__
from diffbench.quality.review import PageImages

DISPLAY_PX = 480  # small images are shown upscaled by an integer factor up to about this size (pixelated)

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2430;background:#f6f7f9}
header{background:#1d2430;color:#fff;padding:12px 24px;display:flex;justify-content:space-between;align-items:center}
header h1{margin:0;font-size:19px}
#progress{font-size:15px;font-variant-numeric:tabular-nums}
main{padding:12px 24px}
.help{color:#5b6472;font-size:13px;margin:4px 0 12px}
.help kbd{background:#fff;border:1px solid #c4cad3;border-radius:3px;padding:0 5px;font-size:12px}
.pair{display:none}
.pair.current{display:block}
.sides{display:flex;gap:24px;align-items:flex-start}
.side{text-align:center;border:3px solid transparent;border-radius:6px;padding:6px;background:#fff}
.side.chosen{border-color:#2c7be5}
.pair.same-chosen .side{border-color:#8a93a0}
.side h2{font-size:15px;margin:0 0 6px}
.side img{display:block;image-rendering:pixelated;background:#ddd}
.caption{color:#5b6472;font-size:12px;margin:8px 0;max-width:1000px}
.buttons{margin:12px 0;display:flex;gap:8px;flex-wrap:wrap}
button{font-size:14px;padding:6px 14px;border:1px solid #8aa4c8;border-radius:4px;background:#fff;cursor:pointer}
button.save{background:#1d4f91;color:#fff;border-color:#1d4f91}
#done{display:none;padding:18px;background:#fff;border:1px solid #dde1e7;border-radius:6px;margin:12px 0}
#done.show{display:block}
#status{font-size:13px;color:#1d6b2c;min-height:18px}
footer{color:#8a93a0;font-size:11px;padding:0 24px 24px}
"""

SCRIPT = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("review-data").textContent);
  var ids = data.pairs, n = ids.length;
  var verdicts = {}, spent = {};
  var i = 0, shownAt = performance.now();
  var progress = document.getElementById("progress"), done = document.getElementById("done");
  var status = document.getElementById("status");
  function el(id) { return document.querySelector('.pair[data-pair="' + id + '"]'); }
  function judged() { return Object.keys(verdicts).length; }
  function account() {
    if (i < n) { var id = ids[i]; spent[id] = (spent[id] || 0) + (performance.now() - shownAt); }
  }
  function mark(id) {
    var p = el(id), v = verdicts[id];
    p.querySelectorAll(".side").forEach(function (s) {
      s.classList.toggle("chosen", v === s.getAttribute("data-side"));
    });
    p.classList.toggle("same-chosen", v === "same");
  }
  function show(k) {
    account();
    i = Math.max(0, Math.min(k, n));
    ids.forEach(function (id, j) { el(id).classList.toggle("current", j === i); });
    done.classList.toggle("show", i === n);
    if (i < n) { mark(ids[i]); }
    progress.textContent = (i < n ? "pair " + (i + 1) + " of " + n : "all " + n + " shown") +
      " \u00b7 judged " + judged() + "/" + n;
    document.body.setAttribute("data-index", String(i));
    document.body.setAttribute("data-judged", String(judged()));
    shownAt = performance.now();
  }
  // The verdicts so far are kept in this browser's localStorage (per review id), so a reload or a closed
  // tab does not lose the work; the saved JSON file stays the only thing --score reads.
  var storeKey = "diffbench-review-" + data.review_id;
  function persist() {
    try { localStorage.setItem(storeKey, JSON.stringify({verdicts: verdicts, spent: spent, i: i})); }
    catch (err) { status.textContent = "this browser does not keep verdicts across a reload: save often"; }
  }
  function restore() {
    var kept = null;
    try { kept = JSON.parse(localStorage.getItem(storeKey) || "null"); } catch (err) { kept = null; }
    if (!kept || typeof kept.verdicts !== "object") { return 0; }
    ids.forEach(function (id) {
      var v = kept.verdicts[id];
      if (v === "left" || v === "same" || v === "right") { verdicts[id] = v; }
      if (typeof kept.spent[id] === "number" && kept.spent[id] >= 0) { spent[id] = kept.spent[id]; }
    });
    var k = judged();
    if (k > 0) {
      status.textContent = "restored " + k + " verdict(s) kept by this browser for review " + data.review_id;
    }
    return Math.max(0, Math.min(typeof kept.i === "number" ? kept.i : k, n));
  }
  function judge(v) {
    if (i >= n) { return; }
    verdicts[ids[i]] = v;
    mark(ids[i]);
    show(i + 1);
    persist();
  }
  function back() {
    if (i === 0) { return; }
    var k = i - 1;
    delete verdicts[ids[k]];
    show(k);
    persist();
  }
  function save() {
    account();
    shownAt = performance.now();
    var rows = ids.filter(function (id) { return id in verdicts; }).map(function (id) {
      return {pair: id, verdict: verdicts[id], time_ms: Math.round((spent[id] || 0) * 10) / 10};
    });
    var out = {kind: "diffbench-review-verdicts", schema_version: 1, review_id: data.review_id,
               complete: rows.length === n, n_pairs: n, saved_at: new Date().toISOString(), verdicts: rows};
    var blob = new Blob([JSON.stringify(out, null, 2)], {type: "application/json"});
    var a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = "verdicts-" + data.review_id + ".json";
    document.body.appendChild(a);
    a.click();
    setTimeout(function () { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
    status.textContent = "saved " + rows.length + " of " + n + " verdicts as " + a.download +
      (rows.length < n ? " (incomplete: finish and save again)" : "");
    document.body.setAttribute("data-saved", String(rows.length));
  }
  var keys = {"ArrowLeft": "left", "1": "left", "2": "same", " ": "same", "ArrowRight": "right", "3": "right"};
  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey) { return; }
    if (e.key in keys) { e.preventDefault(); judge(keys[e.key]); }
    else if (e.key === "Backspace") { e.preventDefault(); back(); }
    else if (e.key === "s" || e.key === "S") { e.preventDefault(); save(); }
  });
  document.querySelectorAll("button[data-verdict]").forEach(function (b) {
    b.addEventListener("click", function () { judge(b.getAttribute("data-verdict")); b.blur(); });
  });
  document.getElementById("undo").addEventListener("click", function (e) { back(); e.target.blur(); });
  document.querySelectorAll("button.save").forEach(function (b) {
    b.addEventListener("click", function () { save(); b.blur(); });
  });
  var start = restore();
  show(start);
  if (start > 0) { ids.forEach(function (id) { if (id in verdicts) { mark(id); } }); show(start); }
})();
"""


def _data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _display(w: int, h: int) -> tuple[int, int]:
    f = max(1, DISPLAY_PX // max(w, h))
    return w * f, h * f


def _pair(p: PageImages) -> str:
    dw, dh = _display(p.width, p.height)
    sides = "".join(
        f'<div class="side" data-side="{side}"><h2>{label}</h2>'
        f'<img alt="{label} image" width="{dw}" height="{dh}" src="{_data_url(png)}"></div>'
        for side, label, png in (("left", "Left", p.left_png), ("right", "Right", p.right_png)))
    cap = f'<div class="caption">{escape(p.caption)}</div>' if p.caption else ""
    return f'<div class="pair" data-pair="{escape(p.id)}"><div class="sides">{sides}</div>{cap}</div>'


def render_review_page(review_id: str, pairs: list[PageImages], title: str = "Blind A/B review") -> str:
    """The page as text (UTF-8).

    Args:
        review_id: the key's review id (written into every verdict file).
        pairs: page order, each already placed left/right (:func:`diffbench.quality.review.page_images`).
        title: shown in the header; must not name a directory (the caller passes a neutral title).
    """
    if not pairs:
        raise ValueError("a review page needs at least one pair")
    data = json.dumps({"review_id": review_id, "pairs": [p.id for p in pairs]}).replace("</", "<\\/")
    help_ = ("Which image is better? The sides are shuffled for every pair. "
             "<kbd>&larr;</kbd>/<kbd>1</kbd> left better · <kbd>2</kbd>/<kbd>Space</kbd> same · "
             "<kbd>&rarr;</kbd>/<kbd>3</kbd> right better · <kbd>Backspace</kbd> back (undo) · "
             "<kbd>S</kbd> save verdicts")
    buttons = ('<div class="buttons"><button data-verdict="left">&larr; left better</button>'
               '<button data-verdict="same">same</button><button data-verdict="right">right better &rarr;</button>'
               '<button id="undo">&#8630; back</button><button class="save">save verdicts</button></div>')
    body = "".join(_pair(p) for p in pairs)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
            "<link rel=\"icon\" href=\"data:,\">"
            f"<title>{escape(title)}</title><style>{CSS}</style></head><body data-index=\"0\" data-judged=\"0\">"
            f"<header><h1>{escape(title)}</h1><div id=\"progress\"></div></header><main>"
            f"<p class=\"help\">{help_}</p>{buttons}<div id=\"status\"></div>"
            f"<div id=\"pairs\">{body}</div>"
            "<div id=\"done\"><b>All pairs are judged.</b> Press <kbd>S</kbd> or "
            "<button class=\"save\">save verdicts</button> to download the verdict file, then send it to whoever "
            "runs <code>diffbench review --score</code>. <kbd>Backspace</kbd> goes back.</div></main>"
            f"<footer>diffbench {escape(__version__)} · review {escape(review_id)} · self-contained page: no network, "
            "no server; the verdicts are saved by your browser as a download.</footer>"
            f"<script type=\"application/json\" id=\"review-data\">{data}</script>"
            f"<script>{SCRIPT}</script></body></html>\n")
