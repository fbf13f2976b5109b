// One Plotly figure drawn in the app's own page (no iframe) by a plotly.js bundle of the traces the figures use
// (scatter, bar, heatmap; scripts/plotly_bundle). The bundle (data.bundle, in static/) is loaded once per visit:
// 1.2 MB, 0.4 MB as served, where st.plotly_chart loads the whole of plotly.js (4.7 MB, served uncompressed). A
// figure on the screen or within NEAR of it is drawn at once; one further down when it comes near, or LATER_MS
// after the bundle has loaded, in an idle moment, so that the figures a visitor sees first are not kept waiting.
const NEAR = "400px";
const LATER_MS = 1500;
const DEFAULT_HEIGHT = 450; // plotly's, for a figure that sets none
const whenIdle = window.requestIdleCallback ?? ((then) => setTimeout(then, 0)); // not every Safari has it

// Plotly's toolbar with a full-screen button added (for a projector); the PNG button stays.
const FULL_SCREEN = {
  name: "full-screen",
  title: "Full screen",
  icon: { width: 24, height: 24, path: "M3 3h7v2H5v5H3zm11 0h7v7h-2V5h-5zM3 14h2v5h5v2H3zm16 0h2v7h-7v-2h5z" },
  click: (plot) => plot.parentElement.requestFullscreen(),
};
const CONFIG = { displaylogo: false, modeBarButtonsToAdd: [FULL_SCREEN] };

function loadPlotly(bundle) {
  window.attnPlotly ??= new Promise((resolve, reject) => {
    const script = document.createElement("script");
    script.src = new URL(bundle, document.baseURI).href;
    script.onload = () => resolve(window.Plotly);
    script.onerror = () => {
      window.attnPlotly = undefined; // the next figure tries again
      reject(new Error(`could not load ${bundle}`));
    };
    document.head.appendChild(script);
  });
  return window.attnPlotly;
}

// A figure's place on the page: its wrapper (keeps the figure's height before it is drawn, goes full screen) and the
// plot inside it; `show` draws the newest figure when the place is near the screen or the page is idle.
class FigurePlace {
  constructor(parentElement) {
    this.wrapper = document.createElement("div");
    this.wrapper.className = "attn-figure";
    this.wrapper.style.background = "white";
    this.plot = document.createElement("div");
    this.wrapper.appendChild(this.plot);
    parentElement.appendChild(this.wrapper);
    this.near = false;
    this.figure = null; // the figure still to draw
    this.nearness = new IntersectionObserver(([entry]) => this.#seen(entry.isIntersecting), { rootMargin: NEAR });
    this.nearness.observe(this.wrapper);
    this.resized = new ResizeObserver(() => this.plot.dataset.drawn && window.Plotly.Plots.resize(this.plot));
    this.resized.observe(this.wrapper);
    this.wrapper.addEventListener("fullscreenchange", () => this.#fitSize());
  }

  show(figure, bundle, onClick = null) {
    this.figure = figure;
    this.bundle = bundle;
    this.onClick = onClick; // a click on a point: onClick({index: its customdata, curve}), when the page asks
    this.height = figure.layout.height ?? DEFAULT_HEIGHT;
    this.wrapper.style.minHeight = `${this.height}px`;
    delete this.plot.dataset.drawn;
    if (this.near) this.#draw();
    // Counted from the bundle's arrival, so that on a slow start the figures on the screen still come first.
    else {
      const later = () => setTimeout(() => whenIdle(() => this.figure && this.#draw()), LATER_MS);
      loadPlotly(bundle).then(later, () => {});
    }
  }

  #seen(near) {
    this.near = near;
    if (near && this.figure) this.#draw();
  }

  async #draw() {
    const figure = this.figure;
    this.figure = null;
    try {
      const Plotly = await loadPlotly(this.bundle);
      await Plotly.react(this.plot, figure.data, figure.layout, CONFIG);
      if (!this.listening) {
        this.listening = true;
        this.plot.on("plotly_click", (event) => {
          const point = event.points[0];
          if (this.onClick && point) this.onClick({ index: point.customdata ?? null, curve: point.curveNumber });
        });
      }
    } catch (error) {
      this.plot.textContent = `The figure could not be drawn (${error.message}). Reload the page to try again.`;
      return;
    }
    // When it was drawn (ms since navigation): what the tests and the classroom benchmark wait for.
    if (this.figure === null) this.plot.dataset.drawn = String(Math.round(performance.now()));
  }

  // The screen's size while the figure is full screen; else its own height and the page's width.
  #fitSize() {
    const full = document.fullscreenElement === this.wrapper;
    const size = full ? { width: window.innerWidth, height: window.innerHeight } : { width: null, height: this.height };
    window.Plotly.relayout(this.plot, size);
  }

  unmount() {
    this.nearness.disconnect();
    this.resized.disconnect();
    window.Plotly?.purge(this.plot);
  }
}

export default function ({ data, parentElement, setTriggerValue }) {
  loadPlotly(data.bundle).catch(() => {}); // start loading at once; a failure shows where the figure would be
  parentElement.attnFigure ??= new FigurePlace(parentElement);
  const place = parentElement.attnFigure;
  place.show(JSON.parse(data.figure), data.bundle, data.clicks ? (point) => setTriggerValue("click", point) : null);
  return () => place.unmount();
}
