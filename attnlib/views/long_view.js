// Long view (attnlib/views/long_view.py, METHODS §19): the reduced map of a layer's heads as a heat map (cells of
// D.cell x D.cell tokens, each the largest weight; the heads shown merged by their maximum), and the window of query
// rows whose exact lines are drawn beside it. Drag up or down on the map to choose a window (at most D.maxWindow rows);
// the page that embeds the view (the app's Live page) is told {attnlibWindow: [first, last]} (1-based, inclusive)
// and sends the window's lines back. Click a head number to hide it.
// Data D: title, layer, heads (1-based), colors, n, cell, cells, top (the largest cell: the darkest colour), maps
// (base64 grey PNGs, one per head, 255 = top), quantity, minWeight, maxWindow, window ([start, end) 0-based or null)
// and, with a window, left/right labels, leftPos/rightPos (1-based), lines (pack_sparse [heads, rows, keys]) and reached
// (the keys some line reaches: more than those drawn right when long_view.py's MAX_KEYS cut them).

const mapCv = document.getElementById('map'), cv = document.getElementById('cv');
const SIDE = 512, PAD = 44, TOP = 16, RIGHT = 24;  // the map's size in CSS pixels; room for ticks left, on top, right
const px = SIDE / D.cells;  // CSS pixels per cell
const hidden = new Set();  // heads (indices into D.heads) hidden
let grey = [];  // per head: its cells' grey values, row-major
let band = D.window ? [D.window[0], D.window[1]] : null;  // the window drawn on the map, 0-based [start, end)
let drag = null;  // the token row where a drag started
let active = -1;  // the window's query row (index into D.left) whose lines alone are shown while hovered, or -1

document.getElementById('ttl').textContent = (D.title ? D.title + ' — ' : '') + 'Layer ' + D.layer + ', ' + D.n + ' tokens';
document.getElementById('hint').textContent =
  'The map is drawn in cells of ' + D.cell + '×' + D.cell + ' tokens, each the largest ' + D.quantity +
  ' in its cell (so a strong link is never averaged away); rows are queries, columns keys. Drag up or down on the map ' +
  'to choose a window of at most ' + D.maxWindow + ' rows: its lines are drawn at full resolution.';
document.getElementById('scale').textContent =
  'Colour: darkest = ' + D.top.toPrecision(3) + ' (the largest cell of the heads shown), white = 0.';

// Legend: one coloured number per head, a click hides or shows it.
const lg = document.getElementById('legend');
lg.append('Heads: ');
D.heads.forEach((h, k) => {
  const s = document.createElement('span');
  s.className = 'sw';
  s.style.background = D.colors[k];
  s.textContent = h;
  s.title = 'head ' + h + ' (click to hide/show)';
  s.onclick = () => {
    hidden.has(k) ? hidden.delete(k) : hidden.add(k);
    s.classList.toggle('off');
    drawMap();
    drawWindow();
  };
  lg.append(s);
});

// The heads shown merged: each cell's largest grey value, coloured with BLUES into an image of D.cells a side.
let image = document.createElement('canvas');
function merged() {
  image.width = image.height = D.cells;
  const x = image.getContext('2d'), d = x.createImageData(D.cells, D.cells);
  for (let p = 0; p < D.cells * D.cells; p++) {
    let v = 0;
    for (let k = 0; k < grey.length; k++) if (!hidden.has(k) && grey[k][p] > v) v = grey[k][p];
    const c = BLUES[v];
    d.data[4 * p] = c[0];
    d.data[4 * p + 1] = c[1];
    d.data[4 * p + 2] = c[2];
    d.data[4 * p + 3] = 255;
  }
  x.putImageData(d, 0, 0);
}

const mctx = hidpi(mapCv, PAD + SIDE + RIGHT, TOP + SIDE + 4);
// y (or x) in CSS pixels of token position t (0-based)
const at = t => t / D.cell * px;

function drawMap() {
  merged();
  mctx.fillStyle = THEME.bg;
  mctx.fillRect(0, 0, PAD + SIDE + RIGHT, TOP + SIDE + 4);
  mctx.imageSmoothingEnabled = false;
  mctx.drawImage(image, PAD, TOP, SIDE, SIDE);
  mctx.strokeStyle = THEME.frame;
  mctx.strokeRect(PAD - .5, TOP - .5, SIDE + 1, SIDE + 1);
  // ticks: every quarter of the input, 1-based positions
  mctx.fillStyle = THEME.muted;
  mctx.font = '10px system-ui,sans-serif';
  for (let q = 0; q <= 4; q++) {
    const t = Math.min(D.n - 1, Math.round(q * (D.n - 1) / 4)), y = TOP + at(t + .5);
    mctx.textAlign = 'right';
    mctx.textBaseline = 'middle';
    mctx.fillText(String(t + 1), PAD - 4, y);
    mctx.textAlign = q === 0 ? 'left' : q === 4 ? 'right' : 'center';
    mctx.textBaseline = 'alphabetic';
    mctx.fillText(String(t + 1), q === 4 ? PAD + SIDE : q === 0 ? PAD : PAD + at(t + .5), TOP - 4);
  }
  if (band) {  // the window: a frame across the map over its rows
    mctx.strokeStyle = '#d62728';
    mctx.lineWidth = 2;
    const y = TOP + at(band[0]), h = Math.max(2, at(band[1]) - at(band[0]));
    mctx.strokeRect(PAD + 1, y, SIDE - 2, h);
    mctx.lineWidth = 1;
  }
}

// The token row (0-based) under a pointer event on the map, clamped to the input.
function rowAt(e) {
  const r = mapCv.getBoundingClientRect();
  return Math.max(0, Math.min(D.n - 1, Math.floor((e.clientY - r.top - TOP) / px * D.cell)));
}
function colAt(e) {
  const r = mapCv.getBoundingClientRect();
  return Math.floor((e.clientX - r.left - PAD) / px * D.cell);
}

// The window from a drag between rows a and b: at most D.maxWindow rows, from where the drag started.
function windowOf(a, b) {
  if (b >= a) return [a, Math.min(b + 1, a + D.maxWindow, D.n)];
  return [Math.max(b, a - D.maxWindow + 1, 0), a + 1];
}

mapCv.onmousedown = e => {
  drag = rowAt(e);
  band = windowOf(drag, drag);
  drawMap();
  e.preventDefault();
};
mapCv.onmousemove = e => {
  const row = rowAt(e), col = colAt(e);
  if (drag !== null) {
    band = windowOf(drag, row);
    drawMap();
  }
  if (col < 0 || col >= D.n) return tip(e, null);
  const ci = Math.floor(row / D.cell), cj = Math.floor(col / D.cell), lines = [];
  lines.push('queries ' + (ci * D.cell + 1) + '–' + Math.min(D.n, (ci + 1) * D.cell) +
    ', keys ' + (cj * D.cell + 1) + '–' + Math.min(D.n, (cj + 1) * D.cell));
  grey.forEach((g, k) => {
    if (!hidden.has(k)) lines.push('head ' + D.layer + '-' + D.heads[k] + ': largest ≈ ' + (g[ci * D.cells + cj] / 255 * D.top).toPrecision(2));
  });
  tip(e, lines.join('\n'));
};
mapCv.onmouseleave = e => tip(e, null);
window.addEventListener('mouseup', () => {
  if (drag === null) return;
  drag = null;
  if (!band) return;
  document.getElementById('wcap').textContent = 'Window ' + (band[0] + 1) + '–' + band[1] + ': loading its lines…';
  // the page that embeds the view (the Live page) computes the window's rows and draws the view again
  if (window.parent !== window) window.parent.postMessage({attnlibWindow: [band[0] + 1, band[1]]}, '*');
});

// The window's lines: its query tokens on the left, the keys they reach on the right (in order; a gap in positions
// is marked by a rule), one colour per head. The canvas is only as tall as the scroll box shows (VIEW px at most),
// kept in view (sticky) above a spacer as tall as the rest, and drawn again for what a scroll shows: Chromium
// rasterizes a canvas of thousands of rows of lines and labels for seconds, a box-high one at once.
const ROW = 14, FONT = '11px system-ui,sans-serif', VIEW = 640, box = document.getElementById('box');
let S = null, ctx = null, W = 0, H = 0, VH = 0, g = null, wl = 0, wr = 0, xr = 0;
function layoutWindow() {
  if (!D.window) {
    document.getElementById('wcap').textContent = 'No window: drag on the map to choose one.';
    document.getElementById('box').style.display = 'none';
    return;
  }
  S = unpack(D.lines);
  const probe = cv.getContext('2d');
  probe.font = FONT;
  const left = D.left.map((s, i) => D.leftPos[i] + ' ' + s), right = D.right.map((s, j) => D.rightPos[j] + ' ' + s);
  wl = labelWidth(probe, left, 160);
  wr = labelWidth(probe, right, 160);
  const x1 = 8 + wl + 8, x2 = x1 + 220;
  xr = x2 + 8;
  W = xr + wr + 8;
  H = 4 + ROW * Math.max(D.left.length, D.right.length, 1) + 6;
  g = {x1: x1, x2: x2, y0: 4, rowL: ROW, rowR: ROW, lw: 1.5};
  VH = Math.min(H, VIEW);
  ctx = hidpi(cv, W, VH);
  document.getElementById('spacer').style.height = (H - VH) + 'px';
  D.leftText = left;
  D.rightText = right;
  document.getElementById('wcap').textContent = 'Window: query rows ' + (D.window[0] + 1) + '–' + D.window[1] +
    ' at full resolution, lines from ' + D.minWeight + ' (' + (D.reached > D.right.length
      ? 'of the ' + D.reached + ' keys they reach, the ' + D.right.length + ' with the strongest lines; lines to the others are not drawn'
      : D.right.length + ' keys reached') + '; hover a query token to see only its lines).';
}

function drawWindow() {
  if (!ctx) return;
  const off = box.scrollTop, first = Math.max(0, Math.floor((off - g.y0) / ROW)), last = Math.ceil((off + VH) / ROW);
  ctx.fillStyle = THEME.bg;
  ctx.fillRect(0, 0, W, VH);
  ctx.save();
  ctx.translate(0, -off);
  ctx.font = FONT;
  ctx.textBaseline = 'middle';
  if (active >= 0) {
    ctx.fillStyle = THEME.hover;
    ctx.fillRect(4, g.y0 + ROW * active, g.x1 - 8, ROW);
  }
  ctx.fillStyle = THEME.ink;
  ctx.textAlign = 'right';
  for (let i = first; i < Math.min(last, D.leftText.length); i++) {
    ctx.fillText(fit(ctx, D.leftText[i], wl), g.x1 - 6, g.y0 + ROW * (i + .5));
  }
  ctx.textAlign = 'left';
  for (let j = first; j < Math.min(last, D.rightText.length); j++) {
    ctx.fillText(fit(ctx, D.rightText[j], wr), xr, g.y0 + ROW * (j + .5));
    if (j > 0 && D.rightPos[j] !== D.rightPos[j - 1] + 1) {  // a gap in key positions
      ctx.fillRect(xr, g.y0 + ROW * j, wr, .5);
    }
  }
  for (let k = 0; k < D.heads.length; k++) if (!hidden.has(k)) drawLines(ctx, S, k, D.colors[k], g, active);
  ctx.restore();
}
let scrolled = false;
box.onscroll = () => {
  if (scrolled) return;
  scrolled = true;
  requestAnimationFrame(() => {
    scrolled = false;
    drawWindow();
  });
};

// Hover a query token of the window to see only its lines.
cv.onmousemove = e => {
  if (!ctx) return;
  const r = cv.getBoundingClientRect(), row = Math.floor((e.clientY - r.top + box.scrollTop - g.y0) / ROW);
  const over = e.clientX - r.left < g.x1 && row >= 0 && row < D.left.length ? row : -1;
  if (over !== active) {
    active = over;
    drawWindow();
  }
  tip(e, over >= 0 ? D.leftText[over] + '  (position ' + D.leftPos[over] + ')' : null);
};
cv.onmouseleave = e => {
  tip(e, null);
  if (active >= 0) {
    active = -1;
    drawWindow();
  }
};

document.getElementById('png').onclick = () => savePNG([mapCv, cv], 'long-view-layer-' + D.layer);

// Decode every head's map, then draw; the time from the view's navigation start to its first full drawing is kept
// in document.body.dataset.drawMs (the tests and the benchmark read it).
let left = D.maps.length;
D.maps.forEach((b64, k) => grayImage(b64, (_, vals) => {
  grey[k] = vals;
  if (--left > 0) return;
  drawMap();
  layoutWindow();
  drawWindow();
  document.body.dataset.drawMs = String(Math.round(performance.now()));
}));
