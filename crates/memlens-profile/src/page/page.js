"use strict";
// memlens report --html: the page is built here from the JSON in #data, which holds the numbers
// `memlens report --format json` prints (per view). Flame graphs are inferno's SVGs, each in a
// frame of its own (inferno's script zooms and searches in them); the tables and the timeline
// are drawn here. One search box filters every table and highlights in every flame graph.
const D = JSON.parse(document.getElementById("data").textContent);
const LABEL = { peak: "Peak", leaks: "Leaks", temporaries: "Temporaries", inuse: "In use", alloc: "Allocated" };
const MODES = [["stacks", "Stacks"], ["functions", "Functions"], ["topdown", "Top-down"],
  ["bottomup", "Bottom-up"], ["callers", "Callers / callees"]];
const ROWS = 300; // rows drawn per table (the rest: a button)
const views = D.order.filter(v => D.views[v]);
const state = {}; // per view: mode, focused function, sort per table, open tree nodes, rows shown
let query = null; // the search, a RegExp; null when empty
let current = null;

// ---- small helpers
function h(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined && v !== false) e.setAttribute(k, v);
  }
  for (const k of kids.flat(9)) if (k !== null && k !== undefined) e.append(k);
  return e;
}
function bytes(v) { // as the terminal prints sizes
  const a = Math.abs(v), s = v < 0 ? "-" : "";
  for (const [u, n] of [["TiB", 2 ** 40], ["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 1024]])
    if (a >= n) { const x = a / n; return s + (x >= 100 ? x.toFixed(0) : x.toFixed(2)) + " " + u; }
  return s + a.toFixed(0) + " B";
}
const pct = x => (100 * x).toFixed(1) + "%";
const short = f => (D.names[f] || [f])[0];
const isLib = f => !!(D.names[f] || [0, 0])[1];
const base = p => (p || "").split("/").pop();
const where = f => f.file ? base(f.file) + ":" + f.line : "";
const fkey = f => short(f.function) + "\u0000" + base(f.file);
function ns(v) {
  if (v < 1e3) return v.toFixed(0) + " ns";
  if (v < 1e6) return (v / 1e3).toFixed(1) + " µs";
  if (v < 1e9) return (v / 1e6).toFixed(2) + " ms";
  return (v / 1e9).toFixed(2) + " s";
}
function site(frames) { // the program's own first frame past its allocation wrappers, else the first
  const own = frames.filter(f => !isLib(f.function));
  const f = own.find(f => !/alloc|strdup/i.test(short(f.function).split("::").pop())) || own[0] || frames[0];
  return f ? short(f.function) + (f.file ? " " + where(f) : "") : "?";
}
const hit = f => query && (query.test(short(f.function)) || query.test(f.function));
const stacksOf = v => D.views[v].stacks.filter(s => !query || s.frames.some(hit));
const total = v => D.totals[v].value;

// ---- a stack: the frame that allocated, the program's frames, library runs folded (as the terminal)
function stackCell(frames) {
  const line = f => h("div", { class: "fr" + (isLib(f.function) ? " lib" : "") + (hit(f) ? " hit" : ""), title: f.function },
    f.inlined ? h("span", { class: "inl" }, "inline ") : null, short(f.function), " ", h("span", { class: "at" }, where(f)));
  const box = h("div", { class: "stack" });
  const own = frames.some(f => !isLib(f.function));
  for (let i = 0; i < frames.length;) {
    if (i > 0 && own && isLib(frames[i].function)) {
      let end = i; while (end < frames.length && isLib(frames[end].function)) end++;
      const keep = end < frames.length ? 1 : 0, hidden = frames.slice(i, end - keep);
      if (hidden.length > 1) {
        const more = h("div", { class: "fold", title: "show these frames" }, "⋮ " + hidden.length + " library frames");
        more.onclick = () => more.replaceWith(...hidden.map(line));
        box.append(more);
      } else box.append(...hidden.map(line));
      if (keep) box.append(line(frames[end - 1]));
      i = end;
    } else box.append(line(frames[i++]));
  }
  return box;
}

// ---- a sortable table; cols: {id, name, get (sort key), show (cell), num}
function table(v, id, cols, rows, dflt) {
  const st = state[v].sort[id] || (state[v].sort[id] = { col: dflt, dir: -1 });
  const c = cols.find(c => c.id === st.col) || cols[0];
  rows = rows.slice().sort((a, b) => {
    const x = c.get(a), y = c.get(b);
    return (typeof x === "string" ? x.localeCompare(y) : x - y) * st.dir;
  });
  const shown = state[v].rows[id] || ROWS;
  const t = h("table", { class: "data", "data-table": id },
    h("thead", {}, h("tr", {}, cols.map(col => h("th", {
      "data-col": col.id, class: (col.num ? "num" : "") + (col.id === st.col ? (st.dir < 0 ? " desc" : " asc") : ""),
      title: "sort", onclick: () => { st.dir = st.col === col.id ? -st.dir : (col.num ? -1 : 1); st.col = col.id; render(); },
    }, col.name)))),
    h("tbody", {}, rows.slice(0, shown).map((r, i) => h("tr", { "data-key": r.key || i },
      cols.map(col => h("td", { class: col.num ? "num" : "" }, col.show ? col.show(r, i) : c2s(col.get(r))))))));
  const box = h("div", {}, t);
  if (rows.length > shown)
    box.append(h("button", { class: "more", onclick: () => { state[v].rows[id] = shown * 4; render(); } },
      "show more (" + shown + " of " + rows.length + " rows)"));
  if (!rows.length) box.append(h("p", { class: "note" }, query ? "nothing matches the search" : "nothing to show"));
  return box;
}
const c2s = x => typeof x === "number" ? String(x) : x;

// ---- the view's columns beyond value and share (as `report --view V --format json` names them)
function extraCols(v) {
  const o = (n, g, s) => ({ id: n, name: n, get: g, show: s, num: true });
  switch (v) {
    case "peak": return [o("objects", s => s.peak_objects, s => s.peak_objects.toFixed(0))];
    case "leaks": return [
      o("mean age", s => s.live_age_ns, s => ns(s.live_age_ns)),
      o("age/run", s => s.age_share, s => pct(s.age_share)),
      o("growth", s => s.growth_bytes ?? -Infinity, s => s.growth_bytes == null ? "-" : (s.growth_bytes > 0 ? "+" : "") + bytes(s.growth_bytes)),
      o("suspect", s => s.suspect ? 1 : 0, s => s.suspect ? "yes" : "")];
    case "temporaries": return [
      o("freed", s => s.freed_space, s => bytes(s.freed_space)),
      o("<1ms", s => s.freed_1ms_share, s => pct(s.freed_1ms_share)),
      o("<1s", s => s.freed_1s_share, s => pct(s.freed_1s_share)),
      o("median life", s => (s.median_lifetime_range_ns || [0])[0], s => life(s.median_lifetime_range_ns))];
    default: return [o("samples", s => s.samples, s => String(s.samples))];
  }
}
function life(r) {
  if (!r) return "-";
  const [lo, hi] = r;
  return lo <= 0 ? "< " + ns(hi) : hi == null ? "≥ " + ns(lo) : ns(lo) + "–" + ns(hi);
}

function stacksTable(v) {
  const rows = stacksOf(v).map((s, i) => Object.assign({ rank: i + 1, key: "s" + i }, s));
  const cols = [
    { id: "rank", name: "#", get: r => r.rank, num: true },
    { id: "value", name: D.views[v].sample_index, get: r => r.value, show: r => bytes(r.value), num: true },
    { id: "share", name: "share", get: r => r.share, show: r => pct(r.share), num: true },
    ...extraCols(v),
    { id: "site", name: "site", get: r => site(r.frames), show: r => h("span", { class: "fn", title: "the first frame of the program's own past its allocation functions" }, site(r.frames)) },
    { id: "stack", name: "stack (innermost first)", get: r => r.frames.length, show: r => stackCell(r.frames), num: false },
  ];
  return table(v, "stacks", cols, rows, "value");
}

// ---- functions: one row per function as shown (a template's instantiations together)
function functions(stacks) {
  const m = new Map();
  for (const s of stacks) {
    const seen = new Set();
    s.frames.forEach((f, i) => {
      const k = fkey(f);
      let r = m.get(k);
      if (!r) m.set(k, r = { key: k, name: short(f.function), full: f.function, file: base(f.file), lib: isLib(f.function), flat: 0, cum: 0 });
      if (i === 0) r.flat += s.value;
      if (!seen.has(k)) { seen.add(k); r.cum += s.value; }
    });
  }
  return [...m.values()];
}
function nameCell(r) {
  return h("span", { class: "fn" + (r.lib ? " lib" : ""), title: r.full + (r.file ? " (" + r.file + ")" : "") }, r.name,
    r.file ? h("span", { class: "at" }, " " + r.file) : null);
}
function functionsTable(v) {
  const T = total(v), focus = r => h("a", { href: "#", onclick: e => { e.preventDefault(); state[v].fn = r.key; state[v].mode = "callers"; render(); } }, nameCell(r));
  return table(v, "functions", [
    { id: "flat", name: "flat", get: r => r.flat, show: r => bytes(r.flat), num: true },
    { id: "flatp", name: "flat%", get: r => r.flat, show: r => pct(r.flat / T), num: true },
    { id: "cum", name: "cum", get: r => r.cum, show: r => bytes(r.cum), num: true },
    { id: "cump", name: "cum%", get: r => r.cum, show: r => pct(r.cum / T), num: true },
    { id: "name", name: "function (click: callers and callees)", get: r => r.name, show: focus },
  ], functions(stacksOf(v)), "flat");
}

// ---- trees: top-down (from the outermost frame) and bottom-up (from the frame that allocated)
function tree(stacks, up) {
  const root = { key: "", total: 0, self: 0, kids: new Map() };
  for (const s of stacks) {
    let n = root;
    root.total += s.value;
    for (const f of up ? s.frames : s.frames.slice().reverse()) {
      const k = fkey(f);
      let c = n.kids.get(k);
      if (!c) n.kids.set(k, c = { key: n.key + "/" + k, name: short(f.function), full: f.function, file: base(f.file), lib: isLib(f.function), total: 0, self: 0, kids: new Map() });
      c.total += s.value;
      n = c;
    }
    n.self += s.value;
  }
  return root;
}
function treeTable(v, up) {
  const id = up ? "bottomup" : "topdown", st = state[v], T = total(v);
  const sort = st.sort[id] || (st.sort[id] = { col: "total", dir: -1 });
  const root = tree(stacksOf(v), up), rows = [];
  const open = st.open[id] || (st.open[id] = autoOpen(root, T));
  const key = { total: n => n.total, self: n => n.self, name: n => n.name }[sort.col];
  const walk = (n, depth) => [...n.kids.values()]
    .sort((a, b) => (typeof key(a) === "string" ? key(a).localeCompare(key(b)) : key(a) - key(b)) * sort.dir)
    .forEach(c => {
      const isOpen = open.has(c.key) || (query && c.total > 0 && depth < 40 && hasHit(c));
      rows.push(h("tr", { "data-key": c.key, class: hitName(c) ? "hit" : "" },
        h("td", { class: "tree", style: "padding-left:" + (4 + depth * 14) + "px" },
          h("span", { class: "tog", onclick: () => { open.has(c.key) ? open.delete(c.key) : open.add(c.key); render(); } }, c.kids.size ? (isOpen ? "▾ " : "▸ ") : "  "),
          nameCell(c)),
        h("td", { class: "num" }, bytes(c.total)), h("td", { class: "num" }, pct(c.total / T)),
        up ? null : h("td", { class: "num" }, c.self ? bytes(c.self) : "")));
      if (isOpen && rows.length < 4000) walk(c, depth + 1);
    });
  walk(root, 0);
  const th = (c, n, num) => h("th", { "data-col": c, class: (num ? "num" : "") + (sort.col === c ? (sort.dir < 0 ? " desc" : " asc") : ""),
    onclick: () => { sort.dir = sort.col === c ? -sort.dir : (num ? -1 : 1); sort.col = c; render(); } }, n);
  return h("table", { class: "data tree", "data-table": id },
    h("thead", {}, h("tr", {}, th("name", up ? "allocated in ← called from" : "called from → calls", false),
      th("total", "total", true), h("th", { class: "num" }, "share"), up ? null : th("self", "self", true))),
    h("tbody", {}, rows));
}
const hitName = n => query && (query.test(n.name) || query.test(n.full));
const hasHit = n => hitName(n) || [...n.kids.values()].some(hasHit);
function autoOpen(root, T) { // the heavy paths, open from the start
  const open = new Set();
  const walk = (n, d) => { for (const c of n.kids.values()) if (c.total >= 0.15 * T && d < 14) { open.add(c.key); walk(c, d + 1); } };
  walk(root, 0);
  return open;
}

// ---- callers and callees of one function
function callersView(v) {
  const stacks = stacksOf(v), funcs = functions(stacks).sort((a, b) => b.cum - a.cum);
  const st = state[v], T = total(v);
  if (!funcs.some(f => f.key === st.fn)) st.fn = (funcs.find(f => !f.lib) || funcs[0] || {}).key;
  const me = funcs.find(f => f.key === st.fn);
  const pick = h("select", { class: "pick", onchange: e => { st.fn = e.target.value; render(); } },
    funcs.slice(0, 500).map(f => h("option", { value: f.key, selected: f.key === st.fn ? "" : null }, f.name + (f.file ? " (" + f.file + ")" : "") + " — " + bytes(f.cum))));
  if (!me) return h("p", { class: "note" }, "no function matches");
  const callers = new Map(), callees = new Map();
  let self = 0;
  for (const s of stacks) {
    const keys = s.frames.map(fkey), i = keys.indexOf(st.fn);
    if (i < 0) continue;
    if (i === 0) self += s.value; else add(callees, s.frames[i - 1], s.value);
    if (i + 1 < keys.length) add(callers, s.frames[i + 1], s.value); else add(callers, null, s.value);
  }
  const list = (id, m, extra) => table(v, id, [
    { id: "value", name: "bytes through it", get: r => r.value, show: r => bytes(r.value), num: true },
    { id: "share", name: "of " + me.name, get: r => r.value, show: r => pct(r.value / me.cum), num: true },
    { id: "name", name: id === "callers" ? "caller" : "callee", get: r => r.name, show: r => r.key ? h("a", { href: "#", onclick: e => { e.preventDefault(); st.fn = r.key; render(); } }, nameCell(r)) : r.name },
  ], [...m.values(), ...extra], "value");
  return h("div", { class: "cc" },
    h("p", {}, "function ", pick, " — ", bytes(me.cum), " (", pct(me.cum / T), ") in stacks through it, ", bytes(me.flat), " allocated in it"),
    h("div", { class: "two" },
      h("div", {}, h("h4", {}, "called from (callers)"), list("callers", callers, [])),
      h("div", {}, h("h4", {}, "calls (callees)"), list("callees", callees, self ? [{ key: "", name: "(allocated here)", value: self }] : []))));
}
function add(m, f, value) {
  const k = f ? fkey(f) : "";
  const r = m.get(k) || { key: k, name: f ? short(f.function) : "(the stack's outermost frame)", full: f ? f.function : "", file: f ? base(f.file) : "", lib: f ? isLib(f.function) : false, value: 0 };
  r.value += value;
  m.set(k, r);
}

// ---- flame graphs: inferno's SVG in a frame of its own, drawn when its tab is first opened
function flame(v) {
  const svg = D.flames[v];
  if (!svg) return h("p", { class: "note" }, "no stacks to draw");
  const f = h("iframe", { class: "flame", "data-view": v, title: "flame graph: " + LABEL[v] });
  f.srcdoc = "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>body{margin:0}svg{width:100%;display:block}</style>" +
    "<script>history.replaceState=function(){};<\/script></head><body>" + svg.slice(svg.indexOf("<svg")) + "</body></html>";
  f.addEventListener("load", () => {
    const fit = () => { f.style.height = f.contentDocument.documentElement.scrollHeight + "px"; };
    fit();
    setTimeout(() => { fit(); flameSearch(f); f.dataset.ready = "1"; }, 30);
  });
  return f;
}
function flameSearch(f) {
  const w = f.contentWindow;
  if (!w || !w.search) return;
  if (w.searching) w.search_prompt(); // inferno's reset (it only prompts when not searching)
  if (query) w.search(query.source);
}

// ---- the page
function render() {
  if (!current) return;
  const v = current, st = state[v];
  for (const b of document.querySelectorAll(".mode")) b.classList.toggle("on", b.dataset.view === v && b.dataset.mode === st.mode);
  const box = document.getElementById("table-" + v);
  const m = st.mode;
  box.replaceChildren(m === "stacks" ? stacksTable(v) : m === "functions" ? functionsTable(v)
    : m === "callers" ? callersView(v) : treeTable(v, m === "bottomup"));
  const n = stacksOf(v).length, all = D.views[v].stacks.length;
  document.getElementById("qinfo").textContent = query ? n + " of " + all + " stacks of " + LABEL[v] + " match" : "";
}
function open(v, mode) {
  current = v;
  if (mode) state[v].mode = mode;
  for (const t of document.querySelectorAll(".tab")) t.classList.toggle("on", t.dataset.view === v);
  for (const p of document.querySelectorAll(".pane")) p.hidden = p.dataset.view !== v;
  const fb = document.getElementById("flame-" + v);
  if (!fb.firstChild) fb.append(flame(v));
  render();
}
function setQuery(text) {
  try { query = text ? new RegExp(text) : null; } catch (e) { query = new RegExp(text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")); }
  for (const v of views) state[v].rows = {};
  for (const f of document.querySelectorAll("iframe.flame")) flameSearch(f);
  render();
}

function cards() {
  const box = h("section", { class: "cards" });
  for (const v of ["peak", "leaks", "temporaries", "alloc"].filter(v => D.views[v])) {
    const by = new Map(); // bytes per site: its stacks together
    for (const s of D.views[v].stacks) by.set(site(s.frames), (by.get(site(s.frames)) || 0) + s.value);
    const top = [...by].sort((a, b) => b[1] - a[1])[0];
    box.append(h("div", { class: "card", "data-view": v, onclick: () => { open(v, "stacks"); document.getElementById("views").scrollIntoView(); } },
      h("h3", {}, LABEL[v]), h("div", { class: "big" }, bytes(total(v))),
      top ? h("div", {}, "top site: ", h("b", {}, top[0]), " ", bytes(top[1]), " (", pct(top[1] / total(v)), ")") : "nothing",
      D.summaries[v] ? h("div", { class: "small" }, D.summaries[v].split(";")[0]) : null));
  }
  return box;
}

function build() {
  for (const v of views) state[v] = { mode: "stacks", sort: {}, open: {}, rows: {} };
  const hdr = h("header", {},
    h("h1", {}, "memlens: " + D.program, h("span", { class: "pid" }, " pid " + D.pid)),
    h("pre", { class: "facts" }, D.header.trim()),
    h("div", { class: "searchbar" },
      h("input", { id: "q", type: "search", placeholder: "search functions (regular expression, case-sensitive): filters the tables, highlights in the flame graphs", oninput: e => setQuery(e.target.value) }),
      h("span", { id: "qinfo" })));
  const tabs = h("nav", { class: "tabs" }, views.map(v => h("button", { class: "tab", "data-view": v, onclick: () => open(v) },
    LABEL[v], h("span", { class: "small" }, " " + bytes(total(v))))));
  const panes = views.map(v => h("div", { class: "pane", "data-view": v, hidden: "" },
    D.summaries[v] ? h("p", { class: "summary" }, D.summaries[v]) : null,
    limitNote(v),
    h("div", { class: "flamebox", id: "flame-" + v }),
    h("div", { class: "modes" }, MODES.map(([m, n]) => h("button", { class: "mode", "data-view": v, "data-mode": m, onclick: () => { state[v].mode = m; render(); } }, n))),
    h("div", { id: "table-" + v })));
  const foot = h("footer", {}, h("p", {}, "Data: the numbers of ", h("code", {}, "memlens report " + D.file + " --format json"),
    " (with --view peak, leaks or temporaries). ",
    D.pprof ? ["Drill down in pprof's own UI: ", h("code", {}, D.pprof), "."] : null));
  document.body.append(hdr, cards(), timelineSection(), h("section", { id: "views" }, tabs, panes), foot);
  if (views.length) open(views[0]);
}
function limitNote(v) {
  const t = D.totals[v], n = D.views[v].stacks.length;
  if (t.stacks <= n) return null;
  const shown = D.views[v].stacks.reduce((a, s) => a + s.value, 0);
  return h("p", { class: "note" }, "The tables hold the top " + n + " of " + t.stacks + " stacks (" + pct(shown / t.value) + " of the bytes); the flame graph holds them all.");
}

// ---- the timeline: the top sites stacked where their bytes were measured, heap, anonymous
// mappings, RSS and the allocator's figures as lines; drag across it to zoom
const COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#bab0ac"];
function timelineSection() {
  const sec = h("section", { class: "timeline" }, h("h2", {}, "Memory over time"));
  const T = D.timeline;
  if (!T || T.points.length < 2) {
    sec.append(h("p", { class: "note" }, T ? "one point only: nothing to draw over time (exact mode keeps no live heap)" : "no timeline in this profile (written without the views)"));
    return sec;
  }
  const pts = T.points, S = D.sites;
  // the anonymous mappings are a line of their own (apart from the heap) when the run made any
  const lines = [["estimated heap", p => p.heap_bytes, "#1f3b73", ""], ["anonymous mmap (est.)", p => p.mmap_bytes, "#2e8b57", "8 3 2 3"],
    ["RSS", p => p.rss_bytes, "#c0392b", ""], ["allocator in use", p => p.allocator_in_use, "#555", "5 3"],
    ["allocator footprint", p => p.allocator_footprint, "#b9770e", "2 3"]]
    .filter(l => pts.some(p => l[1](p) != null && (l[0] !== "anonymous mmap (est.)" || l[1](p) > 0)));
  const end = Math.max(pts.length ? pts[pts.length - 1].time_s : 0, ...S.times_s, 1e-3);
  const whole = [0, end], act = activity(pts, end);
  let dom = act || whole;
  const W = 1100, H = 330, L = 72, R = 16, TOP = 12, B = 36;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  svg.setAttribute("id", "tl");
  const note = h("span", { class: "small", id: "tl-range" });
  const draw = () => {
    const [a, b] = dom, x = t => L + (t - a) / (b - a) * (W - L - R);
    const inDom = t => t >= a && t <= b;
    const stackTop = S.times_s.map((t, i) => S.sites.reduce((s, x) => s + x.values[i], S.other[i]));
    let ymax = 1;
    pts.forEach(p => { if (inDom(p.time_s)) for (const l of lines) ymax = Math.max(ymax, l[1](p) || 0); });
    S.times_s.forEach((t, i) => { if (inDom(t)) ymax = Math.max(ymax, stackTop[i]); });
    const [unit, div] = ymax >= 2 ** 30 ? ["GiB", 2 ** 30] : ymax >= 2 ** 20 ? ["MiB", 2 ** 20] : ["KiB", 1024];
    const top = niceCeil(ymax * 1.05 / div) * div, y = v => TOP + (1 - v / top) * (H - TOP - B);
    let o = "", axes = "";
    for (const t of ticks(0, top / div, 5)) {
      o += `<line class="grid" x1="${L}" x2="${W - R}" y1="${y(t * div)}" y2="${y(t * div)}"/>`;
      axes += `<text class="ax" x="${L - 6}" y="${y(t * div) + 4}" text-anchor="end">${+t.toFixed(3)} ${unit}</text>`;
    }
    for (const t of ticks(a, b, 8)) {
      o += `<line class="grid" x1="${x(t)}" x2="${x(t)}" y1="${TOP}" y2="${H - B}"/>`;
      axes += `<text class="ax" x="${x(t)}" y="${H - B + 16}" text-anchor="middle">${+t.toFixed(3)} s</text>`;
    }
    axes += `<text class="ax" x="${(L + W - R) / 2}" y="${H - 4}" text-anchor="middle">time since profiling started (s)</text>`;
    const bands = [...S.sites.map(s => s.values), S.other];
    if (S.times_s.length >= 3) { // areas between the moments measured
      const cum = S.times_s.map(() => 0);
      bands.forEach((vals, k) => {
        const lo = cum.slice(); vals.forEach((v, i) => { cum[i] += v; });
        const up = S.times_s.map((t, i) => x(t) + "," + y(cum[i])), down = S.times_s.map((t, i) => x(t) + "," + y(lo[i])).reverse();
        o += `<polygon class="band" data-band="${k}" fill="${COLORS[k % 9]}" points="${up.concat(down).join(" ")}"/>`;
      });
    } else { // a column at each moment measured
      S.times_s.forEach((t, i) => {
        let c = 0;
        bands.forEach((vals, k) => { const v = vals[i]; if (v > 0) o += `<rect class="band" data-band="${k}" fill="${COLORS[k % 9]}" x="${x(t) - 6}" width="12" y="${y(c + v)}" height="${y(c) - y(c + v)}"/>`; c += v; });
      });
    }
    for (const [name, get, color, dash] of lines) {
      const p = pts.filter((p, i) => get(p) != null && (inDom(p.time_s) || (pts[i + 1] && inDom(pts[i + 1].time_s)) || (pts[i - 1] && inDom(pts[i - 1].time_s))));
      o += `<polyline class="line" data-line="${name}" fill="none" stroke="${color}" stroke-width="2" stroke-dasharray="${dash}" points="${p.map(p => x(p.time_s) + "," + y(get(p))).join(" ")}"/>`;
    }
    if (T.heap_max_bytes > 0 && inDom(T.heap_max_time_s))
      {
      const px = x(T.heap_max_time_s), left = px > W - 260;
      o += `<line class="peak" x1="${px}" x2="${px}" y1="${TOP}" y2="${H - B}"/><text class="ax" x="${left ? px - 4 : px + 4}" y="${TOP + 10}" text-anchor="${left ? "end" : "start"}">highest heap estimate ${bytes(T.heap_max_bytes)}</text>`;
    }
    svg.innerHTML = `<defs><clipPath id="plot"><rect x="${L}" y="0" width="${W - L - R}" height="${H}"/></clipPath></defs>${axes}<g clip-path="url(#plot)">${o}</g><rect id="brush" class="brush" y="${TOP}" height="${H - TOP - B}" width="0"/><line id="hover" class="hover" y1="${TOP}" y2="${H - B}"/>`;
    note.textContent = `showing ${a.toFixed(2)}–${b.toFixed(2)} s of ${end.toFixed(2)} s` + (act && dom === act ? " (where the heap changed)" : "");
    svg.dataset.from = a; svg.dataset.to = b;
  };
  // zoom: drag across the chart
  const toT = e => { const r = svg.getBoundingClientRect(), px = (e.clientX - r.left) * W / r.width; return [px, dom[0] + (px - L) / (W - L - R) * (dom[1] - dom[0])]; };
  let drag = null;
  svg.addEventListener("mousedown", e => { drag = toT(e); e.preventDefault(); });
  svg.addEventListener("mousemove", e => {
    const [px, t] = toT(e), hv = svg.querySelector("#hover"), br = svg.querySelector("#brush");
    hv.setAttribute("x1", px); hv.setAttribute("x2", px);
    if (drag) { br.setAttribute("x", Math.min(px, drag[0])); br.setAttribute("width", Math.abs(px - drag[0])); }
    tip.textContent = tipAt(t, pts, lines, S);
  });
  window.addEventListener("mouseup", e => {
    if (!drag) return;
    const [px, t] = toT(e), d = drag; drag = null;
    if (Math.abs(px - d[0]) > 6) dom = [Math.max(0, Math.min(t, d[1])), Math.min(end, Math.max(t, d[1]))];
    draw();
  });
  const tip = h("div", { class: "tip small", id: "tl-tip" }, "move over the chart for the figures at a moment; drag across it to zoom");
  const buttons = h("div", { class: "tlbar" },
    h("button", { id: "tl-all", onclick: () => { dom = whole; draw(); } }, "whole run"),
    act ? h("button", { id: "tl-activity", onclick: () => { dom = act; draw(); } }, "where the heap changed") : null, " ", note);
  const legend = h("div", { class: "legend" },
    lines.map(([n, , c, d]) => h("span", { class: "key" }, h("i", { style: `border-top:2px ${d ? "dashed" : "solid"} ${c}` }), n)),
    S.sites.map((s, k) => h("span", { class: "key" }, h("b", { style: "background:" + COLORS[k % 9] }), s.name)),
    S.other.some(v => v > 0) ? h("span", { class: "key" }, h("b", { style: "background:" + COLORS[S.sites.length % 9] }), "other sites") : null);
  const kinds = S.kinds.filter(k => k === "dump").length;
  sec.append(buttons, svg, tip, legend, h("p", { class: "note" },
    "Lines: every point the runtime took (about every 100 ms). Bands: bytes per site (the first frame of the program's own past its allocation functions) at the " + S.times_s.length +
    " moments they were measured: " + (kinds > 1 ? kinds + " dumps of the process" : "the dump") + (S.kinds.includes("peak") ? " and the peak" : "") +
    (kinds > 1 ? "" : "; for bands over time, dump the process periodically: memlens run --dump-every 1s (the page reads the numbered dumps beside the file)") + "."));
  draw();
  return sec;
}
function activity(pts, end) { // where the heap moved away from where it starts and ends, when that is a small part of the run
  if (pts.length < 3) return null;
  const max = Math.max(...pts.map(p => p.heap_bytes), 1), first = pts[0].heap_bytes, last = pts[pts.length - 1].heap_bytes;
  const from = pts.find(p => Math.abs(p.heap_bytes - first) > 0.05 * max);
  const to = [...pts].reverse().find(p => Math.abs(p.heap_bytes - last) > 0.05 * max);
  if (!from || !to || to.time_s < from.time_s || to.time_s - from.time_s > 0.5 * end) return null;
  const pad = Math.max(0.05 * (to.time_s - from.time_s), 0.2);
  return [Math.max(0, from.time_s - pad), Math.min(end, to.time_s + pad)];
}
function tipAt(t, pts, lines, S) {
  if (!pts.length) return "";
  const p = pts.reduce((a, b) => Math.abs(b.time_s - t) < Math.abs(a.time_s - t) ? b : a);
  return `at ${p.time_s.toFixed(2)} s: ` + lines.map(([n, g]) => g(p) == null ? null : n + " " + bytes(g(p))).filter(Boolean).join(", ");
}
function niceCeil(v) { const e = 10 ** Math.floor(Math.log10(v || 1)); return [1, 2, 2.5, 5, 10].map(m => m * e).find(m => m >= v) || v; }
function ticks(a, b, n) {
  const step = niceCeil((b - a) / n), out = [];
  for (let t = Math.ceil(a / step) * step; t <= b + 1e-9; t += step) out.push(t);
  return out;
}

build();
