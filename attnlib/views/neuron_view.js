// Neuron view (figures/neuron_view.py): for one head and query token, the query vector q, each key vector k,
// the elementwise q × k, the scores (scale × q·k, plus relative terms in some families) and their softmax, which is
// the head's attention row. Data D: title, layer and head (1-based), labels (the keys' tokens), query_labels (the
// queries' tokens where they differ from the keys', as cross-attention's target tokens, drawn in a column on the left;
// else null), qi (0-based query position), d, q [d],
// k [n * d] (row-major), label (how the scores are made, e.g. "q·k / √64"), window (a local layer's half-width, or
// null), scores [n], softmax [n], attn (the model's own row, or null) and diff (largest |softmax - attn|, or null).
// A window of a long input draws only some keys: first (the 0-based position of the first drawn), n_keys (all the
// row's keys) and mass (the sum of the drawn keys' softmax over all n_keys keys; null when every key is drawn).

const n = D.labels.length, d = D.d, q = D.q, K = D.k, cv = document.getElementById('cv');
const QL = D.query_labels, nq = QL ? QL.length : 0, queryLabel = (QL || D.labels)[D.qi];

// q × k for every key, and the scales of the colours: largest |k| or |q|, largest |q × k|, range of the scores
const P = new Float64Array(n * d);
let pmax = 1e-9, kmax = 1e-9, smin = 0, smax = 1e-9;
for (let j = 0; j < n; j++) {
  for (let c = 0; c < d; c++) {
    const v = q[c] * K[j * d + c];
    P[j * d + c] = v;
    pmax = Math.max(pmax, Math.abs(v));
    kmax = Math.max(kmax, Math.abs(K[j * d + c]));
  }
}
for (const v of q) kmax = Math.max(kmax, Math.abs(v));
for (const s of D.scores) {
  smin = Math.min(smin, s);
  smax = Math.max(smax, s);
}

// Geometry: row height, neuron cell width, then the columns (queries |) keys | q × k | scores | softmax from left to
// right.
const rows = Math.max(n, nq), RH = rows > 120 ? 12 : 16, CW = Math.max(3, Math.min(8, Math.floor(260 / d)));
const FONT = (rows > 120 ? 10 : 12) + 'px system-ui,sans-serif';
const probe = cv.getContext('2d');
probe.font = FONT;
const wq = QL ? labelWidth(probe, QL, 130) : 0, xl = QL ? 8 + wq + 24 : 8;
// the key labels' column at least as wide as the 'query q' label left of q's cells, for short tokens
const wl = Math.max(labelWidth(probe, D.labels, 130), probe.measureText('query q').width + 8 - xl);
const xk = xl + wl + 8, xp = xk + d * CW + 16, xs = xp + d * CW + 16, SW = 80, xm = xs + SW + 16, MW = 110;
const W = xm + MW + 60, y0 = 58, Hh = y0 + RH * rows + 8;

document.getElementById('ttl').textContent = (D.title || 'Neuron view') + ' — layer ' + D.layer + ', head ' + D.head +
  ', query “' + queryLabel + '” (position ' + (D.first + D.qi + 1) + (QL ? ' of the queries' : '') + ')';
document.getElementById('hint').textContent =
  'Blue = positive, orange = negative, darker = larger magnitude. The score of each key is ' + D.label +
  ' (q·k: the sum of its q×k row); softmax of the scores is the attention row' +
  (D.window !== null ? ' (a local layer: keys farther than ' + D.window + ' positions get weight 0)' : '') +
  (D.causal ? ' (a decoder: later keys get weight 0)' : '') +
  (QL ? ' (cross-attention: the queries\' tokens on the left, the keys\' on the right)' : '') +
  (D.diff !== null ? ' (largest difference from the model\'s own attention row: ' + D.diff.toExponential(1) + ')' : '') +
  (D.mass !== null ? '. Keys drawn: positions ' + (D.first + 1) + '–' + (D.first + n) + ' of ' + D.n_keys +
    ', with the softmax over all ' + D.n_keys + ' keys (their weights sum to ' + D.mass.toFixed(4) + ')' : '') +
  '. Hover for values.';

// Blue for positive, orange for negative values; opacity = |v| / s.
function col(v, s) {
  const a = Math.min(1, Math.abs(v) / s);
  return v >= 0 ? 'rgba(31,119,180,' + a + ')' : 'rgba(255,127,14,' + a + ')';
}

// Drawn once: nothing changes on hover but the tooltip.
const c = hidpi(cv, W, Hh);
c.fillStyle = '#fff';
c.fillRect(0, 0, W, Hh);
c.font = FONT;
c.textBaseline = 'middle';
c.fillStyle = '#222';
c.textAlign = 'left';
c.fillText('query q', 8, 12);
for (let i = 0; i < d; i++) {
  c.fillStyle = col(q[i], kmax);
  c.fillRect(xk + i * CW, 4, CW - 1, 16);
}
c.fillStyle = '#222';
c.fillText('keys k', xk, y0 - 14);
c.fillText('q × k', xp, y0 - 14);
c.fillText(D.label.length <= 12 ? D.label : 'score', xs, y0 - 14);  // a long label is in the hint above
c.fillText('softmax', xm, y0 - 14);
c.fillStyle = '#ffefb0';  // the query's own row (cross-attention: in the queries' column)
c.fillRect(4, y0 + RH * D.qi, QL ? wq + 8 : xk - 8, RH);
for (let i = 0; i < nq; i++) {
  c.fillStyle = '#222';
  c.textAlign = 'right';
  c.fillText(fit(c, QL[i], wq), 8 + wq, y0 + RH * i + RH / 2);
}
if (QL) {
  c.textAlign = 'left';
  c.fillText('queries', 8, y0 - 14);
}
for (let j = 0; j < n; j++) {
  const y = y0 + RH * j;
  c.fillStyle = '#222';
  c.textAlign = 'right';
  c.fillText(fit(c, D.labels[j], wl), xk - 6, y + RH / 2);
  for (let i = 0; i < d; i++) {
    c.fillStyle = col(K[j * d + i], kmax);
    c.fillRect(xk + i * CW, y + 1, CW - 1, RH - 2);
    c.fillStyle = col(P[j * d + i], pmax);
    c.fillRect(xp + i * CW, y + 1, CW - 1, RH - 2);
  }
  // the score as a bar from zero
  const s = D.scores[j], zero = xs + SW * (-smin) / (smax - smin), x = xs + SW * (s - smin) / (smax - smin);
  c.fillStyle = s >= 0 ? '#1f77b4' : '#ff7f0e';
  c.fillRect(Math.min(zero, x), y + 2, Math.max(1, Math.abs(x - zero)), RH - 4);
  // the softmax as a bar and a number
  const p = D.softmax[j];
  c.fillStyle = '#1f77b4';
  c.fillRect(xm, y + 2, Math.max(1, MW * p), RH - 4);
  c.fillStyle = '#222';
  c.textAlign = 'left';
  c.fillText(p.toFixed(3), xm + MW + 4, y + RH / 2);
}

cv.onmousemove = e => {
  const r = cv.getBoundingClientRect(), x = e.clientX - r.left, y = e.clientY - r.top, j = Math.floor((y - y0) / RH);
  if (y < 24 && x >= xk && x < xk + d * CW) {  // the query vector
    const i = Math.floor((x - xk) / CW);
    tip(e, 'neuron ' + (i + 1) + ': q = ' + q[i].toFixed(3));
    return;
  }
  if (QL && x < xl && j >= 0 && j < nq) {  // a query token of cross-attention
    tip(e, 'query ' + QL[j] + ' (position ' + (j + 1) + ')');
    return;
  }
  if (j < 0 || j >= n) {
    tip(e, null);
    return;
  }
  const key = D.labels[j] + ' (position ' + (D.first + j + 1) + ')';
  for (const [x0, name] of [[xk, 'k'], [xp, 'q×k']]) {  // a neuron of a key vector or of its q × k
    if (x >= x0 && x < x0 + d * CW) {
      const i = Math.floor((x - x0) / CW);
      tip(e, key + '\nneuron ' + (i + 1) + ': q = ' + q[i].toFixed(3) + ', k = ' + K[j * d + i].toFixed(3) +
        ', q×k = ' + P[j * d + i].toFixed(3));
      return;
    }
  }
  if (x >= xs) {  // the score and softmax of a key
    tip(e, key + '\nscore ' + D.label + ' = ' + D.scores[j].toFixed(3) + '\nsoftmax = ' + D.softmax[j].toFixed(4) +
      (D.attn ? '\nmodel attention = ' + D.attn[j].toFixed(4) : ''));
    return;
  }
  tip(e, key);
};
cv.onmouseleave = e => tip(e, null);

document.getElementById('png').onclick = () => savePNG([cv], 'neuron-view-' + D.layer + '-' + D.head);
