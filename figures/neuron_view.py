"""Neuron view: for one head and query token, the query vector, each key vector, q×k, the scores q·k/√d and their softmax."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .canvas_html import html_page, round_list


@dataclass
class NeuronScores:
    """The arithmetic of one attention row, from the captured query and key vectors."""

    query: np.ndarray  # [d]
    keys: np.ndarray  # [n, d]
    products: np.ndarray  # [n, d] elementwise q × k
    scores: np.ndarray  # [n] q·k / sqrt(d)
    softmax: np.ndarray  # [n]


def neuron_scores(queries: np.ndarray, keys: np.ndarray, query_index: int) -> NeuronScores:
    """q×k, q·k/√d and softmax for query position `query_index` of one head's [n, d] queries and keys (float64)."""
    q = np.asarray(queries[query_index], dtype=np.float64)
    k = np.asarray(keys, dtype=np.float64)
    products = k * q
    scores = products.sum(axis=1) / np.sqrt(q.size)
    e = np.exp(scores - scores.max())
    return NeuronScores(q, k, products, scores, e / e.sum())


def neuron_view_html(
    queries: np.ndarray,
    keys: np.ndarray,
    labels: Sequence[str],
    query_index: int,
    layer: int,
    head: int,
    attention_row: np.ndarray | None = None,
    title: str = "",
) -> str:
    """Self-contained HTML of the neuron view of one head ([n, d] queries and keys; 0-based layer, head, query)."""
    ns = neuron_scores(queries, keys, query_index)
    payload = {
        "title": title,
        "layer": layer + 1,
        "head": head + 1,
        "labels": list(labels),
        "qi": query_index,
        "d": int(ns.query.size),
        "q": round_list(ns.query, 3),
        "k": round_list(ns.keys.reshape(-1), 3),
        "scores": round_list(ns.scores, 3),
        "softmax": round_list(ns.softmax, 4),
        "attn": round_list(attention_row, 4) if attention_row is not None else None,
        "diff": float(np.abs(ns.softmax - attention_row).max()) if attention_row is not None else None,
    }
    body = (
        "<div class='bar'><b id='ttl'></b><button id='png'>Save PNG</button></div><div class='note' id='hint'></div>"
        "<div class='scroll' style='max-height:680px'><canvas id='cv'></canvas></div>"
    )
    return html_page(title or f"Neuron view {layer + 1}-{head + 1}", payload, body, _SCRIPT)


_SCRIPT = r"""
const n=D.labels.length,d=D.d,q=D.q,K=D.k,cv=document.getElementById('cv');
const P=new Float64Array(n*d);let pmax=1e-9,kmax=1e-9,smin=0,smax=1e-9;
for(let j=0;j<n;j++)for(let c=0;c<d;c++){const v=q[c]*K[j*d+c];P[j*d+c]=v;pmax=Math.max(pmax,Math.abs(v));kmax=Math.max(kmax,Math.abs(K[j*d+c]));}
for(const v of q)kmax=Math.max(kmax,Math.abs(v));for(const s of D.scores){smin=Math.min(smin,s);smax=Math.max(smax,s);}
const RH=n>120?12:16,CW=Math.max(3,Math.min(8,Math.floor(260/d))),FONT=(n>120?10:12)+'px system-ui,sans-serif';
const probe=cv.getContext('2d');probe.font=FONT;const wl=labelWidth(probe,D.labels,130);
const xk=8+wl+8,xp=xk+d*CW+16,xs=xp+d*CW+16,SW=80,xm=xs+SW+16,MW=110,W=xm+MW+60,y0=58,Hh=y0+RH*n+8;
document.getElementById('ttl').textContent=(D.title||'Neuron view')+' — layer '+D.layer+', head '+D.head+', query “'+D.labels[D.qi]+'” (position '+(D.qi+1)+')';
document.getElementById('hint').textContent='Blue = positive, orange = negative, darker = larger magnitude. The score of each key is the sum of its q×k row divided by √'+d+'; '+
 'softmax of the scores is the attention row'+(D.diff!==null?' (largest difference from the model\'s own attention row: '+D.diff.toExponential(1)+')':'')+'. Hover for values.';
function col(v,s){const a=Math.min(1,Math.abs(v)/s);return v>=0?'rgba(31,119,180,'+a+')':'rgba(255,127,14,'+a+')';}
const c=hidpi(cv,W,Hh);c.fillStyle='#fff';c.fillRect(0,0,W,Hh);c.font=FONT;c.textBaseline='middle';c.fillStyle='#222';
c.textAlign='left';c.fillText('query q',8,12);for(let i=0;i<d;i++){c.fillStyle=col(q[i],kmax);c.fillRect(xk+i*CW,4,CW-1,16);}
c.fillStyle='#222';c.fillText('keys k',xk,y0-14);c.fillText('q × k',xp,y0-14);c.fillText('q·k / √'+d,xs,y0-14);c.fillText('softmax',xm,y0-14);
c.fillStyle='#ffefb0';c.fillRect(4,y0+RH*D.qi,xk-8,RH);
for(let j=0;j<n;j++){const y=y0+RH*j;c.fillStyle='#222';c.textAlign='right';c.fillText(fit(c,D.labels[j],wl),xk-6,y+RH/2);
 for(let i=0;i<d;i++){c.fillStyle=col(K[j*d+i],kmax);c.fillRect(xk+i*CW,y+1,CW-1,RH-2);c.fillStyle=col(P[j*d+i],pmax);c.fillRect(xp+i*CW,y+1,CW-1,RH-2);}
 const s=D.scores[j],zero=xs+SW*(-smin)/(smax-smin),x=xs+SW*(s-smin)/(smax-smin);c.fillStyle=s>=0?'#1f77b4':'#ff7f0e';
 c.fillRect(Math.min(zero,x),y+2,Math.max(1,Math.abs(x-zero)),RH-4);
 const p=D.softmax[j];c.fillStyle='#1f77b4';c.fillRect(xm,y+2,Math.max(1,MW*p),RH-4);c.fillStyle='#222';c.textAlign='left';
 c.fillText(p.toFixed(3),xm+MW+4,y+RH/2);}
cv.onmousemove=e=>{const r=cv.getBoundingClientRect(),x=e.clientX-r.left,y=e.clientY-r.top,j=Math.floor((y-y0)/RH);
 if(y<24&&x>=xk&&x<xk+d*CW){const i=Math.floor((x-xk)/CW);tip(e,'neuron '+(i+1)+': q = '+q[i].toFixed(3));return;}
 if(j<0||j>=n){tip(e,null);return;}const key=D.labels[j]+' (position '+(j+1)+')';
 for(const [x0,name] of [[xk,'k'],[xp,'q×k']])if(x>=x0&&x<x0+d*CW){const i=Math.floor((x-x0)/CW);
  tip(e,key+'\nneuron '+(i+1)+': q = '+q[i].toFixed(3)+', k = '+K[j*d+i].toFixed(3)+', q×k = '+P[j*d+i].toFixed(3));return;}
 if(x>=xs){tip(e,key+'\nscore q·k/√d = '+D.scores[j].toFixed(3)+'\nsoftmax = '+D.softmax[j].toFixed(4)+(D.attn?'\nmodel attention = '+D.attn[j].toFixed(4):''));return;}
 tip(e,key);};
cv.onmouseleave=e=>tip(e,null);
document.getElementById('png').onclick=()=>savePNG([cv],'neuron-view-'+D.layer+'-'+D.head);
"""
