// Model view (figures/model_view.py): a grid of thumbnails, one per layer (row) and head (column); a click enlarges one.
// Short inputs (D.mode 'lines'): each thumbnail is a small head view of one head. Long inputs ('heat'): thumbnails are
// heatmaps cut from one atlas image of max-pooled maps, each scaled to its own maximum; the selected head (D.sel) also
// comes at full resolution.
// Data D: title, labels, L, H, n, colors, sel [layer, head] (0-based), mode, minWeight, quantity, linesMax, windows (per
// layer: a local layer's half-width w in tokens, or null for global attention), and either lines
// (pack_sparse of all L*H maps) or atlas, tileMax, side, block, full, fullMax (base64 PNGs and their maxima).

const L = D.L, H = D.H, n = D.n, TW = 64, GAP = 6, ML = 58, MT = 18;  // thumbnail size, gap, left and top margins
const grid = document.getElementById('grid'), big = document.getElementById('big');
const GW = ML + H * (TW + GAP), GH = MT + L * (TW + GAP);
const gx = hidpi(grid, GW, GH);
// S: the sparse maps (lines mode); atlas/full: coloured canvases and their grey values (heat mode);
// shown: the [layer, head] enlarged below the grid
let S = null, atlas = null, atlasVals = null, full = null, fullVals = null, shown = D.sel.slice();
// switches mode (D.switches): the heads switched off, as layer * H + head; a click toggles one and tells the parent page
const off = new Set((D.off || []).map(([l, h]) => l * H + h));

document.getElementById('ttl').textContent = (D.title || 'Model view') + ' — ' + L + ' layers × ' + H + ' heads';
document.getElementById('hint').textContent = (D.mode === 'lines'
  ? 'Each thumbnail: queries on the left, keys on the right, line opacity = ' + D.quantity + ' (lines below ' + D.minWeight + ' omitted). '
  : 'More than ' + D.linesMax + ' positions: thumbnails are heatmaps (rows = queries, columns = keys), each pixel the maximum over ' +
    D.block + '×' + D.block + ' positions, each scaled to its own maximum. ')
  + (D.switches ? 'Click a thumbnail to enlarge it and to switch that head off (crossed out) or on again. '
    : 'Click a thumbnail to enlarge it. ') + 'Layers and heads are numbered from 1.'
  + (D.windows.some(w => w !== null) ? ' Layers marked "local ±w" attend only to keys within w tokens of the query.' : '');

// "layer 3", and for a local layer its window
function layerName(l) {
  return 'layer ' + (l + 1) + (D.windows[l] !== null ? ' (local ±' + D.windows[l] + ')' : '');
}

// Top-left corner of the thumbnail of layer l, head h.
function cell(l, h) {
  return [ML + h * (TW + GAP), MT + l * (TW + GAP)];
}

function drawGrid() {
  gx.fillStyle = '#fff';
  gx.fillRect(0, 0, GW, GH);
  gx.font = '11px system-ui,sans-serif';
  gx.fillStyle = '#444';
  gx.textAlign = 'center';
  gx.textBaseline = 'middle';
  for (let h = 0; h < H; h++) gx.fillText('head ' + (h + 1), cell(0, h)[0] + TW / 2, MT / 2);
  gx.textAlign = 'right';
  for (let l = 0; l < L; l++) {
    const local = D.windows[l] !== null, y = cell(l, 0)[1] + TW / 2;
    gx.fillStyle = '#444';
    gx.fillText('layer ' + (l + 1), ML - 6, local ? y - 7 : y);
    if (local) {  // a local layer: its window under its name
      gx.fillStyle = '#9467bd';
      gx.fillText('local ±' + D.windows[l], ML - 6, y + 7);
    }
  }
  for (let l = 0; l < L; l++) {
    for (let h = 0; h < H; h++) {
      const [x, y] = cell(l, h);
      if (D.mode === 'lines') {
        const g = {x1: x + 5, x2: x + TW - 5, y0: y + 2, rowL: (TW - 4) / n, rowR: (TW - 4) / n, lw: 1};
        drawLines(gx, S, l * H + h, D.colors[h], g, -1);
      } else {
        gx.imageSmoothingEnabled = false;
        gx.drawImage(atlas, h * D.side, l * D.side, D.side, D.side, x, y, TW, TW);
      }
      if (off.has(l * H + h)) {  // a head switched off: greyed and crossed out
        gx.fillStyle = 'rgba(255,255,255,.75)';
        gx.fillRect(x, y, TW, TW);
        gx.strokeStyle = '#555';
        gx.lineWidth = 2;
        gx.beginPath();
        gx.moveTo(x + 6, y + 6);
        gx.lineTo(x + TW - 6, y + TW - 6);
        gx.moveTo(x + TW - 6, y + 6);
        gx.lineTo(x + 6, y + TW - 6);
        gx.stroke();
      }
      const on = (l === shown[0] && h === shown[1]);  // the enlarged head has a red frame
      gx.strokeStyle = on ? '#d62728' : '#ddd';
      gx.lineWidth = on ? 3 : 1;
      gx.strokeRect(x - .5, y - .5, TW + 1, TW + 1);
    }
  }
}

// [layer, head] of the thumbnail under the pointer, or null (margins and gaps).
function hit(e) {
  const r = grid.getBoundingClientRect(), x = e.clientX - r.left - ML, y = e.clientY - r.top - MT;
  const h = Math.floor(x / (TW + GAP)), l = Math.floor(y / (TW + GAP));
  if (h < 0 || l < 0 || h >= H || l >= L || x - h * (TW + GAP) > TW || y - l * (TW + GAP) > TW) return null;
  return [l, h];
}

grid.onmousemove = e => {
  const c = hit(e);
  const what = D.switches ? (c && off.has(c[0] * H + c[1]) ? 'click to switch it on' : 'click to switch it off') : 'click to enlarge';
  tip(e, c ? layerName(c[0]) + ', head ' + (c[1] + 1) + ' (' + (c[0] + 1) + '-' + (c[1] + 1) + '): ' + what : null);
};
grid.onmouseleave = e => tip(e, null);
grid.onclick = e => {
  const c = hit(e);
  if (c) {
    shown = c;
    if (D.switches) {
      const k = c[0] * H + c[1];
      if (off.has(k)) off.delete(k); else off.add(k);
      const heads = [...off].sort((a, b) => a - b).map(k => [Math.floor(k / H), k % H]);
      window.parent.postMessage({attnHeadsOff: heads}, '*');
    }
    drawGrid();
    enlarge();
  }
};

const FONT = '11px system-ui,sans-serif';

// The enlarged head in lines mode: a head view of one head; hovering a left token shows only its lines.
function enlargeLines(l, h) {
  const probe = big.getContext('2d');
  probe.font = FONT;
  const ROW = 16, w = labelWidth(probe, D.labels, 150);
  const x1 = 8 + w + 8, x2 = x1 + 260, xr = x2 + 8, W = xr + w + 8, Hh = 4 + ROW * n + 6;
  const c = hidpi(big, W, Hh), g = {x1: x1, x2: x2, y0: 4, rowL: ROW, rowR: ROW, lw: 2};
  let act = -1;
  function draw() {
    c.fillStyle = '#fff';
    c.fillRect(0, 0, W, Hh);
    c.font = FONT;
    c.textBaseline = 'middle';
    if (act >= 0) {
      c.fillStyle = '#ffefb0';
      c.fillRect(4, 4 + ROW * act, x1 - 8, ROW);
    }
    c.fillStyle = '#222';
    c.textAlign = 'right';
    D.labels.forEach((s, i) => c.fillText(fit(c, s, w), x1 - 6, 4 + ROW * (i + .5)));
    c.textAlign = 'left';
    D.labels.forEach((s, i) => c.fillText(fit(c, s, w), xr, 4 + ROW * (i + .5)));
    drawLines(c, S, l * H + h, D.colors[h], g, act);
  }
  draw();
  big.onmousemove = e => {
    const r = big.getBoundingClientRect(), x = e.clientX - r.left, row = Math.floor((e.clientY - r.top - 4) / ROW);
    const a = (x < x1 && row >= 0 && row < n) ? row : -1;
    if (a !== act) {
      act = a;
      draw();
    }
    tip(e, a >= 0 ? D.labels[a] + ' (position ' + (a + 1) + ')' : null);
  };
  big.onmouseleave = e => {
    act = -1;
    draw();
    tip(e, null);
  };
}

// The enlarged head in heat mode: img (side x side cells, grey values vals) drawn large with row and column labels;
// a cell's weight is vals / 255 * vmax (the maximum over block x block tokens when block > 1).
function enlargeHeat(img, vals, side, block, vmax, labelsOf) {
  const c0 = big.getContext('2d');
  c0.font = FONT;
  const names = [];
  for (let i = 0; i < side; i++) names.push(labelsOf(i));
  const cs = Math.max(2, Math.min(18, Math.floor(720 / side)));  // cell size in pixels
  const step = Math.max(1, Math.ceil(12 / cs));  // label every step-th row and column so labels do not overlap
  const wl = labelWidth(c0, names, 110), ox = wl + 10, oy = wl + 10;
  const W = ox + side * cs + 8, Hh = oy + side * cs + 8, c = hidpi(big, W, Hh);
  c.fillStyle = '#fff';
  c.fillRect(0, 0, W, Hh);
  c.imageSmoothingEnabled = false;
  c.drawImage(img, ox, oy, side * cs, side * cs);
  c.font = FONT;
  c.fillStyle = '#222';
  c.textBaseline = 'middle';
  for (let i = 0; i < side; i += step) {
    c.textAlign = 'right';
    c.fillText(fit(c, names[i], wl), ox - 4, oy + cs * (i + .5));
    c.save();  // column labels, rotated to read upwards
    c.translate(ox + cs * (i + .5), oy - 4);
    c.rotate(-Math.PI / 2);
    c.textAlign = 'left';
    c.fillText(fit(c, names[i], wl), 0, 0);
    c.restore();
  }
  big.onmousemove = e => {
    const r = big.getBoundingClientRect();
    const i = Math.floor((e.clientY - r.top - oy) / cs), j = Math.floor((e.clientX - r.left - ox) / cs);
    if (i < 0 || j < 0 || i >= side || j >= side) {
      tip(e, null);
      return;
    }
    const v = vals[i * side + j] / 255 * vmax;
    tip(e, 'from ' + names[i] + '\nto ' + names[j] + '\n' + (block > 1 ? 'max ' : '') + D.quantity + ' ≈ ' + v.toFixed(3));
  };
  big.onmouseleave = e => tip(e, null);
}

// Label of pooled cell i (block tokens): the token, or the first…last tokens with their 1-based positions.
function span(i, b) {
  const a = i * b, z = Math.min(n, a + b) - 1;
  return a === z ? D.labels[a] + ' (' + (a + 1) + ')' : D.labels[a] + '…' + D.labels[z] + ' (' + (a + 1) + '–' + (z + 1) + ')';
}

// Draw the head in `shown` below the grid: lines, the full-resolution map, or the pooled tile of the atlas.
function enlarge() {
  const [l, h] = shown;
  document.getElementById('bigcap').textContent = 'L' + layerName(l).slice(1) + ', head ' + (h + 1) + ' (' + (l + 1) + '-' + (h + 1) + ')';
  const note = document.getElementById('bignote');
  if (D.mode === 'lines') {
    note.textContent = 'Hover a token on the left to see only its lines.';
    enlargeLines(l, h);
    return;
  }
  if (l === D.sel[0] && h === D.sel[1]) {
    note.textContent = 'Full resolution, scaled to this head\'s maximum (' + D.fullMax.toFixed(3) +
      '). Rows = queries, columns = keys; hover for values.';
    enlargeHeat(full, fullVals, n, 1, D.fullMax, i => D.labels[i] + ' (' + (i + 1) + ')');
    return;
  }
  // another head: its tile of the atlas, and the tile's grey values
  const tile = document.createElement('canvas');
  tile.width = D.side;
  tile.height = D.side;
  tile.getContext('2d').drawImage(atlas, h * D.side, l * D.side, D.side, D.side, 0, 0, D.side, D.side);
  const vals = new Uint8Array(D.side * D.side);
  for (let i = 0; i < D.side; i++) {
    for (let j = 0; j < D.side; j++) vals[i * D.side + j] = atlasVals[(l * D.side + i) * atlas.width + h * D.side + j];
  }
  note.textContent = 'Pooled preview: each cell is the maximum over ' + D.block + '×' + D.block + ' tokens. Choose layer ' +
    (l + 1) + ' and head ' + (h + 1) + ' in the page controls for full resolution.';
  enlargeHeat(tile, vals, D.side, D.block, D.tileMax[l * H + h], i => span(i, D.block));
}

if (D.mode === 'lines') {
  S = unpack(D.lines);
  drawGrid();
  enlarge();
} else {  // decode both images before the first drawing
  grayImage(D.atlas, (c, v) => {
    atlas = c;
    atlasVals = v;
    grayImage(D.full, (c2, v2) => {
      full = c2;
      fullVals = v2;
      drawGrid();
      enlarge();
    });
  });
}

document.getElementById('png').onclick = () => savePNG([grid, big], 'model-view');
