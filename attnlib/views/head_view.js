// Head view (attnlib/views/head_view.py): query tokens on the left, key tokens on the right, a line from each query to
// each key with opacity = weight, one colour per head. Hover a left token to see only its lines; click to pin it.
// With several layers, a picker switches between them (the arrow keys too, once the picker has the focus).
// Data D: title, layer (the one shown first), layers and heads (1-based), colors, left/right labels and positions,
// lines (pack_sparse of every layer's heads, layer-major: map li * heads + k), minWeight, quantity (what a line's
// opacity shows), selected (left row or -1) and selRows (exact weights of the selected row, [layer * head][key]).

const Lb = D.left, Rb = D.right, m = D.heads.length, S = unpack(D.lines), cv = document.getElementById('cv');
let li = D.layers.indexOf(D.layer);  // index into D.layers of the layer drawn

// Geometry: smaller rows and font for long inputs; labels, the lines, the right labels, then a bar per head.
const big = Math.max(Lb.length, Rb.length) > 120, ROW = big ? 14 : 18, FONT = (big ? 11 : 12) + 'px system-ui,sans-serif';
const probe = cv.getContext('2d');
probe.font = FONT;
const wl = labelWidth(probe, Lb, 150), wr = labelWidth(probe, Rb, 150);
const x1 = 8 + wl + 8, x2 = x1 + 240, xr = x2 + 8, bx = xr + wr + 12, W = bx + Math.max(m, 1) * 12 + 8;
const y0 = 4, Hh = y0 + ROW * Math.max(Lb.length, Rb.length, 1) + 6;
const g = {x1: x1, x2: x2, y0: y0, rowL: ROW, rowR: ROW, lw: 2};

// pinned: the clicked row (-1 for none); active: the row whose lines are shown (pinned, hovered, or -1 for all rows)
let pinned = D.selected, active = D.selected;
const hidden = new Set();  // heads (indices into D.heads) switched off in the legend

// The title with the layer, or with several layers the title and a picker of the layer.
if (D.layers.length > 1) {
  document.getElementById('ttl').textContent = D.title;
  const pick = document.createElement('select');
  pick.id = 'layer';
  pick.title = 'layer shown';
  D.layers.forEach((l, i) => pick.add(new Option('Layer ' + l, i, false, i === li)));
  pick.onchange = () => {
    li = +pick.value;
    draw();
  };
  document.getElementById('layers').append(pick);
} else {
  document.getElementById('ttl').textContent = (D.title ? D.title + ' — ' : '') + 'Layer ' + D.layer;
}
document.getElementById('hint').textContent =
  'Line opacity = ' + D.quantity + '. Hover a token on the left to see only its lines, click it to pin (click again to unpin); ' +
  'click a head number to hide it. Lines below ' + D.minWeight + ' are not drawn. Positions and heads are numbered from 1.';

// Legend: one coloured number per head, a click hides or shows that head.
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
    draw();
  };
  lg.append(s);
});

// Weight of head k (of the layer drawn) from left row i to right column j: exact for the selected row, else the byte
// of the sparse map.
function weight(k, i, j) {
  if (i === D.selected && D.selRows) return D.selRows[li * m + k][j];
  const r = (li * m + k) * S.rows + i;
  for (let e = S.start[r]; e < S.start[r + 1]; e++) if (S.col[e] === j) return S.w[e] / 255;
  return 0;
}

const ctx = hidpi(cv, W, Hh);

function draw() {
  ctx.fillStyle = '#fff';
  ctx.fillRect(0, 0, W, Hh);
  ctx.font = FONT;
  ctx.textBaseline = 'middle';
  if (active >= 0) {  // highlight the active row, darker when pinned
    ctx.fillStyle = pinned >= 0 ? '#ffd866' : '#ffefb0';
    ctx.fillRect(4, y0 + ROW * active, x1 - 8, ROW);
  }
  ctx.fillStyle = '#222';
  ctx.textAlign = 'right';
  Lb.forEach((s, i) => ctx.fillText(fit(ctx, s, wl), x1 - 6, y0 + ROW * (i + .5)));
  ctx.textAlign = 'left';
  Rb.forEach((s, j) => ctx.fillText(fit(ctx, s, wr), xr, y0 + ROW * (j + .5)));
  for (let k = 0; k < m; k++) if (!hidden.has(k)) drawLines(ctx, S, li * m + k, D.colors[k], g, active);
  if (active >= 0) {  // right of the key labels: one bar per head, opacity = weight from the active row
    for (let j = 0; j < Rb.length; j++) {
      for (let k = 0; k < m; k++) {
        if (hidden.has(k)) continue;
        const w = weight(k, active, j);
        if (w <= 0) continue;
        ctx.globalAlpha = Math.min(1, w);
        ctx.fillStyle = D.colors[k];
        ctx.fillRect(bx + 12 * k, y0 + ROW * j + 2, 10, ROW - 4);
      }
    }
    ctx.globalAlpha = 1;
  }
}
draw();

cv.onmousemove = e => {
  const r = cv.getBoundingClientRect(), x = e.clientX - r.left, row = Math.floor((e.clientY - r.top - y0) / ROW);
  if (x < x1 && row >= 0 && row < Lb.length) {  // over a query token: show its lines unless one is pinned
    if (pinned < 0 && active !== row) {
      active = row;
      draw();
    }
    tip(e, Lb[row] + '  (position ' + D.leftPos[row] + ')');
    return;
  }
  if (x >= xr && active >= 0 && row >= 0 && row < Rb.length) {  // over a key token: the weight of every head
    const lines = [Lb[active] + ' → ' + Rb[row] + '  (position ' + D.rightPos[row] + ')'];
    for (let k = 0; k < m; k++) {
      if (!hidden.has(k)) {
        const w = weight(k, active, row);
        lines.push('head ' + D.layers[li] + '-' + D.heads[k] + ': ' + (w >= 0.001 ? w.toFixed(3) : '<' + D.minWeight));
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
    if (window.parent !== window) window.parent.postMessage({ attnlibPick: pinned < 0 ? 0 : D.leftPos[pinned] }, '*');
  }
};

document.getElementById('png').onclick = () => savePNG([cv], 'head-view-layer-' + D.layers[li]);
