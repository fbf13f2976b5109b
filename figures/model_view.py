"""Model view: every layer by every head as a thumbnail (lines for short inputs, heatmaps for long ones)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .canvas_html import HEAD_COLORS, html_page, pack_sparse, png_b64, quantize, round_list

LINES_MAX_TOKENS = 48  # beyond this, thumbnail lines blur into one another, so thumbnails become heatmaps
THUMB_PX = 64  # heatmap thumbnails are max-pooled to at most this many cells a side
MIN_WEIGHT = 0.02
HEAT_LEVELS = 64  # grey levels of the heatmap images


def pooled_maps(maps: np.ndarray, cells: int = THUMB_PX) -> tuple[np.ndarray, int]:
    """Max-pool the last two axes of [..., n, n] into blocks of b x b tokens so at most `cells` remain; returns (pooled, b)."""
    n = maps.shape[-1]
    block = int(np.ceil(n / cells))
    if block == 1:
        return maps, 1
    side = int(np.ceil(n / block))
    lead = maps.shape[:-2]
    if side * block != n:  # pad with zeros (weights are >= 0, so padding never wins a maximum)
        padded = np.zeros(lead + (side * block, side * block), maps.dtype)
        padded[..., :n, :n] = maps
        maps = padded
    rows = maps.reshape(lead + (side, block, side * block)).max(axis=-2)  # pool query rows: vectorised along keys
    pooled = rows[..., 0::block].copy()
    for k in range(1, block):  # pool keys with strided maxima (much faster than reducing a short last axis)
        np.maximum(pooled, rows[..., k::block], out=pooled)
    return pooled, block


def scaled_to_max(maps: np.ndarray, levels: int = HEAT_LEVELS) -> tuple[np.ndarray, np.ndarray]:
    """Each map [..., a, b] divided by its own maximum, in `levels` steps spread over 0..255; returns (bytes, maxima).

    Fewer steps than 256 make the PNG several times smaller and faster to encode; the eye cannot tell them apart."""
    peak = maps.max(axis=(-2, -1), keepdims=True)
    safe = np.where(peak > 0, peak, 1.0)
    steps = np.rint(np.asarray(maps / safe, dtype=np.float32) * (levels - 1))
    return quantize(steps / (levels - 1)), peak[..., 0, 0]


def thumbnail_atlas(attentions: np.ndarray, cells: int = THUMB_PX) -> tuple[np.ndarray, np.ndarray, int, int]:
    """All [L, H, n, n] maps pooled and scaled to their maximum, tiled into one [L*s, H*s] byte image.

    Returns (atlas, maxima [L, H], s, block)."""
    pooled, block = pooled_maps(attentions, cells)
    tiles, peaks = scaled_to_max(pooled)
    n_layers, n_heads, side, _ = tiles.shape
    atlas = tiles.transpose(0, 2, 1, 3).reshape(n_layers * side, n_heads * side)
    return atlas, peaks, side, block


def model_view_html(
    attentions: np.ndarray,
    labels: Sequence[str],
    selected: tuple[int, int] = (0, 0),
    lines_max_tokens: int = LINES_MAX_TOKENS,
    min_weight: float = MIN_WEIGHT,
    title: str = "",
) -> str:
    """Self-contained HTML of the model view of [layers, heads, n, n]; `selected` (0-based layer, head) starts enlarged."""
    n_layers, n_heads, n, _ = attentions.shape
    layer, head = selected
    payload: dict = {
        "title": title,
        "labels": list(labels),
        "L": n_layers,
        "H": n_heads,
        "n": n,
        "colors": [HEAD_COLORS[h % len(HEAD_COLORS)] for h in range(n_heads)],
        "sel": [layer, head],
        "mode": "lines" if n <= lines_max_tokens else "heat",
        "minWeight": min_weight,
        "linesMax": lines_max_tokens,
    }
    if payload["mode"] == "lines":
        payload["lines"] = pack_sparse(attentions.reshape(n_layers * n_heads, n, n), min_weight)
    else:
        atlas, peaks, side, block = thumbnail_atlas(attentions)
        full, peak = scaled_to_max(attentions[layer, head])
        payload.update(
            atlas=png_b64(atlas),
            tileMax=round_list(peaks.reshape(-1), 4),
            side=side,
            block=block,
            full=png_b64(full),
            fullMax=round(float(peak), 6),
        )
    body = (
        "<div class='bar'><b id='ttl'></b><button id='png'>Save PNG</button></div><div class='note' id='hint'></div>"
        "<div class='scroll' style='max-height:520px'><canvas id='grid'></canvas></div>"
        "<div class='bar'><b id='bigcap'></b></div><div class='note' id='bignote'></div>"
        "<div class='scroll' id='bigbox' style='max-height:720px'><canvas id='big'></canvas></div>"
    )
    return html_page(title or "Model view", payload, body, _SCRIPT)


_SCRIPT = r"""
const L=D.L,H=D.H,n=D.n,TW=64,GAP=6,ML=58,MT=18,grid=document.getElementById('grid'),big=document.getElementById('big');
const GW=ML+H*(TW+GAP),GH=MT+L*(TW+GAP);const gx=hidpi(grid,GW,GH);
let S=null,atlas=null,atlasVals=null,full=null,fullVals=null,shown=D.sel.slice();
document.getElementById('ttl').textContent=(D.title||'Model view')+' — '+L+' layers × '+H+' heads';
document.getElementById('hint').textContent=(D.mode==='lines'
 ?'Each thumbnail: queries on the left, keys on the right, line opacity = weight (lines below '+D.minWeight+' omitted). '
 :'More than '+D.linesMax+' positions: thumbnails are heatmaps (rows = queries, columns = keys), each pixel the maximum over '+D.block+'×'+D.block+' positions, each scaled to its own maximum. ')
 +'Click a thumbnail to enlarge it. Layers and heads are numbered from 1.';
function cell(l,h){return [ML+h*(TW+GAP),MT+l*(TW+GAP)];}
function drawGrid(){gx.fillStyle='#fff';gx.fillRect(0,0,GW,GH);gx.font='11px system-ui,sans-serif';gx.fillStyle='#444';
 gx.textAlign='center';gx.textBaseline='middle';for(let h=0;h<H;h++)gx.fillText('head '+(h+1),cell(0,h)[0]+TW/2,MT/2);
 gx.textAlign='right';for(let l=0;l<L;l++)gx.fillText('layer '+(l+1),ML-6,cell(l,0)[1]+TW/2);
 for(let l=0;l<L;l++)for(let h=0;h<H;h++){const [x,y]=cell(l,h);
  if(D.mode==='lines'){drawLines(gx,S,l*H+h,D.colors[h],{x1:x+5,x2:x+TW-5,y0:y+2,rowL:(TW-4)/n,rowR:(TW-4)/n,lw:1},-1);}
  else{gx.imageSmoothingEnabled=false;gx.drawImage(atlas,h*D.side,l*D.side,D.side,D.side,x,y,TW,TW);}
  const on=(l===shown[0]&&h===shown[1]);gx.strokeStyle=on?'#d62728':'#ddd';gx.lineWidth=on?3:1;gx.strokeRect(x-.5,y-.5,TW+1,TW+1);}}
function hit(e){const r=grid.getBoundingClientRect(),x=e.clientX-r.left-ML,y=e.clientY-r.top-MT;
 const h=Math.floor(x/(TW+GAP)),l=Math.floor(y/(TW+GAP));if(h<0||l<0||h>=H||l>=L||x-h*(TW+GAP)>TW||y-l*(TW+GAP)>TW)return null;return [l,h];}
grid.onmousemove=e=>{const c=hit(e);tip(e,c?'layer '+(c[0]+1)+', head '+(c[1]+1)+' ('+(c[0]+1)+'-'+(c[1]+1)+'): click to enlarge':null);};
grid.onmouseleave=e=>tip(e,null);
grid.onclick=e=>{const c=hit(e);if(c){shown=c;drawGrid();enlarge();}};
const FONT='11px system-ui,sans-serif';
function enlargeLines(l,h){const probe=big.getContext('2d');probe.font=FONT;const ROW=16,w=labelWidth(probe,D.labels,150);
 const x1=8+w+8,x2=x1+260,xr=x2+8,W=xr+w+8,Hh=4+ROW*n+6,c=hidpi(big,W,Hh),g={x1:x1,x2:x2,y0:4,rowL:ROW,rowR:ROW,lw:2};let act=-1;
 function draw(){c.fillStyle='#fff';c.fillRect(0,0,W,Hh);c.font=FONT;c.textBaseline='middle';
  if(act>=0){c.fillStyle='#ffefb0';c.fillRect(4,4+ROW*act,x1-8,ROW);}c.fillStyle='#222';
  c.textAlign='right';D.labels.forEach((s,i)=>c.fillText(fit(c,s,w),x1-6,4+ROW*(i+.5)));
  c.textAlign='left';D.labels.forEach((s,i)=>c.fillText(fit(c,s,w),xr,4+ROW*(i+.5)));drawLines(c,S,l*H+h,D.colors[h],g,act);}
 draw();big.onmousemove=e=>{const r=big.getBoundingClientRect(),x=e.clientX-r.left,row=Math.floor((e.clientY-r.top-4)/ROW);
  const a=(x<x1&&row>=0&&row<n)?row:-1;if(a!==act){act=a;draw();}tip(e,a>=0?D.labels[a]+' (position '+(a+1)+')':null);};
 big.onmouseleave=e=>{act=-1;draw();tip(e,null);};}
function enlargeHeat(img,vals,side,block,vmax,labelsOf){const c0=big.getContext('2d');c0.font=FONT;
 const names=[];for(let i=0;i<side;i++)names.push(labelsOf(i));const cs=Math.max(2,Math.min(18,Math.floor(720/side)));
 const step=Math.max(1,Math.ceil(12/cs)),wl=labelWidth(c0,names,110),ox=wl+10,oy=wl+10,W=ox+side*cs+8,Hh=oy+side*cs+8,c=hidpi(big,W,Hh);
 c.fillStyle='#fff';c.fillRect(0,0,W,Hh);c.imageSmoothingEnabled=false;c.drawImage(img,ox,oy,side*cs,side*cs);c.font=FONT;c.fillStyle='#222';
 c.textBaseline='middle';for(let i=0;i<side;i+=step){c.textAlign='right';c.fillText(fit(c,names[i],wl),ox-4,oy+cs*(i+.5));
  c.save();c.translate(ox+cs*(i+.5),oy-4);c.rotate(-Math.PI/2);c.textAlign='left';c.fillText(fit(c,names[i],wl),0,0);c.restore();}
 big.onmousemove=e=>{const r=big.getBoundingClientRect(),i=Math.floor((e.clientY-r.top-oy)/cs),j=Math.floor((e.clientX-r.left-ox)/cs);
  if(i<0||j<0||i>=side||j>=side){tip(e,null);return;}const v=vals[i*side+j]/255*vmax;
  tip(e,'from '+names[i]+'\nto '+names[j]+'\n'+(block>1?'max ':'')+'weight ≈ '+v.toFixed(3));};big.onmouseleave=e=>tip(e,null);}
function span(i,b){const a=i*b,z=Math.min(n,a+b)-1;return a===z?D.labels[a]+' ('+(a+1)+')':D.labels[a]+'…'+D.labels[z]+' ('+(a+1)+'–'+(z+1)+')';}
function enlarge(){const [l,h]=shown;document.getElementById('bigcap').textContent='Layer '+(l+1)+', head '+(h+1)+' ('+(l+1)+'-'+(h+1)+')';
 const note=document.getElementById('bignote');
 if(D.mode==='lines'){note.textContent='Hover a token on the left to see only its lines.';enlargeLines(l,h);return;}
 if(l===D.sel[0]&&h===D.sel[1]){note.textContent='Full resolution, scaled to this head\'s maximum ('+D.fullMax.toFixed(3)+'). Rows = queries, columns = keys; hover for weights.';
  enlargeHeat(full,fullVals,n,1,D.fullMax,i=>D.labels[i]+' ('+(i+1)+')');return;}
 const tile=document.createElement('canvas');tile.width=D.side;tile.height=D.side;tile.getContext('2d').drawImage(atlas,h*D.side,l*D.side,D.side,D.side,0,0,D.side,D.side);
 const vals=new Uint8Array(D.side*D.side);for(let i=0;i<D.side;i++)for(let j=0;j<D.side;j++)vals[i*D.side+j]=atlasVals[(l*D.side+i)*atlas.width+h*D.side+j];
 note.textContent='Pooled preview: each cell is the maximum over '+D.block+'×'+D.block+' tokens. Choose layer '+(l+1)+' and head '+(h+1)+' in the page controls for full resolution.';
 enlargeHeat(tile,vals,D.side,D.block,D.tileMax[l*H+h],i=>span(i,D.block));}
if(D.mode==='lines'){S=unpack(D.lines);drawGrid();enlarge();}
else{grayImage(D.atlas,(c,v)=>{atlas=c;atlasVals=v;grayImage(D.full,(c2,v2)=>{full=c2;fullVals=v2;drawGrid();enlarge();});});}
document.getElementById('png').onclick=()=>savePNG([grid,big],'model-view');
"""
