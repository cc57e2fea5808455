// faultsim's HTML report: draws the page from the JSON report embedded in it (no network).
(function () {
"use strict";
var T0 = performance.now(), marks = {};
function mark(name) { marks[name] = Math.round(performance.now() - T0); }
var DATA = JSON.parse(document.getElementById("faultsim-data").textContent);
var R = DATA.report;
var ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
var PALETTE = ["#d7263d", "#f08a24", "#8e44ad", "#c2185b", "#b8860b", "#6d4c41", "#e4572e",
               "#5e35b1", "#ad1457", "#ef6c00"];
var FIXED = {unexplored: "#dde1e7", passed: "#2f9e63", escalated: "#3a7bd5"};
var SHOWN = 300; // violation rows drawn at first (a button draws the rest)

function esc(s) {
  return String(s == null ? "" : s).replace(/&/g, "&amp;").replace(/</g, "&lt;")
    .replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}
function code(ch) {
  var i = ALPHABET.indexOf(ch);
  return i >= 0 ? i : ch.charCodeAt(0) - 0xC0 + ALPHABET.length;
}
function plural(n, one, many) { return n + " " + (n === 1 ? one : (many || one + "s")); }

// one colour per violation label across the page, in order of appearance
var colourOf = {};
var nextColour = 0;
R.runs.forEach(function (run) {
  (run.map ? run.map.labels : []).forEach(function (l) {
    if (!(l in FIXED) && !(l in colourOf)) colourOf[l] = PALETTE[nextColour++ % PALETTE.length];
  });
});
function colour(label) { return FIXED[label] || colourOf[label] || "#d7263d"; }

// -- decoding a run's map --------------------------------------------------------------
function decode(run) {
  var m = run.map, p = m.points, n = p.verdict.length;
  var deltas = p.event.indexOf(",") >= 0 ? p.event.split(",") : p.event.split("");
  var torn = p.torn ? p.torn.split(",") : [];
  var event = new Int32Array(n), offset = new Int32Array(n), verdict = new Uint16Array(n),
      cat = new Uint16Array(n), at = 0;
  for (var i = 0; i < n; i++) {
    at += +deltas[i]; event[i] = at; offset[i] = +torn[i] || 0;
    verdict[i] = code(p.verdict[i]); cat[i] = code(p.category[i]);
  }
  var events = m.events.map(function (line) {
    var f = line.split("\t");
    return {kind: m.event_kinds[+f[0]], subject: f[1], detail: f[2] || ""};
  });
  var deep = new Uint8Array(n);
  (m.deep ? m.deep.split(",") : []).forEach(function (i) { deep[+i] = 1; });
  return {n: n, event: event, offset: offset, verdict: verdict, cat: cat, events: events,
          labels: m.labels, cats: m.categories, ids: m.ids || {}, deep: deep,
          deeps: m.deep ? m.deep.split(",").length : 0};
}

// the map's cells by verdict, as faultsim.reports.counts counts kill points (the unfiltered figures
// are the run's `counts`): judged = passed (escalated among them) + failed + deeper
function counts(d, keep) {
  var c = {judged: 0, passed: 0, escalated: 0, failed: 0, deeper: 0, unexplored: 0, shown: 0};
  for (var i = 0; i < d.n; i++) {
    if (keep && !keep(i)) continue;
    c.shown++;
    var v = d.verdict[i];
    if (v === 0) { c.unexplored++; continue; }
    c.judged++;
    if (v === 1) c.passed++; else if (v === 2) c.escalated++;
    else if (d.deep[i]) c.deeper++; else c.failed++;
  }
  return c;
}

// -- the counts (faultsim.reports.counts: each defined once, its definition the tooltip) -----------
function defined(name) { return (DATA.counts || {})[name] || [name, ""]; }
function n(run, name, text) {
  var v = run.counts[name];
  return '<b class="n-' + name + '" title="' + esc(defined(name)[1]) + '">' +
    esc(text != null ? text : v == null ? "-" : v) + "</b>";
}
function th(name, cls) {
  return '<th class="' + (cls || "num") + '" title="' + esc(defined(name)[1]) + '">' +
    esc(defined(name)[0]) + "</th>";
}
function killPointsCell(c) {
  return c.kill_points_judged === c.kill_points_total ? String(c.kill_points_judged) :
    c.kill_points_judged + " of " + c.kill_points_total;
}
function failingWords(c) {  // as faultsim.reports.counts.Counts.failing
  var parts = c.crash_states_failed ? [plural(c.crash_states_failed, "crash state")] : [];
  Object.keys(c.schedules_failed).sort(function (a, b) { return a - b; }).forEach(function (k) {
    parts.push(plural(c.schedules_failed[k], "schedule") + " of " + k + " crashes");
  });
  if (c.probes_failed) parts.push("the version probe");
  return parts.length > 1 ? parts.slice(0, -1).join(", ") + " and " + parts[parts.length - 1] :
    (parts[0] || "");
}
var TABLE = ["kill_points_judged", "kill_points_passed", "kill_points_failed",
             "kill_points_failed_deeper"];  // faultsim.reports.counts.TABLE
function countsHtml(run) {
  var c = run.counts;
  var h = '<div class="runcounts"><span>' + n(run, "kill_points_judged", killPointsCell(c)) +
    " kill points judged" + (c.kill_points_explored !== c.kill_points_judged ? " (" +
    n(run, "kill_points_explored") + " explored)" : "") + ": " +
    '<span class="ok-n">' + n(run, "kill_points_passed") + " passed</span>, " +
    '<span class="' + (c.kill_points_failed ? "bad-n" : "") + '">' + n(run, "kill_points_failed") +
    " failed</span>" + (c.kill_points_failed_deeper == null ? "" : ", " + '<span class="' +
    (c.kill_points_failed_deeper ? "bad-n" : "") + '">' + n(run, "kill_points_failed_deeper") +
    " failed only with 2+ crashes</span>") + "</span>";
  h += "<span>" + n(run, "crash_states") + " crash states judged, " +
    n(run, "crash_states_failed") + " failed</span>";
  if (c.violating) h += '<span class="bad-n">' + n(run, "violating") + " violations (" +
    esc(failingWords(c)) + ") of " + n(run, "counterexamples") + " kind" +
    (c.counterexamples === 1 ? "" : "s") + ": a counterexample of each below</span>";
  return h + "</div>";
}

// the text report's name of a run (report.rows)
function runName(run) {
  var agent = run.agent || "";
  return run.scenario + (agent.indexOf("langgraph:") === 0 ?
    " [" + agent.slice(agent.indexOf(":") + 1) + "]" : "");
}

// -- landmarks: model turns and tool calls ----------------------------------------------
function landmark(e, turn) {
  if (e.kind === "model.response") return {cls: "turn", text: "turn " + turn + " · model answers" +
    (e.detail && e.detail.indexOf("200") !== 0 ? " (" + e.detail + ")" : "")};
  if (e.kind === "mark.tool.start" || e.kind === "mark.pa.tool.start")
    return {cls: "tool", text: "tool call · " + e.subject};
  if (e.kind.indexOf("effect.") === 0)
    return {cls: "effect", text: "effect · " + e.subject + " " + e.kind.slice(7)};
  return null;
}

function segments(d) {
  // a row per landmark: the kill points from it to the next one
  var marks = [{at: 0, cls: "", text: "start"}], turn = 0;
  d.events.forEach(function (e, k) {
    if (e.kind === "model.response") turn++;
    var lm = landmark(e, turn);
    if (lm) { lm.at = k + 1; marks.push(lm); }
  });
  var rows = [], m = 0;
  for (var i = 0; i < d.n; i++) {
    while (m + 1 < marks.length && marks[m + 1].at <= d.event[i]) m++;
    if (!rows.length || rows[rows.length - 1].mark !== marks[m])
      rows.push({mark: marks[m], start: i, end: i});
    rows[rows.length - 1].end = i + 1;
  }
  return rows;
}

function describePoint(d, i) {
  var e = d.event[i], ev = e > 0 ? d.events[e - 1] : null;
  var what = ev ? "#" + e + " " + ev.kind + " " + ev.subject + (ev.detail ? " " + ev.detail : "")
                : "nothing (before the first event)";
  return (d.offset[i] ? "inside " + what + ", after " + d.offset[i] + " bytes" : "after " + what);
}

// -- page pieces ----------------------------------------------------------------------
function copyButton(text) {
  return '<button class="copy" data-copy="' + esc(text) + '">copy</button>';
}
function cmd(text) {
  return '<div class="cmd"><code>' + esc(text) + "</code>" + copyButton(text) + "</div>";
}

// the text report's table (text.TABLE_HEAD: the counts of faultsim.reports.counts.TABLE), and
// where each failing run's first counterexample is
function summaryTable() {
  var h = '<table class="summary"><tr><th>scenario</th><th>crash model</th>' +
    TABLE.map(function (name) { return th(name); }).join("") +
    '<th class="num">time</th><th>first counterexample</th></tr>';
  R.runs.forEach(function (run, r) {
    var c = run.counts;
    var cells = [killPointsCell(c), c.kill_points_passed,
                 c.kill_points_failed + (c.probes_failed ? " + probe" : ""),
                 c.kill_points_failed_deeper == null ? "-" : c.kill_points_failed_deeper];
    h += '<tr data-run="' + r + '"><td><a href="#run-' + r + '">' + esc(runName(run)) +
      "</a></td><td>" + esc(run.crash_model) + "</td>" + cells.map(function (x, k) {
        var bad = k >= 2 && x !== 0 && x !== "-" && x !== "0";
        return '<td class="num c-' + TABLE[k] + (bad ? " bad-n" : "") + '">' + esc(x) + "</td>";
      }).join("") + '<td class="num">' + run.seconds.toFixed(1) + "s</td><td>" +
      ((run.counterexamples || []).length ? '<a class="first-cx" href="#cx-' + r +
        '-0">' + esc(run.counterexamples[0].invariants.join(" + ")) + "</a>" : "") +
      "</td></tr>";
  });
  var failed = R.runs.filter(function (r) { return r.violating > 0 || !runOk(r); }).length;
  var scenarios = {};
  R.runs.forEach(function (r) { scenarios[r.path] = 1; });
  var ns = Object.keys(scenarios).length;
  var shards = {};
  R.runs.forEach(function (r) { if (r.shard) shards[r.shard.index + "/" + r.shard.of] = 1; });
  return h + "</table>" + Object.keys(shards).map(function (s) {
    return '<p class="muted shard">shard ' + esc(s) + ": each row counts the kill points " +
      "where this shard judged a crash state; faultsim report merge joins the shards' " +
      "--json reports</p>";
  }).join("") + '<p class="muted total">' + plural(ns, "scenario") + ", " +
    plural(R.runs.length, "run") + ": " + (failed ? failed + " with violations" : "all passed") +
    "</p>";
}
function runOk(run) {
  return !run.violations.length && run.probes.every(function (p) { return p.ok; });
}

function legend(d, r) {
  var c = {};
  for (var i = 0; i < d.n; i++) c[d.verdict[i]] = (c[d.verdict[i]] || 0) + 1;
  var h = '<div class="legend">';
  d.labels.forEach(function (l, k) {
    if (!c[k]) return;
    h += '<label><input type="checkbox" checked data-run="' + r + '" data-verdict="' + k +
      '"><span class="sw" style="background:' + colour(l) + '"></span>' +
      esc(l.split("+").join(" + ")) + ' <span class="muted">' + c[k] + "</span></label>";
  });
  if (d.deeps) h += '<span class="deep-note"><span class="sw d" style="background-color:#d7263d">' +
    '</span> striped: passes one crash, fails when a second crash follows <span class="muted">' +
    d.deeps + "</span></span>";
  return h + "</div>";
}

function filters(d, r) {
  var c = {};
  for (var i = 0; i < d.n; i++) c[d.cat[i]] = (c[d.cat[i]] || 0) + 1;
  var h = '<div class="filters"><b>categories</b>';
  d.cats.forEach(function (name, k) {
    if (!c[k]) return;
    h += '<label><input type="checkbox" checked data-run="' + r + '" data-cat="' + k + '"> ' +
      esc(name) + " " + c[k] + "</label>";
  });
  return h + "</div>";
}

function countsLine(c) {
  return '<span>shown: <b class="c-shown">' + c.shown + "</b> kill points</span>" +
    '<span>judged <b class="c-judged">' + c.judged + "</b></span>" +
    '<span style="color:' + FIXED.passed + '">passed <b class="c-passed">' +
    (c.passed + c.escalated) + "</b>" + (c.escalated ? " (" + c.escalated + " escalated)" : "") +
    "</span>" + '<span style="color:#d7263d">failed <b class="c-failed">' + c.failed +
    "</b></span>" + (c.deeper ? '<span style="color:#d7263d">failed only with 2+ crashes ' +
    '<b class="c-deeper">' + c.deeper + "</b></span>" : "") +
    (c.unexplored ? '<span class="muted">unexplored ' + c.unexplored + "</span>" : "");
}

// A row per landmark, split every CHUNK cells (a long stretch without one stays readable).
// Up to EAGER kill points every row is drawn at once; past that, rows are drawn BLOCK at a
// time as they scroll into view (an empty block of about their height stands in), so a
// page of a few hundred thousand kill points stays usable.
var CHUNK = 2000, EAGER = 50000, BLOCK = 100;
function rowHtml(d, row) {
  var h = ['<div class="seg" data-s="' + row.s + '"><div class="lm ' + row.cls + '" title="' +
    esc(row.text) + '">' + esc(row.text) + '</div><div class="cells">'];
  for (var i = row.s; i < row.e; i++)
    h.push('<i class="v' + d.verdict[i] + " k" + d.cat[i] + (d.deep[i] ? " d" : "") + '"></i>');
  h.push("</div></div>");
  return h.join("");
}
function mapRows(d) {
  var rows = [];
  segments(d).forEach(function (seg) {
    for (var s = seg.start; s < seg.end; s += CHUNK)
      rows.push({s: s, e: Math.min(seg.end, s + CHUNK), cls: seg.mark.cls,
                 text: seg.mark.text + (s > seg.start ? " (cont.)" : "")});
  });
  return rows;
}
function mapHtml(d, r) {
  var rows = mapRows(d), h = [];
  var open = '<div class="map' + (d.n > 3000 ? "" : " big") + '" id="map-' + r + '"';
  if (d.n <= EAGER) {
    rows.forEach(function (row) { h.push(rowHtml(d, row)); });
    return open + ">" + h.join("") + "</div>";
  }
  d.blocks = [];
  for (var b = 0; b < rows.length; b += BLOCK) {
    var block = rows.slice(b, b + BLOCK), height = 0;
    block.forEach(function (row) { height += Math.max(17, 12 * Math.ceil((row.e - row.s) / 80)) + 5; });
    d.blocks.push(block);
    h.push('<div class="blk" data-b="' + d.blocks.length + '" style="height:' + height + 'px"></div>');
  }
  return open + ' data-lazy="1">' + h.join("") + "</div>";
}
function drawLazily(map, d) {
  var fill = function (blk) {
    if (blk.dataset.drawn) return;
    blk.innerHTML = d.blocks[+blk.dataset.b - 1].map(function (row) { return rowHtml(d, row); }).join("");
    blk.dataset.drawn = "1";
    blk.style.height = "";
  };
  var blocks = map.querySelectorAll(".blk");
  if (!window.IntersectionObserver) { blocks.forEach(fill); return; }
  var seen = new IntersectionObserver(function (entries) {
    entries.forEach(function (en) { if (en.isIntersecting) { fill(en.target); seen.unobserve(en.target); } });
  }, {root: map, rootMargin: "400px"});
  blocks.forEach(function (blk) { seen.observe(blk); });
}

function pairsHtml(run, r, d) {
  var s = run.schedules && run.schedules["2"];
  if (!s) return "";
  var pairs = run.map.pairs || [];
  var h = "<h3>Second crashes</h3><p class=\"muted\">" + s.total + " schedules of 2 crashes, " +
    s.explored + " explored (the others equal judged ones), " + s.resumed + " resumed; " +
    n(run, "schedules_failed", run.counts.schedules_failed["2"] || 0) + " violate. Each " +
    "square: a first crash " +
    "(across, in the clean run's order) and the second crash in the run resumed from it " +
    "(down, by that run's event); passing schedules are not drawn.</p>";
  if (!pairs.length) return h;
  var maxY = 1;
  var parsed = pairs.map(function (t) {
    var f = t.split(","); var y = +f[1]; if (y > maxY) maxY = y;
    return {x: +f[0], y: y, off: +f[2], v: code(f[3])};
  });
  var W = 760, H = Math.min(240, Math.max(110, 4 * (maxY + 1))), L = 34, T = 8, B = 36;
  var cw = Math.max(3, W / Math.max(1, d.n)), ch = Math.max(3, H / (maxY + 1));
  var svg = ['<svg class="pairs" width="' + (W + L + 10) + '" height="' + (H + T + B) + '">',
    '<rect x="' + L + '" y="' + T + '" width="' + W + '" height="' + H + '" fill="#f3f5f8"/>'];
  parsed.forEach(function (p) {
    svg.push('<rect class="pair" x="' + (L + p.x * W / Math.max(1, d.n)).toFixed(1) + '" y="' +
      (T + (p.y - 1) * H / (maxY + 1)).toFixed(1) + '" width="' + cw.toFixed(1) + '" height="' +
      ch.toFixed(1) + '" fill="' + colour(d.labels[p.v]) + '"><title>first crash ' +
      esc(d.ids[p.x] || "#" + p.x) + "; second crash at event #" + p.y +
      (p.off ? " after " + p.off + " bytes" : "") + ": " + esc(d.labels[p.v]) + "</title></rect>");
  });
  var axis = 'font-size="11" fill="#5f6b7a"';
  svg.push('<text x="' + L + '" y="' + (H + T + 16) + '" ' + axis + '>first crash: kill point 1</text>');
  svg.push('<text x="' + (L + W) + '" y="' + (H + T + 16) + '" text-anchor="end" ' + axis + ">" +
    d.n + " →</text>");
  svg.push('<text x="' + (L - 4) + '" y="' + (T + 10) + '" text-anchor="end" ' + axis + ">#1</text>");
  svg.push('<text x="' + (L - 4) + '" y="' + (T + H) + '" text-anchor="end" ' + axis + ">#" + maxY +
    "</text>");
  svg.push('<text x="' + (L + W / 2) + '" y="' + (H + T + 28) + '" text-anchor="middle" ' + axis +
    ">down: the second crash, by event of the run resumed from the first</text></svg>");
  return h + '<div class="pairs">' + svg.join("") + "</div>";
}

// an incarnation's limit: as asked, and under "auto" the one the clean runs gave
function timeoutText(run) {
  if (run.timeout == null) return "none";
  if (run.timeout !== "auto") return run.timeout + " s";
  return "auto (" + (run.timeout_seconds != null ? run.timeout_seconds + " s, " : "") +
    "derived from the clean runs)";
}

function factsHtml(run) {
  var rows = (run.test ? [["pytest", run.test]] : []).concat([
    ["faultsim", R.version || "?"], ["scenario", run.path],
    ["fingerprint", run.fingerprint || "?"], ["agent", run.agent],
    ["crash model", run.crash_model], ["mode", run.mode], ["seed", run.seed],
    ["crashes per schedule", run.crashes],
    ["timeout", timeoutText(run)],
    ["kill points", run.kill_points_explored + " explored of " + run.kill_points_total],
    ["crash states", run.crash_states + " judged, " + run.crash_states_resumed + " resumed, " +
      run.crash_states_escalated + " escalated"],
    ["time", run.seconds.toFixed(1) + " s" + (run.wall_seconds ?
      " (the scenario's whole exploration: " + run.wall_seconds.toFixed(1) + " s)" : "")]]);
  Object.keys(run.schedules || {}).forEach(function (k) {
    var s = run.schedules[k];
    rows.push(["schedules of " + k, s.total + " total, " + s.explored + " explored, " + s.resumed +
      " resumed" + (s.searched ? ", " + s.searched + " searched" : "") + ", " + s.seconds + " s"]);
  });
  if (run.probes.length) rows.push(["probes", run.probes.map(function (p) {
    return p.id + ": " + (p.ok ? "ok" : "VIOLATED"); }).join(", ")]);
  var h = '<table class="facts">' + rows.map(function (x) {
    return "<tr><td>" + esc(x[0]) + '</td><td class="mono">' + esc(x[1]) + "</td></tr>";
  }).join("") + "</table><h4>kill-point categories explored</h4><div class=\"cats\">";
  Object.keys(run.categories).forEach(function (c) {
    var n = run.categories[c];
    h += '<span class="cat' + (n ? "" : " zero") + '">' + esc(c) + " " + n + "</span>";
  });
  return h + "</div>";
}

// A violation's kill-point class: its category, from the map (a first crash) or its id
// (a later crash, in a resumed run: k<event>[.<byte>]-<category>-<what>#<n>).
function categoryOf(d, id) {
  var m = /^k\d+(?:\.\d+)?-(.*)$/.exec(id);
  if (!m) return id;  // the version probe
  var best = "";
  d.cats.forEach(function (c) {
    if ((m[1] === c || m[1].indexOf(c + "-") === 0) && c.length > best.length) best = c;
  });
  return best || m[1];
}
// Near-identical violations (the same invariant, the same kill-point class at each crash)
// are one group, in order of first appearance: its first row shown, the others folded.
function groupsOf(run, d) {
  var groups = [], at = {};
  run.violations.forEach(function (v, i) {
    var cls = v.schedule.map(function (id) { return categoryOf(d, id); }).join(" then ");
    var key = v.invariant + "|" + cls;
    if (!(key in at)) { at[key] = groups.length; groups.push({cls: cls, rows: []}); }
    groups[at[key]].rows.push(i);
  });
  return groups;
}
var PERSISTED = "persisted: what of the agent's writes survived each crash of the schedule " +
  "(one entry per crash, separated by /): under the process model every completed " +
  "operation (a killed process loses nothing the kernel already has); under power loss, " +
  "which unsynced data and directory entries the disk kept";
function violationRow(v, i, hid) {
  return '<tr class="violation' + (hid ? " hid" : "") + '" data-invariant="' +
    esc(v.invariant) + '"><td class="num">' + (i + 1) + '</td><td><span class="inv">' +
    esc(v.invariant) + "</span> " + esc(v.rule) + '</td><td class="mono">' +
    v.schedule.map(esc).join(" then ") + "</td><td>" + esc(v.persisted_each.join(" / ")) +
    '</td><td class="mono tok">' + (v.token ? esc(v.token) + " " + copyButton(v.replay) :
    esc(v.replay)) + "</td></tr>";
}
function violationsHtml(run, r, all) {
  var vs = run.violations;
  if (!vs.length) return '<p class="muted">No violations.</p>';
  var groups = groupsOf(run, decoded[r]), drawn = 0;
  var h = '<table class="viol" id="viol-' + r + '"><tr><th>#</th><th>invariant</th>' +
    '<th>schedule</th><th title="' + esc(PERSISTED) + '">persisted <span class="q">?</span>' +
    "</th><th>replay</th></tr>";
  groups.forEach(function (g, k) {
    var first = vs[g.rows[0]], label = "show " + (g.rows.length > 1 ? "all " +
      g.rows.length : "it");
    h += '<tbody class="grp" id="grp-' + r + "-" + k + '"><tr class="ghead"><td colspan="5">' +
      '<span class="inv">' + esc(first.invariant) + "</span> " +
      esc(plural(g.rows.length, first.schedule.length > 1 ? "schedule" : "crash state")) +
      " at " + esc(g.cls) + ' <span class="muted">· the first: <span class="mono">' +
      first.schedule.map(esc).join(" then ") + "</span></span> " + copyButton(first.replay) +
      ' <button class="expand" data-group="grp-' + r + "-" + k + '" data-label="' + label +
      '">' + label + "</button></td></tr>";
    g.rows.forEach(function (i) {
      if (all || drawn < SHOWN) { h += violationRow(vs[i], i, true); drawn++; }
    });
    h += "</tbody>";
  });
  h += "</table>";
  if (drawn < vs.length) h += '<button class="more" data-run="' + r + '">draw all ' +
    vs.length + " (" + (vs.length - drawn) + " more)</button>";
  return h + '<p class="muted legend-line">' + plural(vs.length, "violation") + " (an entry " +
    "per invariant a crash state or schedule breaks) in " + plural(groups.length, "group") +
    " of the same invariant and kill-point class; " + esc(PERSISTED) + ".</p>";
}

function traceTable(crash) {
  var h = '<table class="trace">';
  crash.trace.forEach(function (t) {
    var killed = t[0] === crash.index;
    var torn = killed && crash.offset != null;
    h += "<tr" + (torn ? ' class="kill"' : "") + '><td class="num mono">#' + t[0] +
      '</td><td class="mono">' + esc(t[1]) + '</td><td class="mono">' + esc(t[2]) +
      '</td><td class="mono muted">' + esc(t[3]) + (torn ? "  ◀ killed inside this write, after " +
      crash.offset + " bytes" : "") + "</td></tr>";
    if (killed && !torn) h += '<tr class="killline"><td colspan="4"></td></tr>' +
      '<tr class="kill"><td></td><td colspan="3">KILL (' + esc(crash.category) + ")</td></tr>";
  });
  if (crash.index === 0) h = '<table class="trace"><tr class="kill"><td colspan="4">KILL before' +
    " the first event</td></tr>" + h.slice('<table class="trace">'.length);
  return h + "</table>";
}

function fileText(f) {
  if (f == null) return '<p class="muted">absent</p>';
  if (f.dir) return '<p class="muted">a directory</p>';
  return '<div class="muted">' + f.bytes + " bytes</div><pre>" + esc(f.text) + "</pre>";
}

function diskHtml(cx) {
  var h = "";
  cx.disk.forEach(function (f) {
    h += '<div class="file"><b class="mono">' + esc(f.path) + "</b>" +
      (f.checkpoint ? '<span class="badge">checkpoint</span>' : "") +
      (f.same === true ? '<span class="badge same">same as the clean run</span>' : "");
    if (f.same === false) {
      h += '<div class="grid2"><div><h4>at the kill</h4>' + fileText(f.crash) +
        "</div><div><h4>the clean run, " + esc(cx.clean_when) + "</h4>" + fileText(f.clean) +
        "</div></div>";
      if (f.diff && f.diff.length) h += '<h4>diff (clean → crash)</h4><pre class="diff">' +
        f.diff.map(function (l) {
          var c = l[0] === "+" && l.indexOf("+++") !== 0 ? "add" :
            l[0] === "-" && l.indexOf("---") !== 0 ? "del" : "";
          return '<span class="' + c + '">' + esc(l) + "</span>";
        }).join("\n") + "</pre>";
    } else h += fileText(f.crash);
    h += "</div>";
  });
  return h || '<p class="muted">nothing on disk</p>';
}

function ledgerTable(entries) {
  if (!entries.length) return '<p class="muted">no calls</p>';
  return '<table class="ledger"><tr><th>#</th><th>inc</th><th>call</th><th>params</th>' +
    "<th>outcome</th></tr>" + entries.map(function (e) {
      return "<tr" + (e.duplicate ? ' class="dup" title="applied more often than in the ' +
        'clean run"' : "") + '><td class="num">' + e.seq + '</td><td class="num">' +
        e.incarnation + '</td><td class="mono">' + esc(e.call) + (e.key ? " key=" + esc(e.key) :
        "") + '</td><td class="mono">' + esc(e.params) + "</td><td>" + esc(e.outcome) +
        (e.duplicate ? " ◀ duplicate" : "") + "</td></tr>";
    }).join("") + "</table>";
}

function counterexampleHtml(cx, r, k) {
  var h = '<section class="card cx" id="cx-' + r + "-" + k + '" data-invariants="' +
    esc(cx.invariants.join(" ")) + '"><h3>Counterexample ' + (k + 1) + " of " +
    esc(runName(R.runs[r])) + " · " + esc(R.runs[r].crash_model) + ": " +
    cx.violations.map(function (v) { return '<span class="inv">' + esc(v.invariant) +
      "</span>"; }).join("") + "</h3>";
  cx.violations.forEach(function (v) {
    h += '<p class="expl"><b>' + esc(v.invariant) + "</b> (" + esc(v.rule) + "): " +
      esc(v.explanation) + "</p>";
  });
  h += "<h4>schedule</h4><ol>" + cx.crashes.map(function (c) {
    return '<li class="mono">' + esc(c.describe) + ' <span class="muted">in ' + esc(c.who) +
      '; <span title="' + esc(PERSISTED) + '">persisted: ' + esc(c.persisted) +
      "</span></span></li>";
  }).join("") + "</ol>";
  cx.crashes.forEach(function (c, n) {
    h += "<h4>trace of " + esc(c.who) + (n ? " (its clean course)" : "") + " around " +
      (cx.crashes.length > 1 ? "crash " + (n + 1) : "the kill") + "</h4>" + traceTable(c);
  });
  h += "<h4>on disk at the " + (cx.crashes.length > 1 ? "last kill" : "kill") +
    (cx.clean_when ? ", beside the clean run " + esc(cx.clean_when) : "") + "</h4>" + diskHtml(cx);
  if (cx.ledger) {
    var extra = Object.keys(cx.ledger.extra), missing = Object.keys(cx.ledger.missing);
    h += "<h4>effects ledger</h4>";
    if (extra.length || missing.length) h += "<p>" + extra.map(function (e) {
      return '<span class="bad-n">extra</span> <code>' + esc(e) + "</code> ×" + cx.ledger.extra[e];
    }).concat(missing.map(function (e) {
      return '<span class="bad-n">missing</span> <code>' + esc(e) + "</code> ×" +
        cx.ledger.missing[e];
    })).join("; ") + "</p>";
    h += '<div class="grid2"><div><h4>the clean run</h4>' + ledgerTable(cx.ledger.clean) +
      "</div><div><h4>the crash run (every incarnation)</h4>" + ledgerTable(cx.ledger.crash) +
      "</div></div>";
    h += "<h4>the resumed run asked the model for</h4><p>" +
      (cx.asked.length ? cx.asked.map(esc).join(", ") : '<span class="muted">nothing</span>') +
      "</p>";
    if (cx.error) h += '<p class="bad-n">resumed run failed: ' + esc(cx.error) + "</p>";
    if (cx.ended) h += "<p>resumed run ended: " + esc(cx.ended.status) + ", final answer <code>" +
      esc((cx.ended.final_answer || "").slice(0, 200)) + "</code></p>";
  }
  h += "<h4>replay</h4>" + cmd(cx.replay);
  if (cx.rerun && cx.rerun !== cx.replay) h += cmd(cx.rerun);
  h += "<details><summary>as the text report prints it</summary><pre>" + esc(cx.text) +
    "</pre></details></section>";
  return h;
}

// A run: its counts, then its counterexamples (the first drawn open, the others folded),
// the crash map, the violations grouped, the facts.
function runHtml(run, r, d) {
  var h = '<section class="card run" id="run-' + r + '" data-run="' + r + '"><h2>' +
    esc(runName(run)) + ' <span class="muted">· ' + esc(run.crash_model) + " · " +
    esc(run.agent) + "</span></h2>" + (run.test ? '<div class="muted mono test">' + esc(run.test) +
    "</div>" : "") + countsHtml(run);
  // what a representative run or a horizon left out (the console's words): never read as
  // an exhaustive pass
  (run.coverage_lines || []).forEach(function (line) {
    h += '<p class="coverage" role="note">' + esc(line) + "</p>";
  });
  (run.counterexamples || []).forEach(function (cx, k) {
    h += k === 0 ? counterexampleHtml(cx, r, k) : '<details class="cxfold"><summary>' +
      "Counterexample " + (k + 1) + ": " + esc(cx.invariants.join(" + ")) + " at " +
      esc(cx.schedule.join(" then ")) + "</summary>" + counterexampleHtml(cx, r, k) +
      "</details>";
  });
  h += "<h3>Crash map</h3><p class=\"muted\">The clean run's events in order, a row per model " +
    "turn and tool call; each square a kill point, coloured by its verdict (the worst of its " +
    "crash states and of the schedules starting there). Click a square for its details; " +
    "untick a colour or a category to dim it.</p>";
  h += legend(d, r) + filters(d, r) + '<div class="counts" id="counts-' + r + '">' +
    countsLine(counts(d)) + "</div>" + mapHtml(d, r) +
    '<div class="pick" id="pick-' + r + '"><span class="muted">Click a kill point.</span></div>';
  h += pairsHtml(run, r, d);
  h += "<h3>Violations (" + run.violations.length + ")</h3><div id=\"violations-" + r + '">' +
    violationsHtml(run, r, false) + "</div>";
  h += "<h3>Run facts</h3>" + factsHtml(run) + "</section>";
  return h;
}

// -- the page ---------------------------------------------------------------------------
mark("parse");
var decoded = R.runs.map(decode);
mark("decode");
var failed = R.runs.filter(function (r) { return !runOk(r); }).length;
var html = '<header class="top"><h1>faultsim report<span class="status ' +
  (R.partial ? "partial" : R.ok ? "ok" : "bad") + '">' + (R.partial ? "partial: " +
  esc(R.partial.reason) : !R.runs.length ? "nothing explored" : R.ok ? "all passed" :
  failed + " of " + R.runs.length + " runs with violations") + '</span></h1><div class="sub">faultsim ' + esc(R.version || "?") +
  " · " + plural(R.runs.length, "run") + "</div></header><nav class=\"toc\">" +
  R.runs.map(function (run, r) {
    return '<a href="#run-' + r + '">' + esc(runName(run)) + " · " + esc(run.crash_model) +
      "</a>";
  }).join("") + '<a href="#not-proven">what a pass does not prove</a></nav><main>';
html += '<section class="card"><h2>Summary</h2>' + summaryTable() + "</section>";
R.runs.forEach(function (run, r) { html += runHtml(run, r, decoded[r]); });
html += '<section class="card" id="not-proven"><h2>What a pass does not prove</h2><ul class="np">' +
  DATA.not_proven.map(function (x) {
    return "<li><b>" + esc(x[0]) + ".</b> " + esc(x[1]) + "</li>";
  }).join("") + "</ul></section></main>";
mark("build");
var style = "";
var labels = {};
decoded.forEach(function (d) { d.labels.forEach(function (l, k) { labels[k] = labels[k] || {}; }); });
decoded.forEach(function (d, r) {
  d.labels.forEach(function (l, k) {
    style += "#map-" + r + " i.v" + k + "{background-color:" + colour(l) + "}" +
      "#map-" + r + ".hv" + k + " i.v" + k + "{opacity:.1}";
  });
  d.cats.forEach(function (c, k) { style += "#map-" + r + ".hk" + k + " i.k" + k + "{opacity:.1}"; });
});
var st = document.createElement("style");
st.textContent = style;
document.head.appendChild(st);
document.getElementById("app").innerHTML = html;
mark("dom");
decoded.forEach(function (d, r) {
  var map = document.getElementById("map-" + r);
  if (map.dataset.lazy) drawLazily(map, d);
});

// -- interaction ------------------------------------------------------------------------
function hidden(r) {
  var box = document.getElementById("run-" + r), off = {v: {}, k: {}};
  box.querySelectorAll("input[data-verdict]").forEach(function (x) { if (!x.checked) off.v[x.dataset.verdict] = 1; });
  box.querySelectorAll("input[data-cat]").forEach(function (x) { if (!x.checked) off.k[x.dataset.cat] = 1; });
  return off;
}
document.addEventListener("change", function (ev) {
  var t = ev.target;
  if (!t.dataset || t.dataset.run == null || (t.dataset.verdict == null && t.dataset.cat == null)) return;
  var r = +t.dataset.run, map = document.getElementById("map-" + r), d = decoded[r];
  var cls = t.dataset.verdict != null ? "hv" + t.dataset.verdict : "hk" + t.dataset.cat;
  map.classList.toggle(cls, !t.checked);
  var off = hidden(r);
  document.getElementById("counts-" + r).innerHTML = countsLine(counts(d, function (i) {
    return !off.v[d.verdict[i]] && !off.k[d.cat[i]];
  }));
});
document.addEventListener("click", function (ev) {
  var t = ev.target;
  if (t.classList && t.classList.contains("copy")) {
    var text = t.dataset.copy;
    var done = function () { t.textContent = "copied"; setTimeout(function () { t.textContent = "copy"; }, 1200); };
    if (navigator.clipboard && navigator.clipboard.writeText)
      navigator.clipboard.writeText(text).then(done, function () { fallbackCopy(text); done(); });
    else { fallbackCopy(text); done(); }
    return;
  }
  if (t.classList && t.classList.contains("expand")) {
    var g = document.getElementById(t.dataset.group), open = !g.classList.contains("open");
    g.classList.toggle("open", open);
    t.textContent = open ? "fold them" : t.dataset.label;
    return;
  }
  if (t.classList && t.classList.contains("more")) {
    var r0 = +t.dataset.run;
    document.getElementById("violations-" + r0).innerHTML = violationsHtml(R.runs[r0], r0, true);
    return;
  }
  if (t.tagName === "I" && t.parentNode.classList.contains("cells")) {
    var seg = t.parentNode.parentNode, map = seg.closest(".map"), r = +map.id.slice(4);
    var i = +seg.dataset.s + Array.prototype.indexOf.call(t.parentNode.children, t);
    var prev = map.querySelector("i.sel");
    if (prev) prev.classList.remove("sel");
    t.classList.add("sel");
    pick(r, i);
  }
});
function fallbackCopy(text) {
  var ta = document.createElement("textarea");
  ta.value = text; document.body.appendChild(ta); ta.select();
  try { document.execCommand("copy"); } catch (e) { /* nothing more to try */ }
  ta.remove();
}
function pick(r, i) {
  var d = decoded[r], run = R.runs[r], label = d.labels[d.verdict[i]], id = d.ids[i];
  var h = '<b style="color:' + colour(label) + '">' + esc(label.split("+").join(" + ")) + "</b>" +
    (d.deep[i] ? " (only when a second crash follows)" : "") + " · " +
    (id ? '<code>' + esc(id) + "</code> · " : "") + esc(d.cats[d.cat[i]]) + " · " +
    esc(describePoint(d, i));
  if (id) {
    var mine = run.violations.filter(function (v) { return v.schedule[0] === id; });
    h += "<div>" + plural(mine.length, "violation") + " from here:</div>";
    mine.slice(0, 5).forEach(function (v) {
      h += '<div class="mono">' + esc(v.invariant) + ": " + esc(v.schedule.join(" then ")) +
        " (" + esc(v.persisted_each.join(" / ")) + ")</div>" + cmd(v.replay);
    });
    if (mine.length > 5) h += '<div class="muted">and ' + (mine.length - 5) + " more in the table below</div>";
    (run.counterexamples || []).forEach(function (cx, k) {
      if (cx.schedule[0] === id) h += '<div><a href="#cx-' + r + "-" + k + '">its counterexample</a></div>';
    });
  }
  document.getElementById("pick-" + r).innerHTML = h;
}
// a link to a section (#cx-0-1) reaches it, a folded counterexample unfolded: the page drew
// itself after the browser looked
function reach(hash) {
  var target = hash && document.getElementById(decodeURIComponent(hash.slice(1)));
  if (!target) return;
  var fold = target.closest("details");
  if (fold) fold.open = true;
  target.scrollIntoView();
}
reach(location.hash);
window.addEventListener("hashchange", function () { reach(location.hash); });
mark("done");
// how long the script took, in ms, per stage (bench/html_report.py reads it)
document.body.dataset.drawMs = JSON.stringify(marks);
document.body.dataset.rendered = "1";
})();
