// Helpers every canvas view uses: the embedded data, sparse-map decoding, hi-dpi canvases, the tooltip, PNG export,
// label fitting, the two-column line drawing and the Blues colour map of the heatmaps.
// Inlined before each view's own script by views/canvas_html.py, so the page loads nothing from outside.

// The view's data: the JSON that the Python builder put in the element with id 'data'.
const D = JSON.parse(document.getElementById('data').textContent);

// The kinds of attention the page holds: several (D.kinds: an encoder-decoder's encoder, decoder and cross attention,
// or a sentence pair's filters), each with its own fields, or one, whose fields are D's own.
const KINDS = D.kinds || [D];

// Colours of the display mode (D.theme 'dark', bertviz's default; else light): background, text, row highlights
// (hovered, pinned), thumbnail frames and the veil over a switched-off head.
const THEME = D.theme === 'dark'
  ? {bg: '#000', ink: '#ddd', muted: '#bbb', hover: '#4a4020', pinned: '#7a6418', frame: '#444', veil: 'rgba(0,0,0,.75)', cross: '#bbb'}
  : {bg: '#fff', ink: '#222', muted: '#444', hover: '#ffefb0', pinned: '#ffd866', frame: '#ddd', veil: 'rgba(255,255,255,.75)', cross: '#555'};

// With several kinds of attention, an 'Attention:' select of them (id 'kind', as bertviz's) in the element with id
// 'kinds'; choose(k) gets the index of the kind picked.
function kindPicker(choose) {
  if (KINDS.length < 2) return;
  const s = document.createElement('select');
  s.id = 'kind';
  s.title = 'attention shown';
  KINDS.forEach((k, i) => s.add(new Option(k.name, i)));
  s.onchange = () => choose(+s.value);
  document.getElementById('kinds').append('Attention: ', s);
}

// Base64 text to bytes.
function bytesOf(b64) {
  const s = atob(b64), u = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) u[i] = s.charCodeAt(i);
  return u;
}

// Decode pack_sparse (canvas_html.py): per row a uint16 count, then uint16 key columns, then byte weights.
// Returns CSR arrays: the entries of row r (map k, query i: r = k * rows + i) are start[r] .. start[r + 1] - 1.
function unpack(p) {
  const u = bytesOf(p.b64), R = p.m * p.rows, cnt = new Uint16Array(u.buffer, 0, R), start = new Uint32Array(R + 1);
  let t = 0;
  for (let r = 0; r < R; r++) {
    start[r] = t;
    t += cnt[r];
  }
  start[R] = t;
  return {
    start: start,
    col: new Uint16Array(u.buffer, 2 * R, t),
    w: new Uint8Array(u.buffer, 2 * R + 2 * t, t),
    rows: p.rows,
    cols: p.cols,
  };
}

// Size a canvas to w x h CSS pixels at the screen's pixel ratio (at most 2, and at most 30000 device pixels a side);
// returns its context, scaled so that drawing uses CSS pixels.
function hidpi(cv, w, h) {
  let r = Math.min(window.devicePixelRatio || 1, 2);
  r = Math.max(1, Math.min(r, 30000 / Math.max(h, 1), 30000 / Math.max(w, 1)));
  cv.width = Math.round(w * r);
  cv.height = Math.round(h * r);
  cv.style.width = w + 'px';
  cv.style.height = h + 'px';
  const c = cv.getContext('2d');
  c.setTransform(r, 0, 0, r, 0, 0);
  return c;
}

// The tooltip: tip(event, text) shows text next to the pointer; tip(event, null) hides it.
const TIP = document.getElementById('tip');
function tip(ev, text) {
  if (!text) {
    TIP.style.display = 'none';
    return;
  }
  TIP.textContent = text;
  TIP.style.display = 'block';
  TIP.style.left = Math.min(ev.clientX + 14, window.innerWidth - TIP.offsetWidth - 4) + 'px';
  TIP.style.top = (ev.clientY + 14) + 'px';
}

// Download the canvases, stacked top to bottom on the page's background, as one PNG named name.png.
function savePNG(canvases, name) {
  const cs = canvases.filter(c => c && c.width > 0);
  const w = Math.max(...cs.map(c => c.width));
  const h = cs.reduce((s, c) => s + c.height, 0);
  const out = document.createElement('canvas');
  out.width = w;
  out.height = h;
  const x = out.getContext('2d');
  x.fillStyle = THEME.bg;
  x.fillRect(0, 0, w, h);
  let y = 0;
  for (const c of cs) {
    x.drawImage(c, 0, y);
    y += c.height;
  }
  out.toBlob(b => {
    const a = document.createElement('a');
    a.href = URL.createObjectURL(b);
    a.download = name + '.png';
    document.body.appendChild(a);
    a.click();
    a.remove();
  }, 'image/png');
}

// Width of the widest label in the context's font, at least 20 and at most cap.
function labelWidth(ctx, labels, cap) {
  let m = 20;
  for (const s of labels) {
    m = Math.max(m, ctx.measureText(s).width);
    if (m >= cap) return cap;
  }
  return Math.ceil(m);
}

// The label, cut and ended with '…' when it is wider than w.
function fit(ctx, s, w) {
  if (ctx.measureText(s).width <= w) return s;
  while (s.length > 1 && ctx.measureText(s + '…').width > w) s = s.slice(0, -1);
  return s + '…';
}

// Lines from left rows to right rows; g = geometry {x1, x2, y0, rowL, rowR, lw}.
// Draws sparse map k of S; when only >= 0, only the lines of that left row.
function drawLines(ctx, S, k, color, g, only) {
  const base = k * S.rows;
  ctx.strokeStyle = color;
  ctx.lineWidth = g.lw || 2;
  if (only >= 0) {
    // one row: few lines, each with its own opacity
    const r = base + only;
    for (let e = S.start[r]; e < S.start[r + 1]; e++) {
      ctx.globalAlpha = S.w[e] / 255;
      ctx.beginPath();
      ctx.moveTo(g.x1, g.y0 + g.rowL * (only + .5));
      ctx.lineTo(g.x2, g.y0 + g.rowR * (S.col[e] + .5));
      ctx.stroke();
    }
    ctx.globalAlpha = 1;
    return;
  }
  // every row: lines binned into B opacity levels, one path per level, so thousands of lines stroke quickly
  const B = 24, paths = [];
  for (let b = 0; b < B; b++) paths.push(new Path2D());
  for (let i = 0; i < S.rows; i++) {
    const r = base + i, y = g.y0 + g.rowL * (i + .5);
    for (let e = S.start[r]; e < S.start[r + 1]; e++) {
      const p = paths[Math.min(B - 1, (S.w[e] * B / 256) | 0)];
      p.moveTo(g.x1, y);
      p.lineTo(g.x2, g.y0 + g.rowR * (S.col[e] + .5));
    }
  }
  for (let b = 0; b < B; b++) {
    ctx.globalAlpha = (b + .5) / B;
    ctx.stroke(paths[b]);
  }
  ctx.globalAlpha = 1;
}

// Blues colour map for heatmaps, 256 entries [r, g, b], interpolated between five stops.
const BLUES = (() => {
  const s = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];
  const o = [];
  for (let v = 0; v < 256; v++) {
    const t = v / 255 * (s.length - 1), i = Math.min(s.length - 2, Math.floor(t)), f = t - i;
    o.push(s[i].map((a, c) => Math.round(a + (s[i + 1][c] - a) * f)));
  }
  return o;
})();

// Decode a base64 grayscale PNG; done(canvas, values) gets it coloured with BLUES and its grey values (row-major).
function grayImage(b64, done) {
  const im = new Image();
  im.onload = () => {
    const c = document.createElement('canvas');
    c.width = im.width;
    c.height = im.height;
    const x = c.getContext('2d');
    x.drawImage(im, 0, 0);
    const d = x.getImageData(0, 0, c.width, c.height), vals = new Uint8Array(c.width * c.height);
    for (let p = 0; p < d.data.length; p += 4) {
      const v = d.data[p], col = BLUES[v];
      vals[p >> 2] = v;
      d.data[p] = col[0];
      d.data[p + 1] = col[1];
      d.data[p + 2] = col[2];
      d.data[p + 3] = 255;
    }
    x.putImageData(d, 0, 0);
    done(c, vals);
  };
  im.src = 'data:image/png;base64,' + b64;
}
