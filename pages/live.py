"""Live attention: type a sentence or a pair and see each head."""

import streamlit as st

from figures.heatmap import attention_heatmap
from ui.live_inputs import run_or_explain, text_inputs
from ui.model_sidebar import current_model

st.title("Live attention")
lm = current_model()
text_a, text_b = text_inputs()
result = run_or_explain(lm.facts.name, text_a, text_b)
if result is not None:
    st.caption("Layers and heads are numbered from 1, as in Clark et al. (2019).")
    c1, c2 = st.columns(2)
    layer = c1.slider("Layer", 1, lm.facts.n_layers, 1, key="layer")
    head = c2.slider("Head", 1, lm.facts.n_heads, 1, key="head")
    fig = attention_heatmap(result.attentions[layer - 1, head - 1], result.tokens, result.tokens,
                            f"Layer {layer}, head {head}")
    st.plotly_chart(fig, key="live_heatmap")
