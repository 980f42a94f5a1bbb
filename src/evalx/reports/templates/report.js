/* evalx report: renders the matrix and cell details from the embedded JSON.
 * Every string from the run is untrusted: it only ever reaches the page through
 * textContent / createTextNode, never innerHTML. Only the rows in view are in
 * the DOM, so 10,000 cells scroll and filter smoothly. A run past the cap
 * embeds a sample (D.sample says how many of how many): the counts say so. */
"use strict";
(function () {
  var t0 = performance.now();
  var D = JSON.parse(document.getElementById("evalx-data").textContent);
  var T = D.targets, C = D.cases, X = D.cells, S = D.sample || null;
  var ROW_H = 44, OVERSCAN = 12, SHOW = 4000;
  var LABEL = { pass: "pass", fail: "fail", error: "error", skipped: "skip" };
  var RANK = { error: 0, fail: 1, flaky: 2, skipped: 3, pass: 4 };

  function $(id) { return document.getElementById(id); }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function add(parent) {
    for (var i = 1; i < arguments.length; i++) if (arguments[i]) parent.appendChild(arguments[i]);
    return parent;
  }
  function fmtMs(v) {
    if (v === undefined || v === null) return "—";
    if (v < 10) return v.toFixed(1) + "ms";
    if (v < 1000) return Math.round(v) + "ms";
    if (v < 60000) return (v / 1000).toFixed(2) + "s";
    return Math.floor(v / 60000) + "m" + ((v % 60000) / 1000).toFixed(1) + "s";
  }
  // evalx.figures.usd's rule: cents from $100, four decimals from a cent, three significant digits under a cent
  function fmtUsd(v) {
    if (v === undefined || v === null) return "—";
    var size = Math.abs(v), sign = v < 0 ? "-" : "";
    if (size >= 100) return sign + "$" + size.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
    if (size >= 0.01 || size === 0) return sign + "$" + size.toFixed(4);
    if (size < 1e-12) return sign + "$" + size.toExponential(2);
    var text = size.toFixed(2 - Math.floor(Math.log10(size)));
    return sign + "$" + (text.indexOf("0.01") === 0 ? size.toFixed(4) : text);
  }
  function fmtInt(v) { return (v || 0).toLocaleString("en-US"); }

  // ---------------------------------------------------------------- rows
  var rows = C.map(function (c, i) { return { i: i, cells: T.map(function () { return []; }) }; });
  X.forEach(function (x, k) { rows[x.c].cells[x.t].push(k); });

  var changed = null;  // "target\u001fdataset\u001fcase" -> "failing" | "passing"
  if (D.changes) {
    changed = {};
    ["failing", "passing"].forEach(function (kind) {
      (D.changes[kind] || []).forEach(function (ch) { changed[(ch[0] || "*") + "\u001f" + (ch[1] || "*") + "\u001f" + ch[2]] = kind; });
    });
  }
  function changeOf(row, t) {
    if (!changed) return null;
    var c = C[row.i], tid = T[t];
    return changed[tid + "\u001f" + c.d + "\u001f" + c.id] || changed["*\u001f" + c.d + "\u001f" + c.id] ||
      changed[tid + "\u001f*\u001f" + c.id] || changed["*\u001f*\u001f" + c.id] || null;
  }

  function aggregate(list) {
    if (!list.length) return null;
    var a = { n: list.length, pass: 0, fail: 0, error: 0, skipped: 0, ms: null, cut: 0 };
    list.forEach(function (k) {
      var x = X[k];
      a[x.s] += 1;
      if (x.tr) a.cut += 1;
      if (x.ms !== undefined && (a.ms === null || x.ms > a.ms)) a.ms = x.ms;
    });
    var decided = a.n - a.skipped;
    a.flaky = a.pass > 0 && a.pass < decided;
    a.status = a.n === 1 ? X[list[0]].s : a.flaky ? "flaky" : a.error ? "error" : a.fail ? "fail" : a.pass ? "pass" : "skipped";
    return a;
  }
  rows.forEach(function (row) {
    row.agg = row.cells.map(aggregate);
    row.change = T.map(function (_, t) { return row.cells[t].length ? changeOf(row, t) : null; });
    var worst = 0, slow = 0;
    row.agg.forEach(function (a) {
      if (!a) return;
      worst += a.fail + a.error;
      if (a.ms !== null && a.ms > slow) slow = a.ms;
    });
    row.worst = worst; row.slow = slow;
  });

  // ---------------------------------------------------------------- filters
  var F = { q: "", status: "", target: "", category: "", difficulty: "", tag: "", flaky: false, changed: false, sort: "" };
  function options(select, values) {
    values.forEach(function (v) { var o = el("option", null, v); o.value = v; select.appendChild(o); });
    if (!values.length) select.parentNode.hidden = true;
  }
  function distinct(pick) {
    var seen = {}, out = [];
    C.forEach(function (c) { (pick(c) || []).forEach(function (v) { if (v !== undefined && v !== null && !seen[v]) { seen[v] = 1; out.push(v); } }); });
    return out;
  }
  options($("f-target"), T.length > 1 ? T : []);
  options($("f-category"), distinct(function (c) { return [c.cat]; }));
  options($("f-difficulty"), distinct(function (c) { return [c.dif]; }));
  options($("f-tag"), distinct(function (c) { return c.tags; }).sort());
  if (!D.repeats) $("l-flaky").hidden = true;
  if (S) $("mx-empty").textContent = "No embedded case matches these filters: this report holds a sample, results.jsonl every cell.";
  if (!changed) $("l-changed").hidden = true;
  var sortSel = $("f-sort");
  if (T.length > 1) T.forEach(function (t, i) { var o = el("option", null, "worst on " + t); o.value = "t" + i; sortSel.appendChild(o); });

  var hay = null;  // lower-cased search text per row, built on the first search
  function haystack(row) {
    if (!hay) {
      hay = rows.map(function (r) {
        var c = C[r.i], parts = [c.d, c.id, c.cat || "", c.dif || "", (c.tags || []).join(" "), c["in"] || "", c.ex || "", c.ds || "", c.nt || ""];
        r.cells.forEach(function (list) { list.forEach(function (k) { var x = X[k]; parts.push((x.x || "").slice(0, 5000), x.e || ""); }); });
        return parts.join("\n").toLowerCase();
      });
    }
    return hay[row.i];
  }

  function columns() {
    if (F.target === "") return T.map(function (_, i) { return i; });
    return [T.indexOf(F.target)];
  }
  var visible = rows;
  function applyFilters() {
    var started = performance.now();
    var cols = columns(), q = F.q.trim().toLowerCase();
    visible = rows.filter(function (row) {
      var c = C[row.i];
      if (F.category && c.cat !== F.category) return false;
      if (F.difficulty && c.dif !== F.difficulty) return false;
      if (F.tag && (c.tags || []).indexOf(F.tag) < 0) return false;
      var any = false, st = false, fl = false, ch = false;
      for (var j = 0; j < cols.length; j++) {
        var a = row.agg[cols[j]];
        if (!a) continue;
        any = true;
        if (!F.status || (F.status === "bad" ? a.fail + a.error > 0 : a[F.status] > 0)) st = true;
        if (a.flaky) fl = true;
        if (row.change[cols[j]]) ch = true;
      }
      if (!any || !st) return false;
      if (F.flaky && !fl) return false;
      if (F.changed && !ch) return false;
      if (q && haystack(row).indexOf(q) < 0) return false;
      return true;
    });
    sortRows(cols);
    buildHead(cols);
    var nCells = 0;
    visible.forEach(function (row) { cols.forEach(function (t) { nCells += row.cells[t].length; }); });
    // past the cap the rows are a sample (D.sample): never let a count read as the whole run's
    var of = S ? " (a sample of the run's " + fmtInt(S.cells) + " cells: see the note at the top)" : "";
    $("mx-count").textContent = (visible.length === rows.length && cols.length === T.length)
      ? fmtInt(rows.length) + " cases × " + fmtInt(T.length) + " target" + (T.length === 1 ? "" : "s") + " · " + fmtInt(X.length) + " cells" + (S ? " embedded" : "") + of
      : "showing " + fmtInt(visible.length) + " of " + fmtInt(rows.length) + (S ? " embedded" : "") + " cases · " + fmtInt(nCells) + " cells" + of;
    $("mx-empty").hidden = visible.length > 0;
    $("mx-scroll").scrollTop = 0;
    renderRows(true);
    window.__evalxFilterMs = performance.now() - started;
  }

  function sortRows(cols) {
    var s = F.sort, key;
    if (!s) { visible.sort(function (a, b) { return a.i - b.i; }); return; }
    if (s === "id") key = function (r) { return C[r.i].id; };
    else if (s === "category") key = function (r) { return (C[r.i].cat || "") + "\u0000" + C[r.i].id; };
    if (key) { visible.sort(function (a, b) { var x = key(a), y = key(b); return x < y ? -1 : x > y ? 1 : a.i - b.i; }); return; }
    var num;
    if (s === "worst") num = function (r) { return -r.worst; };
    else if (s === "slowest") num = function (r) { return -r.slow; };
    else {
      var t = +s.slice(1);
      num = function (r) { var a = r.agg[t]; return a ? RANK[a.status] * 1e6 + a.pass : 1e9; };
    }
    visible.sort(function (a, b) { return num(a) - num(b) || a.i - b.i; });
  }

  // ---------------------------------------------------------------- matrix
  var head = $("mx-head"), body = $("mx-body"), scroller = $("mx-scroll"), table = $("matrix");
  var headKey = null;
  function buildHead(cols) {
    var k = cols.join(",") + "|" + F.sort;
    if (k === headKey) return;
    headKey = k;
    while (head.children.length > 1) head.removeChild(head.lastChild);
    head.firstChild.className = "case-col" + (F.sort === "id" ? " sorted" : "");
    cols.forEach(function (t) {
      var th = el("th", F.sort === "t" + t ? "sorted" : null);
      var sw = el("span", "swatch"); sw.style.background = D.colors[t];
      // the base target, then each param=value of a variant on its own line, every character kept
      var id = T[t], cut = id.indexOf("[");
      add(th, add(el("span", "th-part"), sw, document.createTextNode(cut > 0 ? id.slice(0, cut) : id)));
      if (cut > 0) {
        var params = id.slice(cut + 1).split(",");
        params.forEach(function (p, i) {
          add(th, el("span", "th-part th-param", (i === 0 ? "[" : "") + p + (i < params.length - 1 ? "," : "")));
        });
      }
      th.title = T[t] + " (click: most failing first)";
      th.dataset.t = t;
      head.appendChild(th);
    });
    table.style.minWidth = (320 + cols.length * 128) + "px";
  }
  head.addEventListener("click", function (ev) {
    var th = ev.target.closest("th");
    if (!th) return;
    F.sort = th.dataset.t !== undefined ? (F.sort === "t" + th.dataset.t ? "" : "t" + th.dataset.t) : (F.sort === "id" ? "" : "id");
    sortSel.value = F.sort;
    applyFilters();
  });

  var lastRange = "";
  function spacer(h) { var tr = el("tr", "spacer"); tr.style.height = h + "px"; tr.setAttribute("aria-hidden", "true"); return tr; }
  function renderRows(force) {
    var top = scroller.scrollTop, h = scroller.clientHeight || 600;
    var start = Math.max(0, Math.floor(top / ROW_H) - OVERSCAN);
    var end = Math.min(visible.length, Math.ceil((top + h) / ROW_H) + OVERSCAN);
    var range = start + ":" + end;
    if (!force && range === lastRange) return;
    lastRange = range;
    var cols = columns(), frag = document.createDocumentFragment();
    if (start > 0) frag.appendChild(spacer(start * ROW_H));
    for (var i = start; i < end; i++) frag.appendChild(rowEl(visible[i], cols));
    if (end < visible.length) frag.appendChild(spacer((visible.length - end) * ROW_H));
    body.replaceChildren(frag);
  }
  var ticking = false;
  scroller.addEventListener("scroll", function () {
    if (ticking) return;
    ticking = true;
    requestAnimationFrame(function () { ticking = false; renderRows(false); });
  });
  window.addEventListener("resize", function () { renderRows(true); });

  function rowEl(row, cols) {
    var c = C[row.i], tr = el("tr", "row");
    tr.dataset.row = row.i;
    var meta = [c.d, c.cat, c.dif].filter(Boolean).join(" · ") + ((c.tags && c.tags.length) ? " · #" + c.tags.join(" #") : "");
    var td = add(el("td", "case-col"), el("div", "cid", c.id), el("div", "cmeta", meta));
    td.title = c.id + (c["in"] ? "\n\n" + c["in"].slice(0, 300) : "");
    tr.appendChild(td);
    cols.forEach(function (t) {
      var a = row.agg[t], cell = el("td", "cell");
      if (!a) { cell.className = "cell na"; cell.textContent = "—"; cell.title = "not run for this target"; tr.appendChild(cell); return; }
      var chip = el("button", "chip " + a.status);
      chip.type = "button";
      chip.dataset.row = row.i; chip.dataset.t = t;
      var decided = a.n - a.skipped;
      var label = a.n === 1 ? LABEL[a.status] : decided ? a.pass + "/" + decided : "skip ×" + a.n;
      var left = el("span", null, label);
      var ch = row.change[t];
      if (ch) { var nw = el("span", "new"); nw.appendChild(el("span", null, ch === "failing" ? "new fail" : "fixed")); left.appendChild(document.createTextNode(" ")); left.appendChild(nw); }
      if (a.cut) { left.appendChild(document.createTextNode(" ")); left.appendChild(el("span", "cut", "cut off")); }
      add(chip, left, el("span", "lat", fmtMs(a.ms)));
      chip.title = T[t] + ": " + (a.n > 1 ? a.pass + " of " + a.n + " runs passed" : a.status) + (ch ? " (newly " + ch + ")" : "") +
        (a.cut ? " (" + (a.n > 1 ? a.cut + " answers" : "answer") + " cut off at the token limit)" : "");
      cell.appendChild(chip);
      tr.appendChild(cell);
    });
    return tr;
  }
  body.addEventListener("click", function (ev) {
    var chip = ev.target.closest("button.chip");
    if (chip) openDetail(+chip.dataset.row, +chip.dataset.t, 0);
  });

  // ---------------------------------------------------------------- detail
  var drawer = $("detail"), scrim = $("scrim"), lastFocus = null;
  function closeDetail() {
    drawer.hidden = true; scrim.hidden = true;
    if (lastFocus) lastFocus.focus();
  }
  $("d-close").addEventListener("click", closeDetail);
  scrim.addEventListener("click", closeDetail);
  document.addEventListener("keydown", function (ev) { if (ev.key === "Escape" && !drawer.hidden) closeDetail(); });

  function longText(text, full, cls) {
    var wrap = el("div"), pre = el("pre", "text" + (cls ? " " + cls : ""));
    pre.dir = "auto";
    var cut = SHOW;
    if (text.length > SHOW) {
      var code = text.charCodeAt(cut - 1);
      if (code >= 0xd800 && code <= 0xdbff) cut -= 1;  // never split a surrogate pair
      pre.textContent = text.slice(0, cut) + "…";
    } else pre.textContent = text;
    wrap.appendChild(pre);
    if (text.length > SHOW || full) {
      var note = el("div", "clip");
      if (text.length > SHOW) {
        var btn = el("button", "link", "show all (" + fmtInt(text.length) + " characters)");
        btn.type = "button";
        btn.addEventListener("click", function () { pre.textContent = text; btn.remove(); });
        note.appendChild(btn);
      }
      if (full) note.appendChild(el("span", null, "clipped in this report: " + fmtInt(full) + " characters in all, the full text is in results.jsonl"));
      wrap.appendChild(note);
    }
    return wrap;
  }
  // a case's images and documents: [kind, name, media type, size, thumbnail data: URL or ""]
  function attachments(list) {
    var ul = el("ul", "attachments");
    list.forEach(function (a) {
      var li = el("li", "attachment");
      var thumb = typeof a[4] === "string" && /^data:image\/(png|jpeg|gif|webp);base64,[A-Za-z0-9+\/=]+$/.test(a[4]) ? a[4] : "";
      if (thumb) {
        var img = document.createElement("img");
        img.className = "thumb";
        img.alt = a[1];
        img.setAttribute("src", thumb);  // a data: URL of an image, checked above: nothing it shows can fetch (the CSP: img-src data:)
        li.appendChild(img);
      }
      var size = typeof a[3] === "number" ? (a[3] >= 1024 ? (a[3] / 1024).toFixed(1) + " KiB" : a[3] + " bytes") : "";
      li.appendChild(el("span", "att-name", a[0] + ": " + a[1]));
      li.appendChild(el("span", "muted", " " + [a[2], size].filter(Boolean).join(", ") + (a[0] === "image" && !thumb ? " (not embedded)" : "")));
      ul.appendChild(li);
    });
    return ul;
  }

  // a traced cell's spans: one row each, indented by depth, a bar placed on the trace's time line
  function waterfall(x) {
    var wrap = el("div", "waterfall");
    if (x.tid) wrap.appendChild(el("p", "muted", "trace " + x.tid));
    if (!x.tw.length) {
      wrap.appendChild(el("p", "muted", "no spans arrived for this cell"));
      return wrap;
    }
    var end = 0;
    x.tw.forEach(function (r) { end = Math.max(end, r[1] + r[2]); });
    var tbl = el("table", "spans"), tb = el("tbody");
    x.tw.forEach(function (r) {
      var name = el("td", "sname", r[0]);
      name.style.paddingLeft = (4 + Math.min(r[4], 12) * 14) + "px";
      var bar = el("div", "sbar" + (r[3] === 2 ? " bad" : ""));
      bar.style.marginLeft = (end ? (r[1] / end) * 100 : 0).toFixed(2) + "%";
      bar.style.width = Math.max(end ? (r[2] / end) * 100 : 100, 0.5).toFixed(2) + "%";
      add(tb, add(el("tr", r[3] === 2 ? "serr" : null),
        name,
        add(el("td", "stime"), bar),
        el("td", "sdur", fmtMs(r[2])),
        el("td", "sstatus " + (r[3] === 2 ? "bad" : ""), r[3] === 2 ? "error" : r[3] === 1 ? "ok" : ""),
        el("td", "sattrs", r[5])));
    });
    tbl.appendChild(tb);
    wrap.appendChild(tbl);
    if (x.twN) wrap.appendChild(el("p", "muted", "… " + (x.twN - x.tw.length) + " more spans in results.jsonl"));
    return wrap;
  }
  function section(title, content) {
    var s = el("section");
    add(s, el("h3", null, title), content);
    return s;
  }
  // a request or a tool's arguments arrive as compact JSON: indent it to show it (a clipped value stays as it is)
  function pretty(text) {
    var c = text.charAt(0);
    if (c !== "{" && c !== "[") return text;
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch (e) { return text; }
  }
  function collapsed(title, content, open) {
    var d = el("details");
    if (open) d.open = true;
    add(d, el("summary", null, title), content);
    return d;
  }
  function facts(list) {
    var dl = el("dl", "facts");
    list.forEach(function (f) { if (f[1] !== null && f[1] !== undefined) add(dl, add(el("div"), el("dt", null, f[0]), el("dd", null, f[1]))); });
    return dl;
  }

  function assertionLine(a) {
    var icon = a[0] === true ? ["pass", "✓"] : a[0] === false ? ["fail", "✗"] : ["none", "?"];
    var li = add(el("li", "check " + icon[0]), el("span", "icon " + icon[0], icon[1]), el("span", "kind", a[1] + (a[2] ? " (" + a[2] + ")" : "")));
    if (a[4]) li.appendChild(el("span", "reason", a[4]));
    if (a[6]) li.appendChild(el("span", "reason bad", "assertion error: " + a[6]));
    return li;
  }
  // a conversation (the cell's turns): each turn as a user bubble and an assistant bubble, with its checks
  function chat(x) {
    var ol = el("ol", "chat");
    x.cv.forEach(function (t, n) {
      var li = el("li", "turn" + (t.f ? " failed" : ""));
      li.setAttribute("data-turn", String(n + 1));
      add(li, el("div", "turn-head", ["turn " + (n + 1), t.ms !== undefined ? fmtMs(t.ms) : null, t.f ? (t.e ? "error" : "failed") : null].filter(Boolean).join(" · ")));
      li.appendChild(add(el("div", "bubble user"), el("div", "who", "user"), longText(t.i || "", t.iN)));
      var bot = add(el("div", "bubble assistant"), el("div", "who", "assistant"));
      if (t.o) bot.appendChild(longText(t.o, t.oN));
      else if (!t.tc && !t.e) bot.appendChild(el("p", "muted", "(no text)"));
      if (t.tc && t.tc.length) {
        var calls = el("ol", "tools");
        t.tc.forEach(function (call) {
          var c = add(el("li"), el("div", "tname", call[0]));
          if (call[1]) c.appendChild(longText(pretty(call[1])));
          if (call[2]) c.appendChild(collapsed("result", longText(call[2])));
          calls.appendChild(c);
        });
        bot.appendChild(calls);
      }
      if (t.e) bot.appendChild(longText(t.e, t.eN, "err"));
      li.appendChild(bot);
      var own = t.a || (x.a || []).filter(function (a) { return a[7] === n + 1; });
      if (own.length) {
        var checks = el("ul", "checks");
        own.forEach(function (a) { checks.appendChild(assertionLine(a)); });
        li.appendChild(checks);
      }
      ol.appendChild(li);
    });
    if (x.cvN) ol.appendChild(el("li", "muted", "… " + (x.cvN - x.cv.length) + " more turns in results.jsonl"));
    return ol;
  }

  function openDetail(r, t, rep) {
    var row = rows[r], list = row.cells[t], c = C[row.i];
    if (!list.length) return;
    rep = Math.min(rep, list.length - 1);
    var x = X[list[rep]];
    if (drawer.hidden) lastFocus = document.activeElement;

    var title = $("d-title");
    title.replaceChildren(
      add(el("div", "d-case"), el("span", "badge " + x.s, LABEL[x.s]), x.tr ? el("span", "badge cut", "cut off") : null, document.createTextNode(c.id)),
      el("div", "d-meta", [T[t], c.d, c.cat, c.dif ? "difficulty " + c.dif : null, (c.tags && c.tags.length) ? "#" + c.tags.join(" #") : null, list.length > 1 ? "repeat " + (x.r || 0) : null, c.src].filter(Boolean).join(" · "))
    );

    var b = $("d-body");
    b.replaceChildren();
    if (list.length > 1) {
      var tabs = el("div", "tabs");
      list.forEach(function (k, j) {
        var y = X[k], btn = el("button", j === rep ? "on" : null);
        btn.type = "button";
        add(btn, el("span", "dot st-" + y.s), document.createTextNode("r" + (y.r || 0)));
        btn.title = "repeat " + (y.r || 0) + ": " + y.s;
        btn.addEventListener("click", function () { openDetail(r, t, j); });
        tabs.appendChild(btn);
      });
      b.appendChild(tabs);
    }
    var ch = row.change[t];
    if (ch) b.appendChild(el("p", ch === "failing" ? "bad" : "good", ch === "failing" ? "Newly failing compared with the baseline." : "Newly passing compared with the baseline."));

    // the case's own words about itself: why it exists, what it checks
    if (c.ds) b.appendChild(section("Description", longText(c.ds, c.dsN, "about")));
    if (c.nt) b.appendChild(section("Notes", longText(c.nt, c.ntN, "about")));
    if (x.rv) b.appendChild(section("Review", add(el("p", x.rv[0] === "pass" ? "good" : "bad", "Reviewed: " + x.rv[0] + " (the run said " + x.rv[1] + ")" + (x.rv[2] ? " by " + x.rv[2] : "") + (x.rv[3] ? ", " + x.rv[3] : "")), x.rv[4] ? el("p", "about", x.rv[4]) : null)));
    if (x.e) b.appendChild(section("Error", add(longText(x.e, x.eN, "err"), x.tb ? collapsed("traceback", longText(x.tb, x.tbN, "err"), true) : null)));

    if (c["in"]) b.appendChild(section("Input", longText(c["in"], c.inN)));
    if (c.att && c.att.length) b.appendChild(section("Attachments (" + c.att.length + ")", attachments(c.att)));
    if (c.ex) b.appendChild(section("Expected", longText(c.ex, c.exN)));
    if (c.cx) b.appendChild(section("Context", longText(c.cx, c.cxN)));
    if (x.cv) {
      var bad = x.cv.map(function (u, n) { return u.f ? n + 1 : 0; }).filter(Boolean);
      b.appendChild(section("Conversation (" + (x.cvN || x.cv.length) + " turns" + (bad.length ? "; failed: turn " + bad.join(", ") : "") + ")", chat(x)));
    }
    b.appendChild(section(x.cv ? "Output (last reply)" : "Output", x.x ? longText(x.x, x.xN) : el("p", "muted", "(no text)")));

    if (x.tc && x.tc.length) {
      var ol = el("ol", "tools");
      x.tc.forEach(function (call) {
        var li = add(el("li"), el("div", "tname", call[0]));
        if (call[1]) li.appendChild(longText(pretty(call[1])));
        if (call[2]) li.appendChild(collapsed("result", longText(call[2])));
        ol.appendChild(li);
      });
      var toolsTitle = "Tool calls (" + (x.tcN || x.tc.length) + ")";
      b.appendChild(section(toolsTitle, add(ol, x.tcN ? el("li", "muted", "… " + (x.tcN - x.tc.length) + " more in results.jsonl") : null)));
    }

    if (x.tw) b.appendChild(section("Trace (" + (x.twN || x.tw.length) + " spans)", waterfall(x)));

    var tk = x.tk || [0, 0, 0];
    b.appendChild(section("Figures", facts([
      ["latency", fmtMs(x.ms)],
      ["TTFT", x.tt !== undefined ? fmtMs(x.tt) : null],
      ["tokens in", x.tk ? fmtInt(tk[0]) : null],
      ["tokens out", x.tk ? fmtInt(tk[1]) : null],
      ["prompt cache", x.tk && tk[2] ? fmtInt(tk[2]) : null],
      ["cost", fmtUsd(x.usd)],
      ["judge cost", x.jusd !== undefined ? fmtUsd(x.jusd) : null],
      ["iterations", x.it !== undefined ? x.it : null],
      ["score", x.sc !== undefined ? x.sc.toFixed(3) : null],
      ["cached", x.ca ? "yes" : "no"],
      ["stop reason", x.st !== undefined ? x.st + (x.tr ? " (cut off at the token limit)" : "") : null]
    ])));

    if (x.a && x.a.length) {
      var tbl = el("table", "asserts"), tb = el("tbody");
      x.a.forEach(function (a) {
        var icon = a[0] === true ? ["pass", "✓"] : a[0] === false ? ["fail", "✗"] : ["none", "?"];
        var reason = el("td");
        if (a[4]) reason.appendChild(el("div", "reason", a[4]));
        if (a[6]) reason.appendChild(el("div", "reason bad", "assertion error: " + a[6]));
        if (a[5]) reason.appendChild(collapsed("judge", el("pre", "text", a[5]), a[0] === false));
        add(tb, add(el("tr"),
          el("td", "icon " + icon[0], icon[1]),
          el("td", "kind", (a[7] ? "turn " + a[7] + ": " : "") + a[1] + (a[2] ? " (" + a[2] + ")" : "")),
          el("td", "score", a[3] !== null && a[3] !== undefined ? a[3].toFixed(2) : ""),
          reason));
      });
      tbl.appendChild(tb);
      b.appendChild(section("Assertions", tbl));
    } else if (!x.e) {
      b.appendChild(section("Assertions", el("p", "muted", "none")));
    }

    if (x.pw && x.pw.length) {
      var pl = el("ul", "pairwise");
      x.pw.forEach(function (p) {
        var li = add(el("li"), el("div", "tname", "vs " + p[0]), el("div", "reason", p[1]));
        p[2].forEach(function (r) { li.appendChild(collapsed("the judge's reply, " + r[0] + " shown first", el("pre", "text", r[1]))); });
        pl.appendChild(li);
      });
      b.appendChild(section("Pairwise judge (both orders)", pl));
    }
    if (x.rq) b.appendChild(section("Request", collapsed("rendered request", longText(x.rqN ? x.rq : pretty(x.rq), x.rqN))));
    if (x.ev || x.evN) {
      var evs = el("ol", "events");
      (x.ev || []).forEach(function (e) { evs.appendChild(el("li", null, e)); });
      var n = x.evN || (x.ev || []).length;
      var note = x.evN ? " (" + (x.ev || []).length + " of " + n + (x.evT ? "+" : "") + " kept)" : "";
      b.appendChild(section("Events", collapsed(n + " events" + note, evs)));
    }

    drawer.hidden = false; scrim.hidden = false;
    b.scrollTop = 0;
    $("d-close").focus();
  }

  // ---------------------------------------------------------------- wiring
  var qTimer = null;
  $("f-q").addEventListener("input", function (ev) {
    clearTimeout(qTimer);
    var v = ev.target.value;
    qTimer = setTimeout(function () { F.q = v; applyFilters(); }, X.length > 2000 ? 150 : 40);
  });
  [["f-status", "status"], ["f-target", "target"], ["f-category", "category"], ["f-difficulty", "difficulty"], ["f-tag", "tag"], ["f-sort", "sort"]].forEach(function (p) {
    $(p[0]).addEventListener("change", function (ev) { F[p[1]] = ev.target.value; applyFilters(); });
  });
  $("f-flaky").addEventListener("change", function (ev) { F.flaky = ev.target.checked; applyFilters(); });
  $("f-changed").addEventListener("change", function (ev) { F.changed = ev.target.checked; applyFilters(); });
  $("f-reset").addEventListener("click", function () {
    F = { q: "", status: "", target: "", category: "", difficulty: "", tag: "", flaky: false, changed: false, sort: "" };
    ["f-q", "f-status", "f-target", "f-category", "f-difficulty", "f-tag", "f-sort"].forEach(function (id) { $(id).value = ""; });
    $("f-flaky").checked = false; $("f-changed").checked = false;
    applyFilters();
  });

  applyFilters();
  window.__evalxReady = performance.now() - t0;
})();
