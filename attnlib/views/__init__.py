"""Views of attention, each a function from arrays (or a RunResult) to an object that shows itself in a notebook
(Jupyter, JupyterLab, VS Code, Colab; offline: everything inlined) and has .save_html(path).

`head_view`, `model_view` and `neuron_view` take any model's attention as bertviz does (`head_view` and `model_view`
take bertviz's arguments, in its order: a pair's `sentence_b_start`, `display_mode`, `html_action`, an
encoder-decoder's `encoder_attention`, `decoder_attention` and `cross_attention`, ...); every figure builder of the
modules here (`special`, `deps`, `positions`, `norms`, `probe`, ...) returns a `Figure`, a plotly Figure that
shows itself the same way. Needs the `views` extra (plotly).
"""

from attnlib.views.display import View
from attnlib.views.figure import Figure, as_figure
from attnlib.views.head_view import head_view
from attnlib.views.model_view import model_view
from attnlib.views.neuron_view import neuron_view

__all__ = ["Figure", "View", "as_figure", "head_view", "model_view", "neuron_view"]
