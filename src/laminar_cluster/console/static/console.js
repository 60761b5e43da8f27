// The console page: polls /api/cluster every second and redraws each section from the
// document (views/console_feed.py). No framework, no build step.
"use strict";

const POLL_MS = 1000;
const PALETTE = ["#4a6fa5", "#d98c4a", "#2e8b57", "#9b6fc4", "#c0392b", "#3a9fb0",
  "#b7791f", "#6b8e23", "#a0522d", "#5f6caf", "#cc5a8f", "#708090"];

const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "style") node.style.cssText = value;
    else if (name === "class") node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) node.append(child);
  return node;
}

function colorOf(node) {
  return node ? PALETTE[(node - 1) % PALETTE.length] : "#c9cdd6";
}

function seconds(ms) {
  return ms === null || ms === undefined ? "?" : `${(ms / 1000).toFixed(1)} s`;
}

function clock(ms) {
  return new Date(ms).toLocaleTimeString();
}

function rows(tbody, items, cells) {
  tbody.replaceChildren(...items.map((item) => {
    const row = el("tr");
    for (const cell of cells(item)) row.append(cell instanceof Node ? el("td", {}, cell) : el("td", {}, String(cell)));
    return row;
  }));
}

function drawLeader(doc) {
  const leader = doc.leader;
  const p = $("leader");
  const live = Boolean(leader && leader.live);
  p.dataset.leaderNode = live ? leader.node : "";
  p.classList.toggle("stale", Boolean(leader) && !live);
  p.textContent = !leader
    ? "no leader"
    : live
      ? `node ${leader.node} leads with fencing token ${leader.token} (head record ${seconds(leader.record_age_ms)} old, sequence ${leader.sequence})`
      : `no live leader (last: node ${leader.node}, token ${leader.token}, head record ${seconds(leader.record_age_ms)} old; ${leader.why})`;
  const terms = doc.history.terms;
  const box = $("terms");
  if (!terms.length) { box.replaceChildren(); return; }
  const start = terms[0].from_ms;
  const span = Math.max(1, doc.observed_at_ms - start);
  box.replaceChildren(...terms.map((term, i) => {
    const end = i + 1 < terms.length ? terms[i + 1].from_ms : doc.observed_at_ms;
    const left = (100 * (term.from_ms - start)) / span;
    const width = Math.max(0.5, (100 * (end - term.from_ms)) / span);
    return el("div", {
      class: "term", title: `token ${term.token}: node ${term.node}`,
      "data-token": term.token, "data-node": term.node,
      style: `left:${left}%;width:${width}%;background:${colorOf(term.node)}`,
    }, `${term.token}: n${term.node}`);
  }));
}

function drawMembers(doc) {
  const rates = Object.fromEntries(doc.rates.nodes.map((r) => [r.node, r]));
  rows($("members").tBodies[0], doc.members, (m) => {
    const rate = rates[m.node];
    const total = rate ? Object.values(rate.per_s).reduce((a, b) => a + b, 0) : null;
    const leads = doc.leader && doc.leader.node === m.node;
    return [
      el("span", {}, el("span", { class: "swatch", style: `background:${colorOf(m.node)}` }),
        `${m.node}${leads ? " ★" : ""}`),
      el("span", { class: `state-${m.state}` }, m.state),
      m.term, `${m.unchanged_s.toFixed(1)} s`, m.vnodes,
      m.report ? m.report.assignment_version : "?",
      m.report ? m.report.restoring : "?",
      total === null ? "?" : total.toFixed(1),
    ];
  });
  for (const [i, m] of doc.members.entries()) {
    const row = $("members").tBodies[0].rows[i];
    row.dataset.node = m.node;
    row.dataset.state = m.state;
  }
}

function drawVnodes(doc) {
  const v = doc.vnodes;
  const map = $("heatmap");
  if (!v) { map.replaceChildren(); $("vnodes-version").textContent = ""; return; }
  $("vnodes-version").textContent = `version ${v.version}${v.draining ? " (draining)" : ""}`;
  const restoring = new Set(v.restoring);
  map.replaceChildren(...v.owners.map((owner, vnode) => {
    const from = v.from ? v.from[vnode] : null;
    const classes = ["cell"];
    if (from !== null) classes.push("moving");
    if (restoring.has(vnode)) classes.push("restoring");
    const what = from !== null ? `node ${from} -> ${owner}` : `node ${owner}`;
    return el("div", {
      class: classes.join(" "), "data-vnode": vnode, "data-owner": owner,
      title: `vnode ${vnode}: ${what}${restoring.has(vnode) ? ", restoring" : ""}`,
      style: `background-color:${colorOf(from !== null ? from : owner)}`,
    }, from !== null ? String(owner) : "");
  }));
  const counts = {};
  for (const owner of v.owners) counts[owner] = (counts[owner] || 0) + 1;
  const legend = Object.entries(counts).map(([node, count]) => el("span", {},
    el("span", { class: "swatch", style: `background:${colorOf(Number(node))}` }),
    `node ${node}: ${count}`));
  legend.push(el("span", {}, el("span", { class: "swatch cell moving" }), "moving (shows the target)"));
  legend.push(el("span", {}, el("span", { class: "swatch cell restoring", style: "background-color:#7a8090" }),
    `restoring: ${v.restoring.length}`));
  $("legend").replaceChildren(...legend);
}

function drawAssignment(doc) {
  const a = doc.assignment;
  $("assignment").textContent = !a ? "no assignment yet"
    : `version ${a.head_version}, ${a.draining ? `draining v${a.drain ? a.drain.from_version : "?"} -> v${a.drain ? a.drain.to_version : "?"}` : "committed"}, ${a.vnode_count} vnodes`;
  const decisions = doc.history.decisions.slice(-12).reverse();
  rows($("decisions").tBodies[0], decisions, (d) => [
    d.target_version, d.kind, d.verdict || "-", d.leader, d.token, clock(d.at_ms)]);
}

function drawCheckpoints(doc) {
  const c = doc.checkpoint;
  $("checkpoint").textContent = !c ? "none committed"
    : `last commit: epoch ${c.epoch}, ${seconds(c.age_ms)} ago, ${c.committed_events.toLocaleString()} events committed in all`;
  const recent = doc.history.checkpoints.slice(-60);
  const longest = Math.max(1, ...recent.map((r) => r.duration_ms || 0));
  $("checkpoints").replaceChildren(...recent.map((r) => el("div", {
    class: `bar ${r.verdict}`, "data-epoch": r.epoch,
    title: `epoch ${r.epoch} ${r.verdict}, ${r.duration_ms === null ? "duration unknown" : r.duration_ms + " ms"}, ${r.events === null ? "?" : r.events} events, at ${clock(r.at_ms)}`,
    style: `height:${Math.max(3, (100 * (r.duration_ms || 0)) / longest)}%`,
  }, el("span", {}, r.events === null ? "" : String(r.events)))));
}

function hbars(box, items) {
  const largest = Math.max(1e-9, ...items.map((i) => i.value));
  box.replaceChildren(...items.map((i) => el("div", { class: "row" },
    el("span", { class: "label" }, i.label),
    el("span", { class: `fill ${i.kind || ""}`, style: `width:${(70 * i.value) / largest}%` }),
    el("span", { class: "dim" }, i.text))));
}

function drawLag(doc) {
  const lag = doc.lag;
  $("lag").textContent = lag.known ? `${lag.total.toLocaleString()} events behind in all` : "unknown";
  const worst = (lag.partitions || []).slice().sort((a, b) => b.lag - a.lag).slice(0, 8);
  hbars($("lag-bars"), worst.map((p) => ({
    label: `partition ${p.partition}`, value: p.lag, text: p.lag.toLocaleString() })));
}

function drawRates(doc) {
  const kinds = doc.rates.kinds;
  hbars($("rates"), kinds.map((kind) => ({
    label: kind, kind, value: doc.rates.total_per_s[kind],
    text: `${doc.rates.total_per_s[kind].toFixed(1)}/s` })));
  const cost = doc.cost;
  $("cost").textContent = `this page's last refresh: ${cost.total} store requests (${
    Object.entries(cost.requests).map(([k, n]) => `${k} ${n}`).join(", ")})`;
}

function drawProblems(doc) {
  const items = doc.problems.map((p) => el("li", { class: "problem" },
    `${p.object || p.section}: ${p.error}`));
  items.push(...doc.notes.map((n) => el("li", { class: "dim" }, n)));
  $("problems").replaceChildren(...items);
}

function draw(doc) {
  $("store").textContent = doc.store;
  const health = $("health");
  // Problems first, then what `status --check` says (no live leader), else ok.
  const trouble = doc.problems.length ? `${doc.problems.length} problem(s)` : doc.check;
  health.textContent = trouble || "ok";
  health.className = `badge ${trouble ? "bad" : "ok"}`;
  $("updated").textContent = `updated ${clock(doc.observed_at_ms)}`;
  for (const part of [drawLeader, drawMembers, drawVnodes, drawAssignment, drawCheckpoints,
    drawLag, drawRates, drawProblems]) {
    try { part(doc); } catch (error) { console.error(part.name, error); }
  }
  document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
}

async function poll() {
  try {
    const response = await fetch("/api/cluster", { cache: "no-store" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    draw(await response.json());
  } catch (error) {
    const health = $("health");
    health.textContent = `console unreachable: ${error.message}`;
    health.className = "badge bad";
  }
  setTimeout(poll, POLL_MS);
}

poll();
