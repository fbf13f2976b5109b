// The grid of every head's queries-and-keys picture (attnlib/views/qk.py, grid_data): layers as rows, heads as
// columns, each cell the head's PCA with every point drawn as a dot on one canvas. A click on a cell calls
// onPick({layer, head}) (0-based); hovering a cell names the head and its fidelity. Self-contained: the Streamlit
// component and the offline page both call drawGrid(container, data, onPick).

function drawGrid(container, data, onPick) {
  const bytes = (b64) => {
    const s = atob(b64), u = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) u[i] = s.charCodeAt(i);
    return u;
  };
  const coords = bytes(data.coords), groups = bytes(data.groups);
  const L = data.layers, H = data.heads, P = data.points, half = P / 2;
  const LEFT = 52, TOP = 18, GAP = 3, LEGEND = 22, ROUNDS = 4;

  container.replaceChildren();
  container.style.position = 'relative';
  const canvas = document.createElement('canvas');
  canvas.style.cursor = onPick ? 'pointer' : 'default';
  canvas.setAttribute('role', 'img');
  canvas.setAttribute('aria-label', `queries and keys of ${L * H} heads`);
  const tip = document.createElement('div');
  tip.style.cssText = 'position:absolute;pointer-events:none;background:rgba(255,255,255,.96);border:1px solid #999;' +
    'border-radius:4px;padding:2px 6px;font:12px sans-serif;display:none;white-space:nowrap;z-index:9';
  container.append(canvas, tip);

  let cell = 0;
  const layout = () => {
    const width = Math.max(container.clientWidth || 600, 240);
    cell = Math.max(Math.floor((width - LEFT) / H) - GAP, 12);
    return [LEFT + H * (cell + GAP), TOP + L * (cell + GAP) + LEGEND];
  };

  const draw = () => {
    const [w, h] = layout();
    const ratio = Math.min(window.devicePixelRatio || 1, 2);
    canvas.width = Math.round(w * ratio);
    canvas.height = Math.round(h * ratio);
    canvas.style.width = `${w}px`;
    canvas.style.height = `${h}px`;
    const ctx = canvas.getContext('2d');
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, w, h);
    ctx.font = '11px sans-serif';
    ctx.fillStyle = '#555';
    ctx.textBaseline = 'middle';
    for (let hd = 0; hd < H; hd++) {
      if (cell >= 24 || hd % 2 === 0) ctx.fillText(String(hd + 1), LEFT + hd * (cell + GAP) + cell / 2 - 4, TOP / 2);
    }
    const dot = cell >= 60 ? 1.6 : 1.2;
    // each colour's points, in ROUNDS slices of the corpus: few fillStyle changes, and no colour hides the others
    const byGroup = data.palette.map(() => []);
    for (let j = 0; j < half; j++) {
      byGroup[groups[j]].push(j);
      byGroup[groups[half + j]].push(half + j);
    }
    for (let l = 0; l < L; l++) {
      const y0 = TOP + l * (cell + GAP);
      ctx.fillStyle = '#555';
      ctx.fillText(`layer ${l + 1}`, 2, y0 + cell / 2);
      for (let hd = 0; hd < H; hd++) {
        const x0 = LEFT + hd * (cell + GAP), k = l * H + hd, base = 2 * k * P;
        ctx.fillStyle = '#fafafa';
        ctx.fillRect(x0, y0, cell, cell);
        ctx.globalAlpha = 0.55;
        const inner = cell - 4;
        for (let round = 0; round < ROUNDS; round++) {
          byGroup.forEach((points, g) => {
            ctx.fillStyle = data.palette[g];
            const from = Math.floor((points.length * round) / ROUNDS), to = Math.floor((points.length * (round + 1)) / ROUNDS);
            for (let i = from; i < to; i++) {
              const p = points[i];
              ctx.fillRect(x0 + 2 + (coords[base + p] / 255) * inner, y0 + 2 + (1 - coords[base + P + p] / 255) * inner,
                dot, dot);
            }
          });
        }
        ctx.globalAlpha = 1;
        const picked = data.picked && data.picked[0] === l && data.picked[1] === hd;
        ctx.strokeStyle = picked ? '#ff4b4b' : '#e3e3e3';
        ctx.lineWidth = picked ? 2.5 : 1;
        ctx.strokeRect(x0, y0, cell, cell);
      }
    }
    let x = LEFT;  // the legend: the colours of the groups
    const yLegend = TOP + L * (cell + GAP) + LEGEND / 2;
    data.names.forEach((name, i) => {
      ctx.fillStyle = data.palette[i];
      ctx.fillRect(x, yLegend - 4, 8, 8);
      ctx.fillStyle = '#333';
      ctx.fillText(name, x + 11, yLegend);
      x += 16 + ctx.measureText(name).width;
    });
  };

  const at = (ev) => {
    const r = canvas.getBoundingClientRect(), x = ev.clientX - r.left - LEFT, y = ev.clientY - r.top - TOP;
    const hd = Math.floor(x / (cell + GAP)), l = Math.floor(y / (cell + GAP));
    return x >= 0 && y >= 0 && hd < H && l < L ? { layer: l, head: hd } : null;
  };
  canvas.addEventListener('mousemove', (ev) => {
    const hit = at(ev);
    if (!hit) {
      tip.style.display = 'none';
      return;
    }
    const [near, chance] = data.fidelity[hit.layer * H + hit.head];
    tip.textContent = `head ${hit.layer + 1}-${hit.head + 1}: top key nearest for ${Math.round(100 * near)}% of ` +
      `queries (a random key: ${Math.round(100 * chance)}%)` + (onPick ? '; click to open' : '');
    const r = container.getBoundingClientRect();
    tip.style.display = 'block';
    tip.style.left = `${Math.min(ev.clientX - r.left + 12, r.width - tip.offsetWidth - 2)}px`;
    tip.style.top = `${ev.clientY - r.top + 14}px`;
  });
  canvas.addEventListener('mouseleave', () => { tip.style.display = 'none'; });
  if (onPick) canvas.addEventListener('click', (ev) => { const hit = at(ev); if (hit) onPick(hit); });
  draw();
  let width = container.clientWidth;
  const resized = new ResizeObserver(() => {
    if (container.clientWidth !== width) {  // only a new width lays the cells out anew
      width = container.clientWidth;
      draw();
    }
  });
  resized.observe(container);
  canvas.dataset.drawn = String(Math.round(performance.now()));
  return () => resized.disconnect();
}
