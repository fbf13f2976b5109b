"""Shared pieces of the self-contained canvas views: the HTML shell, compact data packing, colours, PNG export."""

from __future__ import annotations

import base64
import html
import io
import json

import numpy as np

# One colour per head (d3 category10, then eight more), cycled past sixteen heads.
HEAD_COLORS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#393b79",
    "#e7ba52",
    "#843c39",
    "#5254a3",
    "#637939",
    "#7b4173",
)
LEVELS = 255  # weights travel as bytes: round(weight * 255)


def head_color(head: int) -> str:
    """The colour of a head (0-based) in every view."""
    return HEAD_COLORS[head % len(HEAD_COLORS)]


def quantize(weights: np.ndarray) -> np.ndarray:
    """Attention weights in [0, 1] as bytes 0..255."""
    return np.clip(np.rint(np.asarray(weights, dtype=np.float32) * LEVELS), 0, LEVELS).astype(np.uint8)


def pack_sparse(maps: np.ndarray, min_weight: float) -> dict:
    """Pack maps [m, rows, cols] as row counts (uint16), key columns (uint16) and byte weights, keeping weights >= min_weight."""
    maps = np.asarray(maps, dtype=np.float32)
    m, rows, cols = maps.shape
    keep = (
        maps >= (max(1, int(np.ceil(min_weight * LEVELS - 1e-6))) - 0.5) / LEVELS
    )  # the weights that round to >= the cut
    counts = keep.sum(axis=-1, dtype=np.uint16).reshape(-1)
    _, _, col_idx = np.nonzero(keep)  # row-major order: map, then row, then column
    payload = counts.astype("<u2").tobytes() + col_idx.astype("<u2").tobytes() + quantize(maps[keep]).tobytes()
    return {"m": m, "rows": rows, "cols": cols, "nnz": int(col_idx.size), "b64": base64.b64encode(payload).decode()}


def png_b64(gray: np.ndarray) -> str:
    """A 2-D uint8 array as a base64 grayscale PNG (decoded by the browser, colourised in JS)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(gray, dtype=np.uint8), mode="L").save(buf, format="PNG", compress_level=1)
    return base64.b64encode(buf.getvalue()).decode()


def round_list(values: np.ndarray, decimals: int) -> list:
    """Rounded numbers for JSON (short text, exact enough to read)."""
    return np.round(np.asarray(values, dtype=np.float64), decimals).tolist()


def _json_for_script(data: dict) -> str:
    """JSON that is safe inside a <script> element."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("</", "<\\/")


COMMON_CSS = """
body{margin:0;font:12px system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;color:#222;background:#fff}
.bar{display:flex;flex-wrap:wrap;gap:6px 12px;align-items:center;padding:4px 2px 6px}
.bar button{font:inherit;padding:2px 8px;border:1px solid #bbb;border-radius:4px;background:#f7f7f7;cursor:pointer}
.sw{display:inline-block;min-width:18px;padding:1px 3px;margin:1px;border-radius:3px;color:#fff;text-align:center;cursor:pointer;user-select:none}
.sw.off{opacity:.25}
.note{color:#666}
.scroll{overflow:auto;border:1px solid #eee}
#tip{position:fixed;pointer-events:none;background:rgba(255,255,255,.96);border:1px solid #999;border-radius:4px;
padding:3px 6px;font-size:11px;display:none;white-space:pre;z-index:9;box-shadow:0 1px 4px rgba(0,0,0,.2)}
"""

# Helpers every view uses: data decoding, hi-dpi canvases, tooltip, PNG export, and the two-column line drawing.
COMMON_JS = r"""
const D=JSON.parse(document.getElementById('data').textContent);
function bytesOf(b64){const s=atob(b64),u=new Uint8Array(s.length);for(let i=0;i<s.length;i++)u[i]=s.charCodeAt(i);return u;}
function unpack(p){const u=bytesOf(p.b64),R=p.m*p.rows,cnt=new Uint16Array(u.buffer,0,R),start=new Uint32Array(R+1);
 let t=0;for(let r=0;r<R;r++){start[r]=t;t+=cnt[r];}start[R]=t;
 return {start:start,col:new Uint16Array(u.buffer,2*R,t),w:new Uint8Array(u.buffer,2*R+2*t,t),rows:p.rows,cols:p.cols};}
function hidpi(cv,w,h){let r=Math.min(window.devicePixelRatio||1,2);r=Math.max(1,Math.min(r,30000/Math.max(h,1),30000/Math.max(w,1)));
 cv.width=Math.round(w*r);cv.height=Math.round(h*r);cv.style.width=w+'px';cv.style.height=h+'px';
 const c=cv.getContext('2d');c.setTransform(r,0,0,r,0,0);return c;}
const TIP=document.getElementById('tip');
function tip(ev,text){if(!text){TIP.style.display='none';return;}TIP.textContent=text;TIP.style.display='block';
 TIP.style.left=Math.min(ev.clientX+14,window.innerWidth-TIP.offsetWidth-4)+'px';TIP.style.top=(ev.clientY+14)+'px';}
function savePNG(canvases,name){const cs=canvases.filter(c=>c&&c.width>0);const w=Math.max(...cs.map(c=>c.width));
 const h=cs.reduce((s,c)=>s+c.height,0);const out=document.createElement('canvas');out.width=w;out.height=h;
 const x=out.getContext('2d');x.fillStyle='#fff';x.fillRect(0,0,w,h);let y=0;for(const c of cs){x.drawImage(c,0,y);y+=c.height;}
 out.toBlob(b=>{const a=document.createElement('a');a.href=URL.createObjectURL(b);a.download=name+'.png';document.body.appendChild(a);a.click();a.remove();},'image/png');}
function labelWidth(ctx,labels,cap){let m=20;for(const s of labels){m=Math.max(m,ctx.measureText(s).width);if(m>=cap)return cap;}return Math.ceil(m);}
function fit(ctx,s,w){if(ctx.measureText(s).width<=w)return s;while(s.length>1&&ctx.measureText(s+'…').width>w)s=s.slice(0,-1);return s+'…';}
// Lines from left rows to right rows; g = geometry {x1,x2,y0,rowL,rowR}; draws sparse map k of S, only row `only` when >=0.
function drawLines(ctx,S,k,color,g,only){const base=k*S.rows;ctx.strokeStyle=color;ctx.lineWidth=g.lw||2;
 if(only>=0){const r=base+only;for(let e=S.start[r];e<S.start[r+1];e++){ctx.globalAlpha=S.w[e]/255;ctx.beginPath();
  ctx.moveTo(g.x1,g.y0+g.rowL*(only+.5));ctx.lineTo(g.x2,g.y0+g.rowR*(S.col[e]+.5));ctx.stroke();}ctx.globalAlpha=1;return;}
 const B=24,paths=[];for(let b=0;b<B;b++)paths.push(new Path2D());
 for(let i=0;i<S.rows;i++){const r=base+i,y=g.y0+g.rowL*(i+.5);for(let e=S.start[r];e<S.start[r+1];e++){
  const p=paths[Math.min(B-1,(S.w[e]*B/256)|0)];p.moveTo(g.x1,y);p.lineTo(g.x2,g.y0+g.rowR*(S.col[e]+.5));}}
 for(let b=0;b<B;b++){ctx.globalAlpha=(b+.5)/B;ctx.stroke(paths[b]);}ctx.globalAlpha=1;}
// Blues colour map for heatmaps, 256 entries [r,g,b].
const BLUES=(()=>{const s=[[247,251,255],[198,219,239],[107,174,214],[33,113,181],[8,48,107]];const o=[];
 for(let v=0;v<256;v++){const t=v/255*(s.length-1),i=Math.min(s.length-2,Math.floor(t)),f=t-i;
 o.push(s[i].map((a,c)=>Math.round(a+(s[i+1][c]-a)*f)));}return o;})();
function grayImage(b64,done){const im=new Image();im.onload=()=>{const c=document.createElement('canvas');c.width=im.width;c.height=im.height;
 const x=c.getContext('2d');x.drawImage(im,0,0);const d=x.getImageData(0,0,c.width,c.height),vals=new Uint8Array(c.width*c.height);
 for(let p=0;p<d.data.length;p+=4){const v=d.data[p],col=BLUES[v];vals[p>>2]=v;d.data[p]=col[0];d.data[p+1]=col[1];d.data[p+2]=col[2];d.data[p+3]=255;}
 x.putImageData(d,0,0);done(c,vals);};im.src='data:image/png;base64,'+b64;}
"""


def html_page(title: str, data: dict, body: str, script: str, css: str = "") -> str:
    """A complete HTML document: inline CSS, the data as JSON, common helpers and the view's script; loads nothing."""
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{COMMON_CSS}{css}</style></head><body>"
        f"{body}<div id='tip'></div>"
        f"<script type='application/json' id='data'>{_json_for_script(data)}</script>"
        f"<script>{COMMON_JS}{script}</script></body></html>"
    )
