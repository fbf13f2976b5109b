// Model view (attnlib/views/model_view.py): a grid of thumbnails, one per layer (row) and head (column); a click enlarges one.
// Short inputs (mode 'lines'): each thumbnail is a small head view of one head. Long inputs ('heat'): thumbnails are
// heatmaps cut from one atlas image of max-pooled maps, each scaled to its own maximum; the selected head (sel) also
// comes at full resolution. With several kinds of attention (encoder, decoder, cross; a pair's filters), a select
// switches between them.
// Data D: title, minWeight, quantity, linesMax, switches, off, theme; and each kind's fields (KINDS, canvas_common.js):
// name, left and right labels (queries, keys: they differ for cross attention), L, H, colors, layerNums and headNums
// (1-based, when only some layers or heads are drawn), sel [layer, head] (0-based), windows (per layer: a local layer's
// half-width w in tokens, or null for global attention), mode, and either lines (pack_sparse of all L*H maps) or atlas,
// tileMax, tile [rows, cols], block, full, fullMax (base64 PNGs and their maxima).

const TW = 64, GAP = 6, ML = 58, MT = 18;  // thumbnail size, gap, left and top margins
const grid = document.getElementById('grid'), big = document.getElementById('big');
// K: the kind shown, with L, H and its numbers of queries (rows) and keys (cols); S: its sparse maps (lines mode);
// atlas/full: its coloured canvases and their grey values (heat mode); shown: the [layer, head] enlarged below the grid
let K, L, H, rows, cols, gx, GW, GH, S = null, atlas = null, atlasVals = null, full = null, fullVals = null, shown;
const decoded = new Map();  // kind index -> what showKind decoded of it (sparse maps, or images)
// switches mode (D.switches): the heads switched off, as layer * H + head; a click toggles one and tells the parent page
const off = new Set((D.off || []).map(([l, h]) => l * KINDS[0].H + h));

// The model's 1-based numbers of the l-th layer and h-th head drawn.
const layerNo = l => K.layerNums ? K.layerNums[l] : l + 1;
const headNo = h => K.headNums ? K.headNums[h] : h + 1;

function hint() {
  document.getElementById('ttl').textContent = (D.title || 'Model view') + ' — ' + L + ' layers × ' + H + ' heads';
  document.getElementById('hint').textContent = (K.mode === 'lines'
    ? 'Each thumbnail: queries on the left, keys on the right, line opacity = ' + D.quantity + ' (lines below ' + D.minWeight + ' omitted). '
    : 'More than ' + D.linesMax + ' positions: thumbnails are heatmaps (rows = queries, columns = keys), each pixel the maximum over ' +
      K.block + '×' + K.block + ' positions, each scaled to its own maximum. ')
    + (D.switches ? 'Click a thumbnail to enlarge it and to switch that head off (crossed out) or on again. '
      : 'Click a thumbnail to enlarge it. ') + 'Layers and heads are numbered from 1.'
    + (K.windows.some(w => w !== null) ? ' Layers marked "local ±w" attend only to keys within w tokens of the query.' : '');
}

// "layer 3", and for a local layer its window
function layerName(l) {
  return 'layer ' + layerNo(l) + (K.windows[l] !== null ? ' (local ±' + K.windows[l] + ')' : '');
}

// Top-left corner of the thumbnail of layer l, head h.
function cell(l, h) {
  return [ML + h * (TW + GAP), MT + l * (TW + GAP)];
}

function drawGrid() {
  gx.fillStyle = THEME.bg;
  gx.fillRect(0, 0, GW, GH);
  gx.font = '11px system-ui,sans-serif';
  gx.fillStyle = THEME.muted;
  gx.textAlign = 'center';
  gx.textBaseline = 'middle';
  for (let h = 0; h < H; h++) gx.fillText('head ' + headNo(h), cell(0, h)[0] + TW / 2, MT / 2);
  gx.textAlign = 'right';
  for (let l = 0; l < L; l++) {
    const local = K.windows[l] !== null, y = cell(l, 0)[1] + TW / 2;
    gx.fillStyle = THEME.muted;
    gx.fillText('layer ' + layerNo(l), ML - 6, local ? y - 7 : y);
    if (local) {  // a local layer: its window under its name
      gx.fillStyle = '#9467bd';
      gx.fillText('local ±' + K.windows[l], ML - 6, y + 7);
    }
  }
  for (let l = 0; l < L; l++) {
    for (let h = 0; h < H; h++) {
      const [x, y] = cell(l, h);
      if (K.mode === 'lines') {
        const g = {x1: x + 5, x2: x + TW - 5, y0: y + 2, rowL: (TW - 4) / rows, rowR: (TW - 4) / cols, lw: 1};
        drawLines(gx, S, l * H + h, K.colors[h], g, -1);
      } else {
        const [tr, tc] = K.tile;
        gx.imageSmoothingEnabled = false;
        gx.drawImage(atlas, h * tc, l * tr, tc, tr, x, y, TW, TW);
      }
      if (off.has(l * H + h)) {  // a head switched off: veiled and crossed out
        gx.fillStyle = THEME.veil;
        gx.fillRect(x, y, TW, TW);
        gx.strokeStyle = THEME.cross;
        gx.lineWidth = 2;
        gx.beginPath();
        gx.moveTo(x + 6, y + 6);
        gx.lineTo(x + TW - 6, y + TW - 6);
        gx.moveTo(x + TW - 6, y + 6);
        gx.lineTo(x + 6, y + TW - 6);
        gx.stroke();
      }
      const on = (l === shown[0] && h === shown[1]);  // the enlarged head has a red frame
      gx.strokeStyle = on ? '#d62728' : THEME.frame;
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
  tip(e, c ? layerName(c[0]) + ', head ' + headNo(c[1]) + ' (' + layerNo(c[0]) + '-' + headNo(c[1]) + '): ' + what : null);
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
  const ROW = 16, wl = labelWidth(probe, K.left, 150), wr = labelWidth(probe, K.right, 150);
  const x1 = 8 + wl + 8, x2 = x1 + 260, xr = x2 + 8, W = xr + wr + 8, Hh = 4 + ROW * Math.max(rows, cols) + 6;
  const c = hidpi(big, W, Hh), g = {x1: x1, x2: x2, y0: 4, rowL: ROW, rowR: ROW, lw: 2};
  let act = -1;
  function draw() {
    c.fillStyle = THEME.bg;
    c.fillRect(0, 0, W, Hh);
    c.font = FONT;
    c.textBaseline = 'middle';
    if (act >= 0) {
      c.fillStyle = THEME.hover;
      c.fillRect(4, 4 + ROW * act, x1 - 8, ROW);
    }
    c.fillStyle = THEME.ink;
    c.textAlign = 'right';
    K.left.forEach((s, i) => c.fillText(fit(c, s, wl), x1 - 6, 4 + ROW * (i + .5)));
    c.textAlign = 'left';
    K.right.forEach((s, j) => c.fillText(fit(c, s, wr), xr, 4 + ROW * (j + .5)));
    drawLines(c, S, l * H + h, K.colors[h], g, act);
  }
  draw();
  big.onmousemove = e => {
    const r = big.getBoundingClientRect(), x = e.clientX - r.left, row = Math.floor((e.clientY - r.top - 4) / ROW);
    const a = (x < x1 && row >= 0 && row < rows) ? row : -1;
    if (a !== act) {
      act = a;
      draw();
    }
    tip(e, a >= 0 ? K.left[a] + ' (position ' + (a + 1) + ')' : null);
  };
  big.onmouseleave = e => {
    act = -1;
    draw();
    tip(e, null);
  };
}

// The enlarged head in heat mode: img (nr x nc cells, grey values vals) drawn large with row and column labels
// (rowName(i), colName(j)); a cell's weight is vals / 255 * vmax (the maximum over block x block tokens when block > 1).
function enlargeHeat(img, vals, nr, nc, block, vmax, rowName, colName) {
  const c0 = big.getContext('2d');
  c0.font = FONT;
  const rowNames = [], colNames = [];
  for (let i = 0; i < nr; i++) rowNames.push(rowName(i));
  for (let j = 0; j < nc; j++) colNames.push(colName(j));
  const cs = Math.max(2, Math.min(18, Math.floor(720 / Math.max(nr, nc))));  // cell size in pixels
  const step = Math.max(1, Math.ceil(12 / cs));  // label every step-th row and column so labels do not overlap
  const wl = labelWidth(c0, rowNames, 110), wt = labelWidth(c0, colNames, 110), ox = wl + 10, oy = wt + 10;
  const W = ox + nc * cs + 8, Hh = oy + nr * cs + 8, c = hidpi(big, W, Hh);
  c.fillStyle = THEME.bg;
  c.fillRect(0, 0, W, Hh);
  c.imageSmoothingEnabled = false;
  c.drawImage(img, ox, oy, nc * cs, nr * cs);
  c.font = FONT;
  c.fillStyle = THEME.ink;
  c.textBaseline = 'middle';
  c.textAlign = 'right';
  for (let i = 0; i < nr; i += step) c.fillText(fit(c, rowNames[i], wl), ox - 4, oy + cs * (i + .5));
  c.textAlign = 'left';
  for (let j = 0; j < nc; j += step) {  // column labels, rotated to read upwards
    c.save();
    c.translate(ox + cs * (j + .5), oy - 4);
    c.rotate(-Math.PI / 2);
    c.fillText(fit(c, colNames[j], wt), 0, 0);
    c.restore();
  }
  big.onmousemove = e => {
    const r = big.getBoundingClientRect();
    const i = Math.floor((e.clientY - r.top - oy) / cs), j = Math.floor((e.clientX - r.left - ox) / cs);
    if (i < 0 || j < 0 || i >= nr || j >= nc) {
      tip(e, null);
      return;
    }
    const v = vals[i * nc + j] / 255 * vmax;
    tip(e, 'from ' + rowNames[i] + '\nto ' + colNames[j] + '\n' + (block > 1 ? 'max ' : '') + D.quantity + ' ≈ ' + v.toFixed(3));
  };
  big.onmouseleave = e => tip(e, null);
}

// Label of pooled cell i (b tokens of labels): the token, or the first…last tokens with their 1-based positions.
function span(labels, i, b) {
  const a = i * b, z = Math.min(labels.length, a + b) - 1;
  return a === z ? labels[a] + ' (' + (a + 1) + ')' : labels[a] + '…' + labels[z] + ' (' + (a + 1) + '–' + (z + 1) + ')';
}

// Draw the head in `shown` below the grid: lines, the full-resolution map, or the pooled tile of the atlas.
function enlarge() {
  const [l, h] = shown;
  document.getElementById('bigcap').textContent =
    'L' + layerName(l).slice(1) + ', head ' + headNo(h) + ' (' + layerNo(l) + '-' + headNo(h) + ')';
  const note = document.getElementById('bignote');
  if (K.mode === 'lines') {
    note.textContent = 'Hover a token on the left to see only its lines.';
    enlargeLines(l, h);
    return;
  }
  if (l === K.sel[0] && h === K.sel[1]) {
    note.textContent = 'Full resolution, scaled to this head\'s maximum (' + K.fullMax.toFixed(3) +
      '). Rows = queries, columns = keys; hover for values.';
    enlargeHeat(full, fullVals, rows, cols, 1, K.fullMax, i => span(K.left, i, 1), j => span(K.right, j, 1));
    return;
  }
  // another head: its tile of the atlas, and the tile's grey values
  const [tr, tc] = K.tile, tile = document.createElement('canvas');
  tile.width = tc;
  tile.height = tr;
  tile.getContext('2d').drawImage(atlas, h * tc, l * tr, tc, tr, 0, 0, tc, tr);
  const vals = new Uint8Array(tr * tc);
  for (let i = 0; i < tr; i++) {
    for (let j = 0; j < tc; j++) vals[i * tc + j] = atlasVals[(l * tr + i) * atlas.width + h * tc + j];
  }
  note.textContent = 'Pooled preview: each cell is the maximum over ' + K.block + '×' + K.block + ' tokens. Choose layer ' +
    layerNo(l) + ' and head ' + headNo(h) + ' in the page controls for full resolution.';
  enlargeHeat(tile, vals, tr, tc, K.block, K.tileMax[l * H + h], i => span(K.left, i, K.block), j => span(K.right, j, K.block));
}

// Decode what kind k draws (its sparse maps, or both its images), once; then done(it).
function decode(k, done) {
  if (decoded.has(k)) return done(decoded.get(k));
  const kind = KINDS[k], keep = it => {
    decoded.set(k, it);
    done(it);
  };
  if (kind.mode === 'lines') return keep({S: unpack(kind.lines)});
  grayImage(kind.atlas, (a, av) => grayImage(kind.full, (f, fv) => keep({atlas: a, atlasVals: av, full: f, fullVals: fv})));
}

// Show kind k of KINDS: its grid, and its selected head enlarged.
function showKind(k) {
  decode(k, it => {
    K = KINDS[k];
    ({S = null, atlas = null, atlasVals = null, full = null, fullVals = null} = it);
    [L, H, rows, cols, shown] = [K.L, K.H, K.left.length, K.right.length, K.sel.slice()];
    GW = ML + H * (TW + GAP);
    GH = MT + L * (TW + GAP);
    gx = hidpi(grid, GW, GH);
    hint();
    drawGrid();
    enlarge();
  });
}

kindPicker(showKind);
showKind(0);

document.getElementById('png').onclick = () => savePNG([grid, big], 'model-view');
