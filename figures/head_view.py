"""Head view: tokens in two columns, a line from each query to each key, opacity = weight, one colour per head."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .canvas_html import head_color, html_page, pack_sparse, round_list

# Pair filter: name -> (segment of the query tokens, segment of the key tokens); None keeps every token.
PAIR_FILTERS: dict[str, tuple[int | None, int | None]] = {
    "All": (None, None),
    "A→A": (0, 0),
    "B→B": (1, 1),
    "A→B": (0, 1),
    "B→A": (1, 0),
}
MIN_WEIGHT = 0.01  # lines below this are invisible at any opacity scale and are not sent


@dataclass
class HeadViewData:
    """What the head view draws: the kept query rows and key columns, the heads, and the packed lines."""

    left: list[int]  # query positions kept by the pair filter
    right: list[int]  # key positions kept
    heads: list[int]  # 0-based heads drawn
    maps: np.ndarray  # [len(heads), len(left), len(right)] weights as computed by the model (not renormalised)


def filter_positions(segments: Sequence[int] | None, n: int, pair_filter: str) -> tuple[list[int], list[int]]:
    """Query and key positions that a pair filter keeps (all positions for a single sentence or 'All')."""
    if pair_filter not in PAIR_FILTERS:
        raise ValueError(f"pair filter must be one of {list(PAIR_FILTERS)}, not {pair_filter!r}")
    src, dst = PAIR_FILTERS[pair_filter]
    if segments is None or src is None:
        return list(range(n)), list(range(n))
    seg = np.asarray(segments)
    return np.flatnonzero(seg == src).tolist(), np.flatnonzero(seg == dst).tolist()


def head_view_data(
    attn_layer: np.ndarray, heads: Sequence[int], segments: Sequence[int] | None = None, pair_filter: str = "All"
) -> HeadViewData:
    """Select heads of one layer's maps [heads, n, n] and the rows/columns the pair filter keeps."""
    n = attn_layer.shape[-1]
    left, right = filter_positions(segments, n, pair_filter)
    heads = [int(h) for h in heads]
    if not heads:
        maps = np.zeros((0, len(left), len(right)), np.float32)
    elif len(left) == n and len(right) == n:
        maps = attn_layer if heads == list(range(attn_layer.shape[0])) else attn_layer[heads]
    else:
        maps = attn_layer[np.ix_(heads, left, right)]
    return HeadViewData(left, right, heads, maps)


def head_view_html(
    attn_layer: np.ndarray,
    labels: Sequence[str],
    heads: Sequence[int],
    layer: int,
    segments: Sequence[int] | None = None,
    pair_filter: str = "All",
    selected: int | None = None,
    min_weight: float = MIN_WEIGHT,
    title: str = "",
) -> str:
    """Self-contained HTML of the head view for one layer (0-based `layer`, `heads`, `selected` query position)."""
    data = head_view_data(attn_layer, heads, segments, pair_filter)
    sel_row = data.left.index(selected) if selected is not None and selected in data.left else -1
    payload = {
        "title": title,
        "layer": layer + 1,
        "heads": [h + 1 for h in data.heads],
        "colors": [head_color(h) for h in data.heads],
        "left": [labels[i] for i in data.left],
        "right": [labels[j] for j in data.right],
        "leftPos": [i + 1 for i in data.left],
        "rightPos": [j + 1 for j in data.right],
        "lines": pack_sparse(data.maps, min_weight),
        "minWeight": min_weight,
        "selected": sel_row,
        "selRows": round_list(data.maps[:, sel_row], 3) if sel_row >= 0 else None,
    }
    body = (
        "<div class='bar'><b id='ttl'></b><span id='legend'></span>"
        "<button id='png'>Save PNG</button></div>"
        "<div class='note' id='hint'></div><div class='scroll' id='box' style='max-height:640px'>"
        "<canvas id='cv'></canvas></div>"
    )
    return html_page(title or f"Head view, layer {layer + 1}", payload, body, _SCRIPT)


_SCRIPT = r"""
const Lb=D.left,Rb=D.right,m=D.heads.length,S=unpack(D.lines),cv=document.getElementById('cv');
const big=Math.max(Lb.length,Rb.length)>120,ROW=big?14:18,FONT=(big?11:12)+'px system-ui,sans-serif';
const probe=cv.getContext('2d');probe.font=FONT;
const wl=labelWidth(probe,Lb,150),wr=labelWidth(probe,Rb,150);
const x1=8+wl+8,x2=x1+240,xr=x2+8,bx=xr+wr+12,W=bx+Math.max(m,1)*12+8,y0=4,Hh=y0+ROW*Math.max(Lb.length,Rb.length,1)+6;
const g={x1:x1,x2:x2,y0:y0,rowL:ROW,rowR:ROW,lw:2};
let pinned=D.selected,active=D.selected;const hidden=new Set();
document.getElementById('ttl').textContent=(D.title?D.title+' — ':'')+'Layer '+D.layer;
document.getElementById('hint').textContent='Hover a token on the left to see only its lines, click it to pin (click again to unpin); '+
 'click a head number to hide it. Lines below '+D.minWeight+' are not drawn. Positions and heads are numbered from 1.';
const lg=document.getElementById('legend');lg.append('Heads: ');
D.heads.forEach((h,k)=>{const s=document.createElement('span');s.className='sw';s.style.background=D.colors[k];s.textContent=h;
 s.title='head '+D.layer+'-'+h+' (click to hide/show)';s.onclick=()=>{hidden.has(k)?hidden.delete(k):hidden.add(k);s.classList.toggle('off');draw();};lg.append(s);});
function weight(k,i,j){if(i===D.selected&&D.selRows)return D.selRows[k][j];const r=k*S.rows+i;
 for(let e=S.start[r];e<S.start[r+1];e++)if(S.col[e]===j)return S.w[e]/255;return 0;}
const ctx=hidpi(cv,W,Hh);
function draw(){ctx.fillStyle='#fff';ctx.fillRect(0,0,W,Hh);ctx.font=FONT;ctx.textBaseline='middle';
 if(active>=0){ctx.fillStyle=pinned>=0?'#ffd866':'#ffefb0';ctx.fillRect(4,y0+ROW*active,x1-8,ROW);}
 ctx.fillStyle='#222';ctx.textAlign='right';Lb.forEach((s,i)=>ctx.fillText(fit(ctx,s,wl),x1-6,y0+ROW*(i+.5)));
 ctx.textAlign='left';Rb.forEach((s,j)=>ctx.fillText(fit(ctx,s,wr),xr,y0+ROW*(j+.5)));
 for(let k=0;k<m;k++)if(!hidden.has(k))drawLines(ctx,S,k,D.colors[k],g,active);
 if(active>=0){for(let j=0;j<Rb.length;j++)for(let k=0;k<m;k++){if(hidden.has(k))continue;const w=weight(k,active,j);
  if(w<=0)continue;ctx.globalAlpha=Math.min(1,w);ctx.fillStyle=D.colors[k];ctx.fillRect(bx+12*k,y0+ROW*j+2,10,ROW-4);}ctx.globalAlpha=1;}}
draw();
cv.onmousemove=e=>{const r=cv.getBoundingClientRect(),x=e.clientX-r.left,row=Math.floor((e.clientY-r.top-y0)/ROW);
 if(x<x1&&row>=0&&row<Lb.length){if(pinned<0&&active!==row){active=row;draw();}tip(e,Lb[row]+'  (position '+D.leftPos[row]+')');return;}
 if(x>=xr&&active>=0&&row>=0&&row<Rb.length){const lines=[Lb[active]+' → '+Rb[row]+'  (position '+D.rightPos[row]+')'];
  for(let k=0;k<m;k++)if(!hidden.has(k)){const w=weight(k,active,row);lines.push('head '+D.layer+'-'+D.heads[k]+': '+(w>=0.001?w.toFixed(3):'<'+D.minWeight));}
  tip(e,lines.join('\n'));return;}
 tip(e,null);};
cv.onmouseleave=e=>{tip(e,null);if(pinned<0&&active!==-1){active=-1;draw();}};
cv.onclick=e=>{const r=cv.getBoundingClientRect(),x=e.clientX-r.left,row=Math.floor((e.clientY-r.top-y0)/ROW);
 if(x<x1&&row>=0&&row<Lb.length){pinned=pinned===row?-1:row;active=row;draw();}};
document.getElementById('png').onclick=()=>savePNG([cv],'head-view-layer-'+D.layer);
"""
