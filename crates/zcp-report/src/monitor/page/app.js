// zcp serve's status page: polls /api/sessions once a second. Everything that came from the
// network (paths, reasons, names) enters the document as text (textContent), never as markup.
"use strict";

const POLL_MS = 1000;

function units(n, names, base) {
  let i = 0;
  while (n >= base && i < names.length - 1) { n /= base; i++; }
  return (i === 0 ? String(Math.round(n)) : n.toFixed(n < 10 ? 2 : 1)) + " " + names[i];
}
const size = (n) => units(n, ["B", "KiB", "MiB", "GiB", "TiB", "PiB"], 1024);
const bits = (n) => units(n, ["bit/s", "kbit/s", "Mbit/s", "Gbit/s", "Tbit/s"], 1000);

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

function renderActive(active) {
  const body = document.querySelector("#active tbody");
  const rows = [];
  for (const s of active) {
    const tr = document.createElement("tr");
    tr.dataset.session = s.session;
    cell(tr, s.peer);
    cell(tr, s.identity);
    cell(tr, s.export);
    cell(tr, s.direction);
    cell(tr, s.phase);
    const p = cell(tr, "");
    if (s.total_bytes) {
      const bar = document.createElement("progress");
      bar.max = s.total_bytes;
      bar.value = Math.min(s.bytes, s.total_bytes);
      p.appendChild(bar);
      p.appendChild(document.createTextNode(" " + size(s.bytes) + " / " + size(s.total_bytes)));
    } else {
      p.appendChild(document.createTextNode(size(s.bytes)));
    }
    p.className = "progress";
    cell(tr, s.total_files ? s.files + " / " + s.total_files : s.files);
    cell(tr, bits(s.rate_bps));
    cell(tr, s.sender_engine ? s.sender_engine + " → " + s.receiver_engine : "");
    cell(tr, s.last, "name");
    rows.push(tr);
  }
  body.replaceChildren(...rows);
  document.getElementById("active-count").textContent = "(" + active.length + ")";
}

function renderRecent(recent, uptime) {
  const body = document.querySelector("#recent tbody");
  const rows = [];
  for (const r of recent) {
    const tr = document.createElement("tr");
    cell(tr, Math.max(0, Math.round(uptime - r.at)) + " s ago");
    cell(tr, r.count > 1 ? r.count + " files" : r.kind);
    cell(tr, r.count > 1 ? r.name + " and " + (r.count - 1) + " before it" : r.name, "name");
    cell(tr, r.identity);
    cell(tr, r.export);
    cell(tr, r.direction);
    cell(tr, size(r.bytes));
    cell(tr, r.seconds.toFixed(1));
    const o = cell(tr, r.reason ? r.outcome + ": " + r.reason : r.outcome);
    o.className = r.outcome === "ok" ? "ok" : "bad";
    rows.push(tr);
  }
  body.replaceChildren(...rows);
}

// The seconds the chart's scale follows: an old spike must not flatten what runs now for ten
// minutes. Older samples above the scale are clipped at the top.
const SCALE_SECONDS = 120;

// The top of the chart's scale: the highest sample of the last SCALE_SECONDS with a little
// room, rounded up to 1, 2 or 5 times a power of ten.
function chartScale(samples, sampleSeconds) {
  const n = Math.max(1, Math.ceil(SCALE_SECONDS / Math.max(1, sampleSeconds)));
  const v = Math.max(1, ...samples.slice(-n)) * 1.05;
  const e = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5]) if (v <= m * e) return m * e;
  return 10 * e;
}

// The throughput chart, drawn on the canvas: the last ten minutes of per-second samples,
// newest at the right edge.
function drawChart(samples, sampleSeconds) {
  const canvas = document.getElementById("chart");
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height;
  const left = 80, bottom = 20, top = 10;
  const span = 600;
  ctx.clearRect(0, 0, w, h);
  ctx.font = "11px sans-serif";
  ctx.fillStyle = "#777";
  ctx.strokeStyle = "#eee";
  const max = chartScale(samples, sampleSeconds);
  for (let i = 0; i <= 4; i++) {
    const y = top + (h - top - bottom) * (1 - i / 4);
    ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(w, y); ctx.stroke();
    ctx.fillText(bits((max * i) / 4), 4, y + 4);
  }
  for (let m = 0; m <= 10; m += 2) {
    const x = left + (w - left) * (1 - (m * 60) / span);
    ctx.textAlign = m === 0 ? "right" : m === 10 ? "left" : "center";
    ctx.fillText(m === 0 ? "now" : "-" + m + " min", x, h - 4);
  }
  ctx.textAlign = "left";
  const n = samples.length;
  if (n > 0) {
    const x = (i) => left + (w - left) * (1 - ((n - 1 - i) * sampleSeconds) / span);
    const y = (v) => top + (h - top - bottom) * (1 - Math.min(v, max) / max);
    ctx.beginPath();
    ctx.moveTo(x(0), y(0));
    for (let i = 0; i < n; i++) ctx.lineTo(x(i), y(samples[i]));
    ctx.lineTo(x(n - 1), y(0));
    ctx.closePath();
    ctx.fillStyle = "rgba(31, 119, 180, 0.25)";
    ctx.fill();
    ctx.beginPath();
    for (let i = 0; i < n; i++) ctx.lineTo(x(i), y(samples[i]));
    ctx.strokeStyle = "#1f77b4";
    ctx.stroke();
  }
  canvas.dataset.points = String(n);
  canvas.dataset.max = String(max);
}

async function poll() {
  const state = document.getElementById("state");
  try {
    const res = await fetch("/api/sessions", { cache: "no-store" });
    if (!res.ok) throw new Error("HTTP " + res.status);
    const doc = await res.json();
    renderActive(doc.active);
    renderRecent(doc.recent, doc.uptime);
    drawChart(doc.samples, doc.sample_seconds);
    document.getElementById("rate").textContent = bits(doc.rate_bps);
    state.textContent = "up " + Math.round(doc.uptime) + " s";
    state.className = "muted";
  } catch (e) {
    state.textContent = "no answer from the server (" + e.message + ")";
    state.className = "bad";
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

poll();
