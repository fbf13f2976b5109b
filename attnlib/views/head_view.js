// Head view (attnlib/views/head_view.py): query tokens on the left, key tokens on the right, a line from each query to
// each key with opacity = weight, one colour per head. Hover a left token to see only its lines; click to pin it.
// With several layers, a picker switches between them (the arrow keys too, once the picker has the focus); with several
// kinds of attention (encoder, decoder, cross; a pair's filters), a select switches between those.
// Data D: title, layer (the one shown first), minWeight, quantity (what a line's opacity shows), selected (left row or
// -1) and selRows (exact weights of the selected row, [layer * head][key]), theme; and each kind's fields (KINDS,
// canvas_common.js): name, layers and heads (1-based), colors, left/right labels and positions, lines (pack_sparse of
// every layer's heads, layer-major: map li * heads + k). Cross attention's maps are not square: left and right differ.

const cv = document.getElementById('cv'), y0 = 4, unpacked = new Map();
let K, Lb, Rb, m, S, li;  // the kind shown, its labels, its number of heads, its lines, the index of its layer shown
let ROW, FONT, wl, wr, x1, x2, xr, bx, W, Hh, g, ctx;  // geometry of the kind shown (layout)
const scrollBox = document.getElementById('box');  // the canvas's box: it scrolls what does not fit

// pinned: the clicked row (-1 for none); active: the row whose lines are shown (pinned, hovered, or -1 for all rows)
let pinned = D.selected, active = D.selected;
const hidden = new Set();  // heads (indices into K.heads) switched off in the legend

// Geometry: smaller rows and font for long inputs; labels, the lines, the right labels, then a bar per head. The
// lines span SPAN px where the page has room; in a narrower page (a view in a column) they span what is left, down to
// MIN_SPAN, then the margins narrow and the labels are cut to fit (ended with '…'): the view fits the box's width,
// measured again when the page is resized or a vertical scroll bar takes some of it.
const SPAN = 240, MIN_SPAN = 40;
function layout() {
  const big = Math.max(Lb.length, Rb.length) > 120;
  ROW = big ? 14 : 18;
  FONT = (big ? 11 : 12) + 'px system-ui,sans-serif';
  const probe = cv.getContext('2d');
  probe.font = FONT;
  Hh = y0 + ROW * Math.max(Lb.length, Rb.length, 1) + 6;
  for (let tries = 0; tries < 2; tries++) {
    const room = scrollBox.clientWidth || Infinity;  // 0 before the page is laid out: the natural width
    fitWidth(probe, room);
    ctx = hidpi(cv, W, Hh);
    if (scrollBox.clientWidth >= room) break;  // else a vertical scroll bar appeared: fit what is left
  }
  g = {x1: x1, x2: x2, y0: y0, rowL: ROW, rowR: ROW, lw: 2};
}

// The horizontal geometry in `room` px: margins pad, the label columns wl and wr, the lines from x1 to x2, the bars.
function fitWidth(probe, room) {
  const bars = Math.max(m, 1) * 12;
  wl = labelWidth(probe, Lb, 150);
  wr = labelWidth(probe, Rb, 150);
  let pad = 8, span = Math.min(SPAN, room - (5 * pad + 4 + bars) - wl - wr);
  if (span < MIN_SPAN) {
    pad = 4;
    const labels = room - (5 * pad + 4 + bars) - MIN_SPAN;  // what the two columns of labels may take
    if (wl + wr > labels) {
      const cut = Math.max(labels, 40) / (wl + wr);
      wl = Math.max(20, Math.floor(wl * cut));
      wr = Math.max(20, Math.floor(wr * cut));
    }
    span = Math.max(MIN_SPAN, Math.min(SPAN, room - (5 * pad + 4 + bars) - wl - wr));
  }
  x1 = pad + wl + pad;
  x2 = x1 + span;
  xr = x2 + pad;
  bx = xr + wr + pad + 4;
  W = bx + bars + pad;
}

window.addEventListener('resize', () => {
  layout();
  draw();
});

// The title with the layer, or with several layers the title and a picker of the layer.
function layerPicker() {
  const box = document.getElementById('layers'), ttl = document.getElementById('ttl');
  box.replaceChildren();
  if (K.layers.length === 1) {
    ttl.textContent = (D.title ? D.title + ' — ' : '') + 'Layer ' + K.layers[0];
    return;
  }
  ttl.textContent = D.title;
  const pick = document.createElement('select');
  pick.id = 'layer';
  pick.title = 'layer shown';
  K.layers.forEach((l, i) => pick.add(new Option('Layer ' + l, i, false, i === li)));
  pick.onchange = () => {
    li = +pick.value;
    draw();
  };
  box.append(pick);
}

// Legend: one coloured number per head, a click hides or shows that head.
function legend() {
  const lg = document.getElementById('legend');
  lg.replaceChildren('Heads: ');
  K.heads.forEach((h, k) => {
    const s = document.createElement('span');
    s.className = 'sw';
    s.style.background = K.colors[k];
    s.textContent = h;
    s.title = 'head ' + h + ' (click to hide/show)';
    s.onclick = () => {
      hidden.has(k) ? hidden.delete(k) : hidden.add(k);
      s.classList.toggle('off');
      draw();
    };
    lg.append(s);
  });
}

// Show kind k of KINDS on the layer shown before (or its first), every head on, no row pinned but D.selected at first.
function showKind(k) {
  const layer = K ? K.layers[li] : D.layer;
  K = KINDS[k];
  Lb = K.left;
  Rb = K.right;
  m = K.heads.length;
  if (!unpacked.has(k)) unpacked.set(k, unpack(K.lines));
  S = unpacked.get(k);
  li = Math.max(0, K.layers.indexOf(layer));
  hidden.clear();
  if (K !== D) pinned = active = -1;
  layerPicker();
  legend();
  layout();
  draw();
}

document.getElementById('hint').textContent =
  'Line opacity = ' + D.quantity + '. Hover a token on the left to see only its lines, click it to pin (click again to unpin); ' +
  'click a head number to hide it. Lines below ' + D.minWeight + ' are not drawn. Positions and heads are numbered from 1.';

// Weight of head k (of the layer drawn) from left row i to right column j: exact for the selected row, else the byte
// of the sparse map.
function weight(k, i, j) {
  if (i === D.selected && D.selRows) return D.selRows[li * m + k][j];
  const r = (li * m + k) * S.rows + i;
  for (let e = S.start[r]; e < S.start[r + 1]; e++) if (S.col[e] === j) return S.w[e] / 255;
  return 0;
}

function draw() {
  ctx.fillStyle = THEME.bg;
  ctx.fillRect(0, 0, W, Hh);
  ctx.font = FONT;
  ctx.textBaseline = 'middle';
  if (active >= 0) {  // highlight the active row, stronger when pinned
    ctx.fillStyle = pinned >= 0 ? THEME.pinned : THEME.hover;
    ctx.fillRect(4, y0 + ROW * active, x1 - 8, ROW);
  }
  ctx.fillStyle = THEME.ink;
  ctx.textAlign = 'right';
  Lb.forEach((s, i) => ctx.fillText(fit(ctx, s, wl), x1 - 6, y0 + ROW * (i + .5)));
  ctx.textAlign = 'left';
  Rb.forEach((s, j) => ctx.fillText(fit(ctx, s, wr), xr, y0 + ROW * (j + .5)));
  for (let k = 0; k < m; k++) if (!hidden.has(k)) drawLines(ctx, S, li * m + k, K.colors[k], g, active);
  if (active >= 0) {  // right of the key labels: one bar per head, opacity = weight from the active row
    for (let j = 0; j < Rb.length; j++) {
      for (let k = 0; k < m; k++) {
        if (hidden.has(k)) continue;
        const w = weight(k, active, j);
        if (w <= 0) continue;
        ctx.globalAlpha = Math.min(1, w);
        ctx.fillStyle = K.colors[k];
        ctx.fillRect(bx + 12 * k, y0 + ROW * j + 2, 10, ROW - 4);
      }
    }
    ctx.globalAlpha = 1;
  }
}

kindPicker(showKind);
showKind(0);

cv.onmousemove = e => {
  const r = cv.getBoundingClientRect(), x = e.clientX - r.left, row = Math.floor((e.clientY - r.top - y0) / ROW);
  if (x < x1 && row >= 0 && row < Lb.length) {  // over a query token: show its lines unless one is pinned
    if (pinned < 0 && active !== row) {
      active = row;
      draw();
    }
    tip(e, Lb[row] + '  (position ' + K.leftPos[row] + ')');
    return;
  }
  if (x >= xr && active >= 0 && row >= 0 && row < Rb.length) {  // over a key token: the weight of every head
    const lines = [Lb[active] + ' → ' + Rb[row] + '  (position ' + K.rightPos[row] + ')'];
    for (let k = 0; k < m; k++) {
      if (!hidden.has(k)) {
        const w = weight(k, active, row);
        lines.push('head ' + K.layers[li] + '-' + K.heads[k] + ': ' + (w >= 0.001 ? w.toFixed(3) : '<' + D.minWeight));
      }
    }
    tip(e, lines.join('\n'));
    return;
  }
  tip(e, null);
};

cv.onmouseleave = e => {
  tip(e, null);
  if (pinned < 0 && active !== -1) {
    active = -1;
    draw();
  }
};

cv.onclick = e => {
  const r = cv.getBoundingClientRect(), x = e.clientX - r.left, row = Math.floor((e.clientY - r.top - y0) / ROW);
  if (x < x1 && row >= 0 && row < Lb.length) {
    pinned = pinned === row ? -1 : row;
    active = row;
    draw();
    // A page that embeds the view (the app's Live page) may listen: the pinned query position, 1-based, 0 for none.
    if (window.parent !== window) window.parent.postMessage({ attnlibPick: pinned < 0 ? 0 : K.leftPos[pinned] }, '*');
  }
};

document.getElementById('png').onclick = () => savePNG([cv], 'head-view-layer-' + K.layers[li]);
