"""Views that show themselves in a notebook (Jupyter, JupyterLab, VS Code, Colab) and save as a page of their own.

Each view is one self-contained HTML page: its data, its JavaScript and, for a figure, plotly.js, all inlined; it
loads nothing. A notebook shows it in an iframe whose `srcdoc` is that page, so the page runs in a document of its
own: it needs no require.js (which classic Notebook defines and JupyterLab, VS Code and Colab do not), no CDN and no
network, the front end does not have to run the output's scripts itself (the iframe's document runs them), and its
element ids and styles meet no other output's. The frame takes the page's height once drawn. The objects import no
IPython: front ends ask them for `_repr_html_` or `_repr_mimebundle_`.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

# The frame's onload: fit its height to the page's, and to a horizontal scroll bar's when the page is wider than the
# output (innerHeight - clientHeight; 0 where scroll bars overlay the page), now and whenever the page's size
# changes. A srcdoc page has the notebook's origin, so the frame can read it.
FIT_HEIGHT = (
    "try{const f=this,w=f.contentWindow,d=f.contentDocument.documentElement,"
    "fit=()=>{f.style.height=Math.ceil(d.getBoundingClientRect().height+w.innerHeight-d.clientHeight)+'px'};"
    "fit();new w.ResizeObserver(fit).observe(d)}catch(e){}"
)


def framed(page: str, height: int) -> str:
    """A notebook output showing `page` in an iframe of its own, `height` px high until the page has been measured."""
    return (
        f'<iframe srcdoc="{html.escape(page)}" style="width:100%;height:{int(height)}px;border:0" '
        f'onload="{html.escape(FIT_HEIGHT)}"></iframe>'
    )


class NotebookView:
    """What every view shares: shown in a notebook by an iframe of its page, written to a file by save_html."""

    # Front ends call _repr_mimebundle_; this stops IPython from using a base class's own display hook instead
    # (plotly's Figure has one, which shows the figure through plotly's renderers: require.js, a CDN in Colab).
    _ipython_display_ = None

    def page(self) -> str:
        """The view as a complete HTML document that loads nothing."""
        raise NotImplementedError

    def frame_height(self) -> int:
        """The frame's height in px before the page has been measured (an estimate)."""
        return 480

    def summary(self) -> str:
        """One line that names the view (its plain-text form)."""
        return type(self).__name__

    def _repr_html_(self) -> str:
        return framed(self.page(), self.frame_height())

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        return {"text/html": self._repr_html_(), "text/plain": self.summary()}

    def save_html(self, path: str | Path) -> Path:
        """Write the page to `path` (it opens offline in any browser); returns the path."""
        target = Path(path)
        target.write_text(self.page(), encoding="utf-8")
        return target


@dataclass(frozen=True, repr=False)
class View(NotebookView):
    """A canvas view (head, model or neuron view): its page and a first guess at its height."""

    html: str
    height: int
    description: str

    @property
    def data(self) -> str:
        """The page's HTML, as `.data` of the IPython HTML object that bertviz returns for html_action='return'."""
        return self.html

    def page(self) -> str:
        return self.html

    def frame_height(self) -> int:
        return self.height

    def summary(self) -> str:
        return self.description

    def __repr__(self) -> str:
        return f"<{self.description}>"


HTML_ACTIONS = ("view", "return")


def check_html_action(html_action: str) -> None:
    """bertviz's html_action: 'view' and 'return' both give the View (it shows itself as a cell's value; its .data is
    its page, as bertviz's returned HTML object's is), nothing else."""
    if html_action not in HTML_ACTIONS:
        raise ValueError(f"html_action must be one of {list(HTML_ACTIONS)}, not {html_action!r}")
